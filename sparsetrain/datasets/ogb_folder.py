"""Import an OGB node-property folder, in either layout OGB ships, without the ``ogb`` package.

Binary layout (what ``ogb.io.DatasetSaver`` writes; ogbn-papers100M ships this way)::

    raw/data.npz         edge_index int64 [2, E], num_nodes_list int64 [1], node_feat float32 [N, D], ...
    raw/node-label.npz   node_label [N, 1] (float; NaN = no label)
    split/<name>/split_dict.pt   {"train", "valid", "test"} index arrays (loaded with weights_only=True)
    RELEASE_v<k>.txt, mapping/   provenance only

CSV layout: ``raw/edge.csv.gz``, ``raw/num-node-list.csv.gz``, ``raw/node-feat.csv.gz``,
``raw/node-label.csv.gz``, ``split/<name>/{train,valid,test}.csv.gz``.

Node features, labels and all three split parts are required: a folder without them is
an error naming what is missing (``split="random"`` draws a random split instead).
Every array is streamed in chunks (see :mod:`~sparsetrain.datasets.npz`).
"""

from __future__ import annotations

import csv
import gzip
import os
import re
from pathlib import Path

import numpy as np

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.build import BuildOptions, EdgeSource, GraphInput, Source, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.files import edge_source
from sparsetrain.datasets.input_checks import target_type_of
from sparsetrain.datasets.npz import NpzMember
from sparsetrain.datasets.ogb_link import is_link_split_dir, read_ogb_edge_splits
from sparsetrain.datasets.pt_files import integer_ids, read_pt_dict
from sparsetrain.datasets.readers import CHUNK_ROWS, EdgeListReader, NodeTableReader, first_non_integer
from sparsetrain.errors import DatasetError

_SPLIT_PARTS = {"train": "train", "val": "valid", "test": "test"}
_RANDOM_HINT = "pass --split random (split='random' in Python) to draw a random split of the labelled nodes instead"


def _find(folder: Path, stem: str) -> Path | None:
    for suffix in (".csv.gz", ".csv"):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return None


def ogb_folder_has_types(root: Path) -> bool:
    """Whether ``root`` is an OGB heterogeneous folder (``raw/num-node-dict.csv.gz``, e.g. ogbn-mag)."""
    return _find(Path(root) / "raw", "num-node-dict") is not None


def _csv_count(path: Path) -> int | None:
    if not path.is_file():
        return None
    values = np.concatenate(list(NodeTableReader(path, "index")()))
    if len(values) != 1:
        raise DatasetError(f"{path}: holds {len(values)} values; OGB stores a single graph's count here (multi-graph "
                           "datasets are not node-property datasets)")
    if first_non_integer(values) is not None or values[0] < 1:
        raise DatasetError(f"{path}: holds {values[0]}; the node count must be a positive whole number (fix the file "
                           "or pass --num-nodes)")
    return int(values[0])


# ---------------------------------------------------------------- binary layout

def _member(path: Path, name: str, what: str) -> NpzMember:
    if name not in NpzMember.names(path):
        raise DatasetError(f"{path}: holds no {name} ({what}); an OGB node-property folder needs it (download the "
                           "dataset again)")
    return NpzMember(path, name)


def _binary_sources(raw: Path, num_nodes: int | None) -> tuple[EdgeSource, int, Source, Source]:
    data = raw / "data.npz"
    edges = _member(data, "edge_index", "the edges")
    if len(edges.shape) != 2 or edges.shape[0] != 2 or edges.dtype.kind not in "iu":
        raise DatasetError(f"{edges.label}: is {edges.dtype}{list(edges.shape)}; OGB's edge_index is an integer array "
                           "of shape [2, num_edges]")
    if num_nodes is None:
        counts = _member(data, "num_nodes_list", "the node count")
        values = counts.read().reshape(-1)
        if len(values) != 1 or values.dtype.kind not in "iu" or values[0] < 1:
            raise DatasetError(f"{counts.label}: holds {values.tolist()[:4]}; a node-property dataset has one graph "
                               "with a positive node count")
        num_nodes = int(values[0])
    num_edges = edges.shape[1]

    def edge_chunks():
        # [2, E] in C order: all sources, then all destinations; two streams side by side
        for src, dst in zip(edges.elements(0, num_edges, CHUNK_ROWS), edges.elements(num_edges, num_edges, CHUNK_ROWS),
                            strict=True):
            yield src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False), None

    names = NpzMember.names(data)
    if "node_feat" not in names:
        raise DatasetError(f"{data}: holds no node_feat (arrays: {', '.join(names)}); the node features are missing, "
                           "this importer needs them")
    feats = NpzMember(data, "node_feat")
    if len(feats.shape) != 2 or feats.dtype.kind not in "iuf":
        raise DatasetError(f"{feats.label}: is {feats.dtype}{list(feats.shape)}; node features must be numbers of "
                           "shape [num_nodes, dim]")
    label_file = raw / "node-label.npz"
    if not label_file.is_file():
        raise DatasetError(f"{label_file}: missing; the node labels are missing, an OGB node-property folder has "
                           "raw/node-label.npz")
    labels = _member(label_file, "node_label", "the node labels")
    shape = labels.shape
    if labels.dtype.kind not in "iuf" or len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
        raise DatasetError(f"{labels.label}: is {labels.dtype}{list(labels.shape)}; one class label per node "
                           "([num_nodes] or [num_nodes, 1]) is supported")
    where = lambda row: f"row {row}"  # noqa: E731
    return (
        EdgeSource(edges.label, edge_chunks, num_edges, lambda row: f"edge {row}"),
        num_nodes,
        Source(feats.label, lambda: feats.rows(max(1, (1 << 26) // max(1, feats.dtype.itemsize * feats.shape[1]))),
               feats.shape[0], where),
        Source(labels.label, lambda: labels.rows(CHUNK_ROWS), labels.shape[0], where),
    )


def _split_sources(folder: Path) -> dict[str, Source]:
    pt = folder / "split_dict.pt"
    sources = {}
    if pt.is_file():
        split = read_pt_dict(pt)
        for ours, theirs in _SPLIT_PARTS.items():
            if theirs not in split:
                raise DatasetError(f"{pt}: has no {theirs!r} part (keys: {', '.join(map(str, split))}); OGB splits "
                                   "have train, valid and test")
            sources[ours] = Source.from_array(f"{pt}[{theirs}]", integer_ids(split[theirs], f"{pt}[{theirs!r}]", 1))
        return sources
    for ours, theirs in _SPLIT_PARTS.items():
        found = _find(folder, theirs)
        if found is None:
            raise DatasetError(f"{folder}: has no {theirs}.csv.gz (nor split_dict.pt); OGB splits have train, valid "
                               "and test parts")
        sources[ours] = Source.from_reader(NodeTableReader(found, "index"))
    return sources


def _release(root: Path) -> str | None:
    versions = [m.group(1) for p in root.glob("RELEASE_v*.txt") if (m := re.fullmatch(r"RELEASE_v(\d+)\.txt", p.name))]
    return max(versions, key=int) if versions else None


def _split_dir(root: Path, split: str | None) -> Path:
    """The folder under ``split/`` to use: ``split`` by name, else the first; an error naming the fix when there is
    none."""
    split_root = root / "split"
    split_dirs = sorted(p for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if not split_dirs:
        raise DatasetError(f"{split_root}: no split folder; an OGB folder ships split/<name>/ (split_dict.pt or "
                           f"train/valid/test.csv.gz); {_RANDOM_HINT}")
    if split is None:
        return split_dirs[0]
    named = [p for p in split_dirs if p.name == split]
    if not named:
        raise DatasetError(f"{split_root / split}: no such split folder; available: "
                           f"{', '.join(p.name for p in split_dirs)}")
    return named[0]


def _link_folder(root: Path, split_dir: Path, num_nodes: int | None) -> GraphInput:
    """An OGB link-property folder: ``raw/edge.csv.gz`` is the training graph, ``split/<name>/{train,valid,test}.pt``
    the edge splits."""
    raw = root / "raw"
    edge_file = _find(raw, "edge")
    if edge_file is None:
        raise DatasetError(f"{raw}: no edge.csv.gz; an OGB link-property folder has raw/edge.csv.gz (download it with "
                           "the ogb package elsewhere)")
    feat_file, label_file = _find(raw, "node-feat"), _find(raw, "node-label")
    return GraphInput.one_type(
        edge_source(edge_file)[0],
        num_nodes=num_nodes,
        features=None if feat_file is None else Source.from_reader(NodeTableReader(feat_file, "features")),
        labels=None if label_file is None else Source.from_reader(NodeTableReader(label_file, "labels")),
        provenance={"importer": "ogb-link", "folder": str(root), "split": split_dir.name},
        edge_splits=read_ogb_edge_splits(split_dir),
    )


def from_ogb(ogb_dir: str | os.PathLike, out_dir: str | os.PathLike, *, split: str | None = None,
             target_type: str | None = None, num_nodes: int | None = None, **options) -> GraphDataset:
    """Import an OGB node-property folder (binary ``raw/data.npz`` layout or CSV layout), a heterogeneous one
    (``raw/num-node-dict.csv.gz``, e.g. ogbn-mag: a typed dataset, see :func:`_typed_folder`) or a link-property one
    (``split/<name>/{train,valid,test}.pt``, see :mod:`sparsetrain.datasets.ogb_link`).

    ``split`` names the folder under ``split/`` (default: the only/first one), or is
    ``"random"`` to draw a random split of the labelled nodes by ``split_fractions``.
    Edges are taken as stored; pass ``undirected=True`` for datasets OGB symmetrises
    (``add_inverse_edge`` in its master table, e.g. ogbn-products, ogbn-proteins), ``add_reverse=True`` for
    ``rev_<rel>`` edge types of a typed folder (as PyG's ``OGB_MAG`` with ``ToUndirected``). ``target_type``: a
    typed folder's labelled type to train on (default: the only one); ``num_nodes``: a homogeneous folder's count.
    Options are :class:`BuildOptions` fields.
    """
    root = Path(ogb_dir)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder; --ogb takes an OGB dataset folder (with raw/ and split/)")
    if ogb_folder_has_types(root):
        if num_nodes is not None:
            raise DatasetError(f"num_nodes={num_nodes} (--num-nodes): {root} is a typed OGB folder, its "
                               "raw/num-node-dict gives every type's count; drop it")
        graph = _typed_folder(root, split, target_type)
    else:
        graph = _node_folder(root, split, num_nodes)
        graph.target_type = target_type  # the writer refuses one other than the one type's
    return build_dataset(out_dir, graph, BuildOptions(**options))


def _node_folder(root: Path, split: str | None, num_nodes: int | None) -> GraphInput:
    """A homogeneous OGB folder: node-property (binary or CSV layout) or link-property."""
    raw = root / "raw"
    if not (raw / "data.npz").is_file():  # a bad count file is reported before anything else
        num_nodes = num_nodes or _csv_count(raw / "num-node-list.csv.gz") or _csv_count(raw / "num-node-list.csv")
    split_dir = None if split == "random" else _split_dir(root, split)
    # link folders ship CSV edges
    if split_dir is not None and not (raw / "data.npz").is_file() and is_link_split_dir(split_dir):
        return _link_folder(root, split_dir, num_nodes)
    if (raw / "data.npz").is_file():
        layout = "binary"
        edges, num_nodes, features, labels = _binary_sources(raw, num_nodes)
    else:
        layout = "csv"
        edge_file = _find(raw, "edge")
        if edge_file is None:
            raise DatasetError(f"{raw}: has neither data.npz nor edge.csv.gz; an OGB node-property folder has one of "
                               "them (download it with the ogb package elsewhere)")
        reader = EdgeListReader(edge_file)
        edges = EdgeSource(str(edge_file), reader, reader.num_rows(), reader.where, weighted=reader.weighted)
        feat_file, label_file = _find(raw, "node-feat"), _find(raw, "node-label")
        if feat_file is None:
            raise DatasetError(f"{raw}: has no node-feat.csv.gz; the node features are missing, this importer needs "
                               "them")
        if label_file is None:
            raise DatasetError(f"{raw}: has no node-label.csv.gz; the node labels are missing, an OGB node-property "
                               "folder has them")
        features = Source.from_reader(NodeTableReader(feat_file, "features"))
        labels = Source.from_reader(NodeTableReader(label_file, "labels"))
    splits = {}
    if split_dir is not None:
        splits = _split_sources(split_dir)
        split = split_dir.name
    return GraphInput.one_type(
        edges, num_nodes=num_nodes, features=features, labels=labels, splits=splits,
        provenance={"importer": "ogb", "folder": str(root), "layout": layout, "split": split, "release": _release(root),
                    "mapping": (root / "mapping").is_dir()},
    )


def _read_count_dict(path: Path) -> dict[str, int]:
    """OGB's ``num-node-dict.csv.gz``: a header of node types and one row of counts."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as f:
            rows = [r for r in csv.reader(f) if r]
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc}); it must be OGB's CSV of node types and counts") from None
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise DatasetError(f"{path}: expected a header of node types and one row of counts (OGB's num-node-dict); got "
                           f"{len(rows)} rows")
    counts = {}
    for name, value in zip(rows[0], rows[1]):
        node_type = fmt.check_type_name(name.strip(), f"{path}: node type")
        if node_type in counts:
            raise DatasetError(f"{path}: node type {node_type!r} is named twice in the header; give each type one "
                               "count")
        try:
            counts[node_type] = int(value.strip())
        except ValueError:
            raise DatasetError(f"{path}: count {value!r} of node type {name!r} is not a whole number; fix the "
                               "file") from None
    return counts


def _ogb_split_file(split_dir: Path, node_type: str, part: str) -> Path | None:
    """OGB stores ``<split>/<type>/<part>.csv.gz``; ``<split>/<part>/<type>.csv.gz`` is accepted too."""
    return _find(split_dir / node_type, part) or _find(split_dir / part, node_type)


def _typed_folder(root: Path, split: str | None, target_type: str | None) -> GraphInput:
    """An OGB heterogeneous node-property folder in the ogbn-mag CSV layout (``raw/num-node-dict.csv.gz``,
    ``raw/relations/<src>___<rel>___<dst>/edge.csv.gz``, ``raw/node-feat/<type>/node-feat.csv.gz``,
    ``raw/node-label/<type>/node-label.csv.gz``, ``split/<name>/<type>/{train,valid,test}.csv.gz``), read without the
    ``ogb`` package."""
    raw = root / "raw"
    count_file = _find(raw, "num-node-dict")
    counts = _read_count_dict(count_file)
    for kind in ("node-feat", "node-label"):
        folders = sorted(p.name for p in (raw / kind).iterdir() if p.is_dir()) if (raw / kind).is_dir() else []
        stray = [name for name in folders if name not in counts]
        if stray:
            raise DatasetError(f"{raw / kind / stray[0]}: node type {stray[0]!r} is not in {count_file.name} (node "
                               f"types: {', '.join(counts)}); rename the folder or add the type's count")
    graph = GraphInput({}, dict(counts), provenance={"importer": "ogb-typed", "folder": str(root)})
    for t in counts:
        if (feat := _find(raw / "node-feat" / t, "node-feat")) is not None:
            graph.features[t] = Source.from_reader(NodeTableReader(feat, "features"))
        if (label := _find(raw / "node-label" / t, "node-label")) is not None:
            graph.labels[t] = Source.from_reader(NodeTableReader(label, "labels"))
    relations = raw / "relations"
    for folder in sorted(p for p in relations.iterdir() if p.is_dir()) if relations.is_dir() else []:
        parts = folder.name.split(fmt.SEPARATOR)
        if len(parts) != 3:
            raise DatasetError(f"{folder}: a relation folder is named <src>___<rel>___<dst>; rename it")
        missing = [end for end in (parts[0], parts[2]) if end not in counts]
        if missing:  # the count file is the folder's list of node types: a type it lacks is a misspelling or a gap
            raise DatasetError(f"{folder}: node type {missing[0]!r} is not in {count_file.name} (node types: "
                               f"{', '.join(counts)}); rename the folder or add the type's count")
        edge_file = _find(folder, "edge")
        if edge_file is None:
            raise DatasetError(f"{folder}: no edge.csv.gz; every relation folder needs its edge list")
        graph.edges[tuple(parts)] = edge_source(edge_file)[0]
    if not graph.edges:
        raise DatasetError(f"{relations}: no relation folders; an OGB heterogeneous folder has "
                           "raw/relations/<src>___<rel>___<dst>/edge.csv.gz")
    graph.target_type = target_type_of(list(graph.labels), target_type)
    if graph.target_type is None:
        raise DatasetError(f"{raw / 'node-label'}: no node type has labels; an OGB node-property folder has "
                           "raw/node-label/<type>/")
    if split != "random":
        split_dir = _split_dir(root, split)
        for ours, theirs in _SPLIT_PARTS.items():
            found = _ogb_split_file(split_dir, graph.target_type, theirs)
            if found is None:
                raise DatasetError(f"{split_dir / graph.target_type}: has no {theirs}.csv.gz for the target type "
                                   f"{graph.target_type!r}; OGB splits have train, valid and test parts; "
                                   f"{_RANDOM_HINT}")
            graph.splits[ours] = Source.from_reader(NodeTableReader(found, "index"))
    return graph
