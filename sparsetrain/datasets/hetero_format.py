"""The typed dataset format (format version 2): several node types and edge types in one folder.

Layout (flat, so every file is a plain name checked like version 1's)::

    meta.json                                   node_types, edge_types, target_type, splits, sha256 of every file
    node.<type>.features.npy                    float32|float16 [N_type, D_type]   optional
    node.<type>.labels.npy                      int64 [N_type]                     optional
    edge.<src>___<rel>___<dst>.indptr.npy       int64 [N_dst + 1]   CSC over the dst type
    edge.<src>___<rel>___<dst>.indices.npy      int32|int64 [E]     src-type ids, sorted within a column
    edge.<src>___<rel>___<dst>.edge_ids.npy     int64 [E]           position of each CSC edge in the imported edge list
    edge.<src>___<rel>___<dst>.features.npy     float32 [E, F]      optional, in CSC order
    train_idx.npy, val_idx.npy, test_idx.npy    int64, sorted      target-type node ids

``meta.json`` (besides ``format``, ``format_version: 2``, ``files``)::

    node_types:  {type: {num_nodes, feature_dim, feature_dtype, num_classes}}
    edge_types:  [{src, rel, dst, num_edges, edge_feature_dim}]
    target_type: the node type the splits (and training) refer to, or null
"""

from __future__ import annotations

import re
from pathlib import Path

from sparsetrain.datasets.format import FEATURE_DTYPES, _count, check_files_field
from sparsetrain.errors import DatasetError

HETERO_VERSION = 2
EdgeType = tuple[str, str, str]
SEPARATOR = "___"  # OGB's separator in relation folder names

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")
_DAMAGED = "the dataset is damaged, re-run `sparsetrain preprocess`"


def check_type_name(name, what: str) -> str:
    """A node type or relation name usable in a file name: letters, digits, ``_``, ``-``; no ``___``."""
    if not isinstance(name, str) or not _NAME.match(name) or SEPARATOR in name or len(name) > 100:
        raise DatasetError(
            f"{what} {name!r} is not a usable type name; use letters, digits, '_' and '-' only (no '___', at most 100 characters)"
        )
    return name


def edge_key(edge_type: EdgeType) -> str:
    """``src___rel___dst``: the edge type's name in files (and OGB's relation folders)."""
    return SEPARATOR.join(edge_type)


def node_file(node_type: str, kind: str) -> str:
    """File of a node type's ``features`` or ``labels``."""
    return f"node.{node_type}.{kind}.npy"


def edge_file(edge_type: EdgeType, kind: str) -> str:
    """File of an edge type's ``indptr``, ``indices``, ``edge_ids`` or ``features``."""
    return f"edge.{edge_key(edge_type)}.{kind}.npy"


def edge_types_of(meta: dict) -> list[EdgeType]:
    return [(e["src"], e["rel"], e["dst"]) for e in meta["edge_types"]]


def check_hetero_meta(meta: dict, path: Path) -> None:
    """Every field the typed loader reads is present and typed, and names only files inside the folder."""
    check_files_field(meta, path)
    files = meta["files"]
    node_types = meta.get("node_types")
    if not isinstance(node_types, dict) or not node_types:
        raise DatasetError(f"{path}: field 'node_types' is {node_types!r}, not a non-empty object of node types; {_DAMAGED}")
    for name, entry in node_types.items():
        check_type_name(name, f"{path}: node type")
        if not isinstance(entry, dict) or not _count(entry.get("num_nodes")):
            raise DatasetError(f"{path}: node type {name!r}: field 'num_nodes' is missing or not a non-negative integer; {_DAMAGED}")
        if node_file(name, "features") in files and entry.get("feature_dtype") not in FEATURE_DTYPES:
            raise DatasetError(f"{path}: node type {name!r}: field 'feature_dtype' is {entry.get('feature_dtype')!r}; {_DAMAGED}")
        if node_file(name, "labels") in files and not _count(entry.get("num_classes"), 1):
            raise DatasetError(f"{path}: node type {name!r}: field 'num_classes' is {entry.get('num_classes')!r} but it has labels; {_DAMAGED}")
    edge_types = meta.get("edge_types")
    if not isinstance(edge_types, list) or not edge_types:
        raise DatasetError(f"{path}: field 'edge_types' is {edge_types!r}, not a non-empty list of edge types; {_DAMAGED}")
    seen = set()
    for i, entry in enumerate(edge_types):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("src", "rel", "dst")) or not _count(entry.get("num_edges")):
            raise DatasetError(f"{path}: 'edge_types' entry {i} needs string src, rel, dst and a non-negative num_edges; {_DAMAGED}")
        et = (entry["src"], entry["rel"], entry["dst"])
        check_type_name(et[1], f"{path}: relation")
        for end in (et[0], et[2]):
            if end not in node_types:
                raise DatasetError(f"{path}: edge type {et} names node type {end!r}, which 'node_types' does not list; {_DAMAGED}")
        if et in seen:
            raise DatasetError(f"{path}: edge type {et} is listed twice in 'edge_types'; {_DAMAGED}")
        seen.add(et)
        for kind in ("indptr", "indices", "edge_ids"):
            if edge_file(et, kind) not in files:
                raise DatasetError(f"{path}: 'files' has no entry for {edge_file(et, kind)}; {_DAMAGED}")
    target = meta.get("target_type")
    if target is not None and target not in node_types:
        raise DatasetError(f"{path}: field 'target_type' is {target!r}, which 'node_types' does not list; {_DAMAGED}")
