"""Import edge lists and node tables from CSV / Parquet / NumPy files, OGB node-property folders (homogeneous and typed) and OGB link-property folders."""

from __future__ import annotations

import csv
import gzip
import os
from pathlib import Path

import numpy as np

from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, build_dataset
from sparsetrain.datasets import hetero_format as hfmt
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.hetero_build import EdgeTypeSource, HeteroBuildOptions, NodeTypeSource, build_hetero_dataset
from sparsetrain.datasets.ogb_link import is_link_split_dir, read_ogb_edge_splits
from sparsetrain.datasets.readers import EdgeListReader, NodeTableReader, first_non_integer
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.hetero_graph import EdgeType


def _edge_source(path: Path) -> EdgeSource:
    reader = EdgeListReader(path)
    return EdgeSource(str(path), reader, reader.num_rows(), reader.where, weighted=reader.weighted)


def from_files(
    out_dir: str | os.PathLike,
    edges: str | os.PathLike,
    *,
    features: str | os.PathLike | None = None,
    labels: str | os.PathLike | None = None,
    splits: dict[str, str | os.PathLike] | None = None,
    num_nodes: int | None = None,
    **options,
) -> GraphDataset:
    """Build a dataset from an edge list and optional per-node features, labels and split index files.

    ``num_nodes`` defaults to the row count of the features (or labels), else to
    the largest node id + 1. Options are :class:`BuildOptions` fields.
    """
    return build_dataset(
        out_dir,
        _edge_source(Path(edges)),
        num_nodes=num_nodes,
        features=None if features is None else Source.from_reader(NodeTableReader(features, "features")),
        labels=None if labels is None else Source.from_reader(NodeTableReader(labels, "labels")),
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        options=BuildOptions(**options),
        provenance={"importer": "files", "edges": str(edges), "features": str(features) if features else None, "labels": str(labels) if labels else None},
    )


_OGB_SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def _ogb_count(path: Path) -> int | None:
    if not path.is_file():
        return None
    reader = NodeTableReader(path, "index")
    values = np.concatenate(list(reader()))
    if len(values) != 1:
        raise DatasetError(f"{path}: holds {len(values)} values; OGB stores a single graph's count here (multi-graph datasets are not node-property datasets)")
    if first_non_integer(values) is not None or values[0] < 1:
        raise DatasetError(f"{path}: holds {values[0]}; the node count must be a positive whole number (fix the file or pass --num-nodes)")
    return int(values[0])


def _find(folder: Path, stem: str) -> Path | None:
    for suffix in (".csv.gz", ".csv"):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return None


def from_ogb(ogb_dir: str | os.PathLike, out_dir: str | os.PathLike, *, split: str | None = None, **options) -> GraphDataset:
    """Import an OGB node-property folder (``raw/edge.csv.gz``, ``raw/node-feat.csv.gz``,
    ``raw/node-label.csv.gz``, ``split/<name>/{train,valid,test}.csv.gz``) without the ``ogb`` package,
    or a link-property folder (``split/<name>/{train,valid,test}.pt``, see :mod:`sparsetrain.datasets.ogb_link`),
    whose ``raw/edge.csv.gz`` is already the training graph.

    Edges are taken as stored; pass ``undirected=True`` for datasets OGB symmetrises
    (``add_inverse_edge`` in its master table, e.g. ogbn-products, ogbn-proteins).
    A heterogeneous folder (``raw/num-node-dict.csv.gz``, e.g. ogbn-mag) is imported as a typed dataset
    (:func:`from_ogb_hetero`).
    """
    root = Path(ogb_dir)
    raw = root / "raw"
    if _find(raw, "num-node-dict") is not None:
        return from_ogb_hetero(root, out_dir, split=split, **options)
    edge_file = _find(raw, "edge")
    if edge_file is None:
        raise DatasetError(f"{raw}: no edge.csv.gz; an OGB node-property folder has raw/edge.csv.gz (download it with the ogb package elsewhere)")
    num_nodes = options.pop("num_nodes", None) or _ogb_count(raw / "num-node-list.csv.gz") or _ogb_count(raw / "num-node-list.csv")
    feat_file, label_file = _find(raw, "node-feat"), _find(raw, "node-label")
    split_root = root / "split"
    split_dirs = sorted(p for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if split is not None:
        split_dirs = [p for p in split_dirs if p.name == split]
        if not split_dirs:
            raise DatasetError(f"{split_root / split}: no such split folder; available: {', '.join(p.name for p in sorted(split_root.iterdir())) or 'none'}")
    splits = {}
    if split_dirs and is_link_split_dir(split_dirs[0]):
        return build_dataset(
            out_dir,
            _edge_source(edge_file),
            num_nodes=num_nodes,
            features=None if feat_file is None else Source.from_reader(NodeTableReader(feat_file, "features")),
            labels=None if label_file is None else Source.from_reader(NodeTableReader(label_file, "labels")),
            options=BuildOptions(**options),
            provenance={"importer": "ogb-link", "folder": str(root), "split": split_dirs[0].name},
            edge_splits=read_ogb_edge_splits(split_dirs[0]),
        )
    if split_dirs:
        for ours, theirs in _OGB_SPLIT_FILES.items():
            found = _find(split_dirs[0], theirs)
            if found is not None:
                splits[ours] = found
    return from_files(
        out_dir,
        edge_file,
        features=feat_file,
        labels=label_file,
        splits=splits,
        num_nodes=num_nodes,
        **options,
    )


def _read_count_dict(path: Path) -> dict[str, int]:
    """OGB's ``num-node-dict.csv.gz``: a header of node types and one row of counts."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            rows = [r for r in csv.reader(f) if r]
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc}); it must be OGB's CSV of node types and counts") from None
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise DatasetError(f"{path}: expected a header of node types and one row of counts (OGB's num-node-dict); got {len(rows)} rows")
    counts = {}
    for name, value in zip(rows[0], rows[1]):
        try:
            counts[hfmt.check_type_name(name.strip(), f"{path}: node type")] = int(value)
        except ValueError:
            raise DatasetError(f"{path}: count {value!r} of node type {name!r} is not a whole number; fix the file") from None
    return counts


def _ogb_split_file(split_dir: Path, node_type: str, part: str) -> Path | None:
    """OGB stores ``<split>/<type>/<part>.csv.gz``; ``<split>/<part>/<type>.csv.gz`` is accepted too."""
    return _find(split_dir / node_type, part) or _find(split_dir / part, node_type)


def from_ogb_hetero(ogb_dir: str | os.PathLike, out_dir: str | os.PathLike, *, split: str | None = None,
                    target_type: str | None = None, **options):
    """Import an OGB heterogeneous node-property folder in the ogbn-mag CSV layout (``raw/num-node-dict.csv.gz``,
    ``raw/relations/<src>___<rel>___<dst>/edge.csv.gz``, ``raw/node-feat/<type>/node-feat.csv.gz``,
    ``raw/node-label/<type>/node-label.csv.gz``, ``split/<name>/<type>/{train,valid,test}.csv.gz``) without the ``ogb`` package.

    Edges are taken as stored; ``add_reverse=True`` adds ``rev_<rel>`` edge types (as PyG's ``OGB_MAG`` with ``ToUndirected``).
    """
    root = Path(ogb_dir)
    raw = root / "raw"
    count_file = _find(raw, "num-node-dict")
    if count_file is None:
        raise DatasetError(f"{raw}: no num-node-dict.csv.gz; an OGB heterogeneous folder has raw/num-node-dict.csv.gz and raw/relations/")
    counts = _read_count_dict(count_file)
    nodes = {}
    for t, n in counts.items():
        feat = _find(raw / "node-feat" / t, "node-feat")
        label = _find(raw / "node-label" / t, "node-label")
        nodes[t] = NodeTypeSource(num_nodes=n, features=None if feat is None else Source.from_reader(NodeTableReader(feat, "features")),
                                  labels=None if label is None else Source.from_reader(NodeTableReader(label, "labels")))
    relations = raw / "relations"
    edges: dict[EdgeType, EdgeTypeSource] = {}
    for folder in sorted(p for p in relations.iterdir() if p.is_dir()) if relations.is_dir() else []:
        parts = folder.name.split(hfmt.SEPARATOR)
        if len(parts) != 3:
            raise DatasetError(f"{folder}: a relation folder is named <src>___<rel>___<dst>; rename it")
        edge_file = _find(folder, "edge")
        if edge_file is None:
            raise DatasetError(f"{folder}: no edge.csv.gz; every relation folder needs its edge list")
        edges[tuple(parts)] = EdgeTypeSource(_edge_source(edge_file))
    if not edges:
        raise DatasetError(f"{relations}: no relation folders; an OGB heterogeneous folder has raw/relations/<src>___<rel>___<dst>/edge.csv.gz")
    labelled = [t for t, node in nodes.items() if node.labels is not None]
    if target_type is None:
        if len(labelled) != 1:
            raise DatasetError(f"{raw / 'node-label'}: {len(labelled)} node types have labels ({labelled}); pass --target-type to choose one")
        target_type = labelled[0]
    split_root = root / "split"
    split_dirs = sorted(p for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if split is not None:
        split_dirs = [p for p in split_dirs if p.name == split]
        if not split_dirs:
            raise DatasetError(f"{split_root / split}: no such split folder; available: {', '.join(p.name for p in sorted(split_root.iterdir())) or 'none'}")
    splits = {}
    if split_dirs:
        for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
            found = _ogb_split_file(split_dirs[0], target_type, theirs)
            if found is not None:
                splits[ours] = Source.from_reader(NodeTableReader(found, "index"))
    return build_hetero_dataset(out_dir, nodes, edges, target_type=target_type, splits=splits, options=HeteroBuildOptions(**options),
                                provenance={"importer": "ogb-hetero", "folder": str(root)})


def parse_edge_type(text: str) -> EdgeType:
    """``"src,rel,dst"`` (or ``src___rel___dst``) -> ``(src, rel, dst)``."""
    parts = text.split(",") if "," in text else text.split(hfmt.SEPARATOR)
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise DatasetError(f"edge type {text!r}: write it as src,rel,dst (e.g. author,writes,paper)")
    return tuple(p.strip() for p in parts)  # type: ignore[return-value]


def from_files_hetero(
    out_dir: str | os.PathLike,
    edges: dict[EdgeType | str, str | os.PathLike],
    *,
    features: dict[str, str | os.PathLike] | None = None,
    labels: dict[str, str | os.PathLike] | None = None,
    num_nodes: dict[str, int] | None = None,
    target_type: str | None = None,
    splits: dict[str, str | os.PathLike] | None = None,
    **options,
):
    """Build a typed dataset from one edge list per edge type (CSV/Parquet/.npy, src-type and dst-type ids) and per-type
    node files (features, labels; one row per node). Node types are those the edges, files and counts name."""
    edge_sources = {(parse_edge_type(k) if isinstance(k, str) else tuple(k)): EdgeTypeSource(_edge_source(Path(v))) for k, v in edges.items()}
    types: list[str] = []
    for et in edge_sources:
        types += [et[0], et[2]]
    types += list(features or {}) + list(labels or {}) + list(num_nodes or {})
    nodes = {
        t: NodeTypeSource(
            num_nodes=(num_nodes or {}).get(t),
            features=None if t not in (features or {}) else Source.from_reader(NodeTableReader(features[t], "features")),
            labels=None if t not in (labels or {}) else Source.from_reader(NodeTableReader(labels[t], "labels")),
        )
        for t in dict.fromkeys(types)
    }
    if target_type is None and len(labels or {}) == 1:
        target_type = next(iter(labels))
    return build_hetero_dataset(
        out_dir, nodes, edge_sources, target_type=target_type,
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        options=HeteroBuildOptions(**options),
        provenance={"importer": "files-hetero", "edges": {hfmt.edge_key(et): str(edges[k]) for et, k in zip(edge_sources, edges)}},
    )
