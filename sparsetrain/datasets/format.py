"""The on-disk dataset format (version 3): a folder of .npy arrays described by ``meta.json``.

One layout for every graph: a homogeneous graph is the one-type case, node type ``"_N"`` and edge type
``("_N", "_E", "_N")``. The topology is one CSC whose columns are (edge type, dst node) pairs, edge-type-major
in the order of ``edge_types``: edge type ``et`` owns ``node_types[et[2]]`` consecutive columns (GraphBolt's
flat layout; for one type, the plain CSC)::

    meta.json           sizes, types, provenance, sha256 of every array file
    indptr.npy          int64 [C + 1]     column pointers, C = sum of node_types[dst] over the edge types
    indices.npy         int32 [E]         source ids local to the edge type's source type, sorted within a column
                                          (int64 when a node type has >= 2**31 nodes)
    edge_weight.npy     float32 [E]       optional
    edge_ids.npy        int64 [E]         optional: each edge's row in its edge type's imported edge list
    edge features       float32|float16 [E_t, F_t] per edge type, optional, that type's edges in CSC order:
                        edge_features.npy (one edge type), edge.<src>___<rel>___<dst>.features.npy
    node features       float32|float16 [N_t, D_t] per node type, optional: features.npy (one node type),
                        node.<type>.features.npy
    labels              int64 [N_t] per node type, optional, -1 = no label: labels.npy, node.<type>.labels.npy
    node times          int64|float64 [N_t] per node type, optional: node_time.npy, node.<type>.time.npy
    edge times          int64|float64 [E_t] per edge type, optional, that type's edges in CSC order (as its edge
                        features): edge_time.npy (one edge type), edge.<src>___<rel>___<dst>.time.npy
    train_idx.npy, val_idx.npy, test_idx.npy    int64, sorted: ids of target_type nodes
    original_ids.npy    int64 [N]         one node type only: the imported id of each node when reordered
    clusters.npy        int64 [N]         one node type only, with reorder="cluster"
    link_<split>_<pos|neg>.npy   int64 [2, E]   link-prediction edges of one edge type; the graph then holds no
                        val/test edge (datasets/edge_split.py)

``meta.json`` (besides ``format``, ``format_version``, ``created_by``, ``name``, ``source``)::

    node_types    {type: count}                               ({"_N": N} for a homogeneous graph)
    edge_types    [{src, rel, dst, num_edges, features, time}]  column order; features, time: a file name or null
    features      {type: file}                                node types with features
    node_time     {type: file}                                node types with node times (absent: none)
    labels        {type: {file, num_classes}}                 node types with labels
    target_type   the node type the splits refer to (null: no splits)
    splits, splits_from, directed, has_edge_weights, permutation, clusters, link_split, link_split_from
    files         {file: {dtype, shape, sha256}}              every array of the folder

The file names above are what the writer chooses; the reader takes every name from ``meta.json``. Folders of
versions 1 (homogeneous, the same files) and 2 (typed, a CSC per edge type) still load: :func:`read_meta` reads
their ``meta.json`` into this shape, :mod:`~sparsetrain.datasets.legacy` opens version 2's per-type CSC files,
and ``sparsetrain info`` says which version it read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np

from sparsetrain._sigbus import watch
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE, EdgeType, has_types, type_named

FORMAT_NAME = "sparsetrain-graph"
FORMAT_VERSION = 3
"""The version this sparsetrain writes, and the newest it reads (1 and 2 still load)."""
META_FILE = "meta.json"

NODE = NODE_TYPE
"""The node type of a homogeneous graph."""
EDGE: EdgeType = EDGE_TYPE
"""The edge type of a homogeneous graph."""
SEPARATOR = "___"  # OGB's separator in relation folder names

INDPTR = "indptr.npy"
INDICES = "indices.npy"
EDGE_WEIGHT = "edge_weight.npy"
EDGE_IDS = "edge_ids.npy"
FEATURES = "features.npy"
EDGE_FEATURES = "edge_features.npy"
NODE_TIME = "node_time.npy"
EDGE_TIME = "edge_time.npy"
TIME_DTYPES = ("int64", "float64")
LABELS = "labels.npy"
ORIGINAL_IDS = "original_ids.npy"
SPLIT_NAMES = ("train", "val", "test")
LINK_SPLIT_NAMES = ("train", "val", "test")
FEATURE_DTYPES = ("float32", "float16")

_DAMAGED = "the dataset is damaged, re-run `sparsetrain preprocess`"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")


def split_file(name: str) -> str:
    return f"{name}_idx.npy"


def link_file(split: str, kind: str) -> str:
    """``link_<split>_<pos|neg>.npy``: a split's positive or negative edges."""
    return f"link_{split}_{kind}.npy"


def edge_key(edge_type: EdgeType) -> str:
    """``src___rel___dst``: the edge type's name in files (and OGB's relation folders)."""
    return SEPARATOR.join(edge_type)


def node_file(node_type: str, kind: str) -> str:
    """The file of a node type's ``features`` or ``labels`` (the plain names for a homogeneous graph's one type)."""
    return f"{kind}.npy" if node_type == NODE else f"node.{node_type}.{kind}.npy"


def edge_features_file(edge_type: EdgeType) -> str:
    return EDGE_FEATURES if edge_type == EDGE else f"edge.{edge_key(edge_type)}.features.npy"


def node_time_file(node_type: str) -> str:
    return NODE_TIME if node_type == NODE else f"node.{node_type}.time.npy"


def edge_time_file(edge_type: EdgeType) -> str:
    return EDGE_TIME if edge_type == EDGE else f"edge.{edge_key(edge_type)}.time.npy"


def check_type_name(name, what: str) -> str:
    """A node type or relation name usable in a file name: letters, digits, ``_``, ``-``; no ``___``."""
    if not isinstance(name, str) or not _NAME.match(name) or SEPARATOR in name or len(name) > 100:
        raise DatasetError(
            f"{what} {name!r} is not a usable type name; use letters, digits, '_' and '-' only "
            "(no '___', at most 100 characters)"
        )
    return name


def edge_types_of(meta: dict) -> list[EdgeType]:
    return [(e["src"], e["rel"], e["dst"]) for e in meta["edge_types"]]


def count_flag(node_type: str) -> str:
    """The flag that gives a node type's count, in the user's words: ``--num-nodes`` for a homogeneous graph's one
    type, ``--node-count TYPE=N`` for a typed graph's (whose type names are never the reserved ``_N``)."""
    return "--num-nodes" if node_type == NODE else f"--node-count {node_type}=N"


def count_name(node_type: str) -> str:
    """A node type's count in messages: ``num_nodes`` for a homogeneous graph's one type."""
    return "num_nodes" if node_type == NODE else f"the count of node type {node_type!r}"


def user_type_name(node_type: str | None) -> str | None:
    """A node type's name as the user knows it: None for a homogeneous graph's one type ``_N`` (which has no name to
    give), the name itself for a typed graph's (never the reserved ``_N``)."""
    return None if node_type == NODE else node_type


def of_node_type(node_type: str | None, lead: str = " of ", unnamed: str = "") -> str:
    """The words naming a node type in a message: ``" of node type 'paper'"`` (``lead`` first); ``unnamed`` for a
    homogeneous graph's one type (and for None), which has no name to give."""
    named = type_named(node_type or NODE, "")
    return f"{lead}{named}" if named else unnamed


def node_word(node_type: str) -> str:
    """How errors name a node of a type: ``"'paper' node"``; ``"node"`` for a homogeneous graph's one type."""
    name = user_type_name(node_type)
    return "node" if name is None else f"{name!r} node"


def is_homogeneous(meta: dict) -> bool:
    """One node type and one edge type, named as a homogeneous graph's."""
    return not has_types(meta["node_types"], edge_types_of(meta))


def index_dtype(num_nodes: int) -> np.dtype:
    """int32 node ids while they fit, int64 beyond."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def sha256_file(path: Path, chunk_bytes: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def fsync_path(path: Path) -> None:
    """Flush a file or directory entry to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_meta(folder: Path) -> dict:
    """``meta.json`` of a dataset folder, checked, in the version-3 shape whatever version wrote it.

    ``format_version`` stays the version the folder was written in.
    """
    path = folder / META_FILE
    if not folder.is_dir():
        raise DatasetError(f"{folder}: no such dataset folder; create one with `sparsetrain preprocess` or "
                           "`sparsetrain synth`")
    if not path.is_file():
        raise DatasetError(f"{path}: missing; {folder} is not a sparsetrain dataset "
                           "(make one with `sparsetrain preprocess`)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc}); the dataset is damaged, re-run `sparsetrain "
                           "preprocess`") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise DatasetError(f"{path}: field 'format' is not {FORMAT_NAME!r}; this is not a sparsetrain dataset")
    version = meta.get("format_version")
    if not _count(version, 1) or version > FORMAT_VERSION:
        raise DatasetError(
            f"{path}: field 'format_version' is {version!r} but this sparsetrain reads 1 to {FORMAT_VERSION}; "
            "upgrade sparsetrain"
        )
    if version < FORMAT_VERSION:
        meta = _upgrade(meta, path)
    check_meta(meta, path)
    return meta


def _count(value, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _bare_name(name) -> bool:
    """A plain ``.npy`` file name inside the folder: no directory part, not hidden, no traversal."""
    return (
        isinstance(name, str) and name.endswith(".npy") and not name.startswith(".")
        and "/" not in name and "\\" not in name and "\0" not in name and os.path.basename(name) == name
    )


def check_files_field(meta: dict, path: Path) -> None:
    """``meta['files']`` maps plain .npy names inside the folder to ``{dtype, shape, sha256}``."""
    if "files" not in meta:
        raise DatasetError(f"{path}: field 'files' is missing; {_DAMAGED}")
    files = meta["files"]
    if not isinstance(files, dict):
        raise DatasetError(f"{path}: field 'files' is a {type(files).__name__}, not an object of file entries; "
                           f"{_DAMAGED}")
    for name, entry in files.items():
        if not _bare_name(name):
            raise DatasetError(f"{path}: 'files' entry {name!r} is not a plain .npy file name inside the dataset "
                               f"folder; {_DAMAGED}")
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: 'files' entry {name} is not an object with dtype, shape and sha256; "
                               f"{_DAMAGED}")
        for field, ok in (
            ("dtype", isinstance(entry.get("dtype"), str)),
            ("shape", isinstance(entry.get("shape"), list) and all(_count(n) for n in entry["shape"])),
            ("sha256", isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64),
        ):
            if not ok:
                state = "is missing" if field not in entry else f"is {entry[field]!r}"
                raise DatasetError(f"{path}: 'files' entry {name}: field {field!r} {state}; {_DAMAGED}")


def _listed(meta: dict, path: Path, name, what: str) -> None:
    if name not in meta["files"]:
        raise DatasetError(f"{path}: {what} names file {name!r}, which 'files' does not list; {_DAMAGED}")


def check_meta(meta: dict, path: Path) -> None:
    """Every field ``load``/``info`` read is present and typed, names known types, and only files inside the folder."""
    check_files_field(meta, path)
    node_types = _check_node_types(meta, path)
    _check_edge_types(meta, path, node_types)
    if meta["format_version"] != 2:  # version 2 keeps a CSC per edge type, checked by legacy.py
        for required in (INDPTR, INDICES):
            if required not in meta["files"]:
                raise DatasetError(f"{path}: 'files' has no entry for {required}; {_DAMAGED}")
    features, labels = meta.get("features", {}), meta.get("labels", {})
    node_time = meta.get("node_time", {})
    for field, table in (("features", features), ("labels", labels), ("node_time", node_time)):
        if not isinstance(table, dict):
            raise DatasetError(f"{path}: field {field!r} is {table!r}, not an object by node type; {_DAMAGED}")
        for t in table:
            if t not in node_types:
                raise DatasetError(f"{path}: field {field!r} names node type {t!r}, which 'node_types' does not list; "
                                   f"{_DAMAGED}")
    for t, name in features.items():
        _listed(meta, path, name, f"field 'features' of node type {t!r}")
    for t, name in node_time.items():
        _listed(meta, path, name, f"field 'node_time' of node type {t!r}")
    for t, entry in labels.items():
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: field 'labels' of node type {t!r} is not an object with file and "
                               f"num_classes; {_DAMAGED}")
        _listed(meta, path, entry.get("file"), f"field 'labels' of node type {t!r}")
        if not _count(entry.get("num_classes"), 1):
            raise DatasetError(f"{path}: field 'labels' of node type {t!r}: 'num_classes' is "
                               f"{entry.get('num_classes')!r}, not a positive integer; {_DAMAGED}")
    target = meta.get("target_type")
    if target is not None and target not in node_types:
        raise DatasetError(f"{path}: field 'target_type' is {target!r}, which 'node_types' does not list; {_DAMAGED}")
    if target is None and any(split_file(name) in meta["files"] for name in SPLIT_NAMES):
        raise DatasetError(f"{path}: has splits but no 'target_type' they refer to; {_DAMAGED}")
    _check_link_meta(meta, path)
    for field in ("permutation", "clusters"):
        part = meta.get(field)
        if part is None:
            continue
        wanted = ("method", "file") if field == "permutation" else ("file", "count")
        if not isinstance(part, dict) or any(k not in part for k in wanted):
            raise DatasetError(f"{path}: field {field!r} needs {' and '.join(repr(k) for k in wanted)}; {_DAMAGED}")
        if field == "clusters" and not _count(part["count"], 1):
            raise DatasetError(f"{path}: field 'clusters': 'count' is {part['count']!r}, not a positive integer; "
                               f"{_DAMAGED}")
        if len(node_types) != 1:
            raise DatasetError(f"{path}: field {field!r} is for graphs of one node type, but 'node_types' has "
                               f"{len(node_types)}; {_DAMAGED}")
        _listed(meta, path, part["file"], f"field {field!r}")


def _check_node_types(meta: dict, path: Path) -> dict[str, int]:
    node_types = meta.get("node_types")
    if not isinstance(node_types, dict) or not node_types:
        raise DatasetError(f"{path}: field 'node_types' is {node_types!r}, not a non-empty object of node counts by "
                           f"type; {_DAMAGED}")
    for name, count in node_types.items():
        if name != NODE:
            check_type_name(name, f"{path}: node type")
        if not _count(count):
            raise DatasetError(f"{path}: field 'node_types': node type {name!r} has {count!r} nodes, not a "
                               f"non-negative integer; {_DAMAGED}")
    return node_types


def _check_edge_types(meta: dict, path: Path, node_types: dict[str, int]) -> None:
    edge_types = meta.get("edge_types")
    if not isinstance(edge_types, list) or not edge_types:
        raise DatasetError(f"{path}: field 'edge_types' is {edge_types!r}, not a non-empty list of edge types; "
                           f"{_DAMAGED}")
    seen = set()
    for i, entry in enumerate(edge_types):
        named = isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in ("src", "rel", "dst"))
        if not named or not _count(entry.get("num_edges")):
            raise DatasetError(f"{path}: 'edge_types' entry {i} needs string src, rel, dst and a non-negative "
                               f"num_edges; {_DAMAGED}")
        et = (entry["src"], entry["rel"], entry["dst"])
        if et != EDGE:
            check_type_name(et[1], f"{path}: relation")
        for end in (et[0], et[2]):
            if end not in node_types:
                raise DatasetError(f"{path}: edge type {et} names node type {end!r}, which 'node_types' does not "
                                   f"list; {_DAMAGED}")
        if et in seen:
            raise DatasetError(f"{path}: edge type {et} is listed twice in 'edge_types'; {_DAMAGED}")
        seen.add(et)
        for field in ("features", "time"):
            if entry.get(field) is not None:
                _listed(meta, path, entry[field], f"edge type {et}'s {field!r}")


def _check_link_meta(meta: dict, path: Path) -> None:
    links = meta.get("link_split")
    if links is None:
        return
    if not isinstance(links, dict) or any(name not in LINK_SPLIT_NAMES for name in links):
        raise DatasetError(f"{path}: field 'link_split' must map some of {', '.join(LINK_SPLIT_NAMES)} to their edge "
                           f"files; {_DAMAGED}")
    for name, entry in links.items():
        if not isinstance(entry, dict) or entry.get("pos") not in meta["files"]:
            raise DatasetError(f"{path}: field 'link_split': {name!r} has no 'pos' file listed in 'files'; {_DAMAGED}")
        if entry.get("neg") is not None and entry["neg"] not in meta["files"]:
            raise DatasetError(f"{path}: field 'link_split': {name!r} names 'neg' file {entry['neg']!r}, which "
                               f"'files' does not list; {_DAMAGED}")
        k = entry.get("neg_per_pos")
        if k is not None and not _count(k):
            raise DatasetError(f"{path}: field 'link_split': {name!r} has 'neg_per_pos' {k!r}, not a count or null; "
                               f"{_DAMAGED}")
        et = entry.get("edge_type", list(EDGE))
        if not isinstance(et, list) or tuple(et) not in edge_types_of(meta):
            raise DatasetError(f"{path}: field 'link_split': {name!r} has 'edge_type' {et!r}, which 'edge_types' does "
                               f"not list; {_DAMAGED}")


def link_edge_type(entry: dict) -> EdgeType:
    """The edge type a ``link_split`` entry's edges belong to (the homogeneous one when not recorded)."""
    return tuple(entry.get("edge_type", EDGE))  # type: ignore[return-value]


def open_array(folder: Path, name: str, meta: dict, *, mmap: bool = True, readonly: bool = False) -> np.ndarray:
    """Memory-map one array file (``mmap=False``: read it into memory) and check its dtype and shape against
    ``meta.json``.

    A mapped array is registered with ``sparsetrain._sigbus``, so a read of it after the file was truncated ends the
    process with one line naming the file. Mapped copy-on-write: reads share the page cache, and a stray in-place write
    in user code can never reach the file. ``readonly`` maps it read-only instead: a
    copy-on-write mapping is charged against the commit limit (RAM + swap), so one larger
    than that (papers100M's 28 GiB of features on a 24 GiB machine) fails with ENOMEM.
    """
    path = folder / name
    entry = meta["files"].get(name)
    if entry is None:
        raise DatasetError(f"{folder / META_FILE}: 'files' has no entry for {name}; the dataset is damaged")
    if not path.is_file():
        raise DatasetError(f"{path}: missing; the dataset is incomplete, re-run `sparsetrain preprocess`")
    try:
        array = np.load(path, mmap_mode=("r" if readonly else "c") if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DatasetError(f"{path}: cannot be read as .npy ({exc}); the file is truncated or damaged, re-run "
                           "`sparsetrain preprocess`") from None
    if str(array.dtype) != entry["dtype"] or list(array.shape) != entry["shape"]:
        raise DatasetError(
            f"{path}: holds {array.dtype}{list(array.shape)} but meta.json records {entry['dtype']}{entry['shape']}; "
            "the file was replaced or damaged, re-run `sparsetrain preprocess`"
        )
    if mmap:
        watch(array, path)  # a read after the file is truncated: one line naming it, not a SIGBUS death
    return array


# ---------------------------------------------------------------- older versions, read into the version-3 shape

def _upgrade(meta: dict, path: Path) -> dict:
    """A version-1 or version-2 ``meta.json`` as version 3 describes the same files (``format_version`` kept)."""
    check_files_field(meta, path)
    files = meta["files"]
    drop = ("num_nodes", "num_edges", "num_classes", "feature_dim", "feature_dtype", "edge_feature_dim",
            "edge_feature_dtype")
    if meta["format_version"] == 1:
        for field in ("num_nodes", "num_edges"):
            if not _count(meta.get(field)):
                state = "is missing" if field not in meta else f"is {meta[field]!r}"
                raise DatasetError(f"{path}: field {field!r} {state}, not a non-negative integer; {_DAMAGED}")
        labels = {}
        if LABELS in files:
            if meta.get("num_classes") is None:
                raise DatasetError(f"{path}: field 'num_classes' is missing but {LABELS} is listed; {_DAMAGED}")
            labels = {NODE: {"file": LABELS, "num_classes": meta["num_classes"]}}
        edge = {"src": NODE, "rel": EDGE[1], "dst": NODE, "num_edges": meta["num_edges"],
                "features": EDGE_FEATURES if EDGE_FEATURES in files else None}
        return {k: v for k, v in meta.items() if k not in drop} | {
            "node_types": {NODE: meta["num_nodes"]}, "edge_types": [edge], "target_type": NODE,
            "features": {NODE: FEATURES} if FEATURES in files else {}, "labels": labels}
    node_types = meta.get("node_types")
    if not isinstance(node_types, dict) or not node_types or not all(isinstance(e, dict) for e in node_types.values()):
        raise DatasetError(f"{path}: field 'node_types' is {node_types!r}, not a non-empty object of node types; "
                           f"{_DAMAGED}")
    edge_types = meta.get("edge_types")
    if not isinstance(edge_types, list) or not all(isinstance(e, dict) for e in edge_types):
        raise DatasetError(f"{path}: field 'edge_types' is {edge_types!r}, not a list of edge types; {_DAMAGED}")
    features = {t: node_file(t, "features") for t in node_types if node_file(t, "features") in files}
    labels = {t: {"file": node_file(t, "labels"), "num_classes": e.get("num_classes")}
              for t, e in node_types.items() if node_file(t, "labels") in files}
    edges = []
    for e in edge_types:
        name = f"edge.{edge_key((e.get('src'), e.get('rel'), e.get('dst')))}.features.npy" if all(
            isinstance(e.get(k), str) for k in ("src", "rel", "dst")) else None
        edges.append({k: v for k, v in e.items() if k != "edge_feature_dim"} |
                     {"features": name if name in files else None})
    return meta | {"node_types": {t: e.get("num_nodes") for t, e in node_types.items()}, "edge_types": edges,
                   "features": features, "labels": labels}
