"""Import edge lists and node tables from CSV / Parquet / NumPy files, and OGB node- and link-property folders."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.ogb_link import is_link_split_dir, read_ogb_edge_splits
from sparsetrain.datasets.readers import EdgeListReader, NodeTableReader, first_non_integer
from sparsetrain.errors import DatasetError


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
    """
    root = Path(ogb_dir)
    raw = root / "raw"
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
