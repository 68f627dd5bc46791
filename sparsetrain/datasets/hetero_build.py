"""The one pipeline every typed importer feeds: node types, edge types, target splits -> a format-2 folder.

Node counts come first (given, else the rows of the type's features or labels, else the largest id
an edge list uses + 1); each edge type is then read, checked against the counts of its two end
types, sorted into a CSC over its dst type (the sort order kept as ``edge_ids``) and written; then
node tables and splits are streamed in. Written atomically like every dataset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets import hetero_format as hfmt
from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, _random_split, _read_splits, _write_features, _write_labels
from sparsetrain.datasets.input_checks import check_inferred_ids, refuse_unlabelled
from sparsetrain.datasets.writer import DatasetWriter
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.hetero_graph import EdgeType


@dataclass
class NodeTypeSource:
    """One node type's inputs: its count (None: inferred), features and labels (row ``i`` = node ``i``)."""

    num_nodes: int | None = None
    features: Source | None = None
    labels: Source | None = None
    num_classes: int | None = None


@dataclass
class EdgeTypeSource:
    """One edge type's inputs: ``edges`` yields ``(src, dst, None)`` chunks of src-type and dst-type ids; ``features`` one row per edge."""

    edges: EdgeSource
    features: Source | None = None


@dataclass
class HeteroBuildOptions:
    """``add_reverse``: also store ``(dst, "rev_" + rel, src)`` for every edge type (PyG's ``ToUndirected`` on a typed graph)."""

    add_reverse: bool = False
    feature_dtype: str = "float32"
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
    seed: int = 0
    overwrite: bool = False
    quiet: bool = False

    def build_options(self) -> BuildOptions:
        return BuildOptions(feature_dtype=self.feature_dtype, split_fractions=self.split_fractions, seed=self.seed,
                            overwrite=self.overwrite, quiet=self.quiet)


def _read_edges(et: EdgeType, source: EdgeSource, counts: dict[str, int | None]) -> tuple[np.ndarray, np.ndarray]:
    """All edges of one type, each id checked against its end type's count (when known)."""
    srcs, dsts, row = [], [], 0
    for src, dst, _ in source.chunks():
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        for column, ids, node_type in (("src", src, et[0]), ("dst", dst, et[2])):
            n = counts[node_type]
            bad = (ids < 0) if n is None else ((ids < 0) | (ids >= n))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                allowed = ">= 0" if n is None else f"in [0, {n}), the {node_type!r} nodes"
                raise DatasetError(f"{source.name}: {source.where(row + i)}, {column}: {node_type!r} node id {ids[i]} of edge type {et} "
                                   f"must be {allowed}; fix the id or the {node_type!r} node count")
        srcs.append(src)
        dsts.append(dst)
        row += len(src)
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


def _node_counts(node_types: dict[str, NodeTypeSource], edge_types: dict[EdgeType, EdgeTypeSource]) -> dict[str, int]:
    counts: dict[str, int | None] = {}
    for t, node in node_types.items():
        rows = [s for s in (node.features, node.labels) if s is not None and s.rows is not None]
        if node.num_nodes is None and len(rows) == 2 and rows[0].rows != rows[1].rows:
            raise DatasetError(f"{rows[0].name}: has {rows[0].rows} rows but {rows[1].name} has {rows[1].rows}; node type {t!r} needs one row per node in each")
        counts[t] = node.num_nodes if node.num_nodes is not None else (rows[0].rows if rows else None)
    if any(n is None for n in counts.values()):
        highest = {t: -1 for t, n in counts.items() if n is None}
        for et, source in edge_types.items():
            if et[0] in highest or et[2] in highest:
                src, dst = _read_edges(et, source.edges, counts)
                check_inferred_ids(et, source.edges, src, dst, counts)
                for ids, t in ((src, et[0]), (dst, et[2])):
                    if t in highest and len(ids):
                        highest[t] = max(highest[t], int(ids.max()))
        counts.update({t: h + 1 for t, h in highest.items()})
    for t, n in counts.items():
        if n < 1:
            raise DatasetError(f"node type {t!r} has no nodes (no count, no feature or label rows, no edges); give its count, or drop the type")
    return counts


def build_hetero_dataset(
    out_dir: str | os.PathLike,
    node_types: dict[str, NodeTypeSource],
    edge_types: dict[EdgeType, EdgeTypeSource],
    *,
    target_type: str | None = None,
    splits: dict[str, Source] | None = None,
    options: HeteroBuildOptions | None = None,
    provenance: dict | None = None,
):
    """Validate everything, write a typed dataset folder atomically, and return it loaded."""
    from sparsetrain.datasets.dataset import load

    options = options or HeteroBuildOptions()
    for t in node_types:
        hfmt.check_type_name(t, "node type")
    if not edge_types:
        raise DatasetError("a typed dataset needs at least one edge type; give edges for some (src, rel, dst)")
    for et in edge_types:
        hfmt.check_type_name(et[1], "relation")
        for end in (et[0], et[2]):
            if end not in node_types:
                raise DatasetError(f"edge type {et} names node type {end!r}, which is not among the node types {sorted(node_types)}; add it")
    if target_type is not None and target_type not in node_types:
        raise DatasetError(f"target type {target_type!r} is not among the node types {sorted(node_types)}; choose one of them")
    for name in splits or {}:
        if name not in fmt.SPLIT_NAMES:
            raise DatasetError(f"split {name!r} is not known; use {', '.join(fmt.SPLIT_NAMES)}")
    if splits and target_type is None:
        raise DatasetError("splits were given without a target type; name the node type they refer to (--target-type)")
    counts = _node_counts(node_types, edge_types)
    build = options.build_options()
    out_dir = Path(out_dir)
    meta = {"name": out_dir.name, "node_types": {}, "edge_types": [], "target_type": target_type, "splits": {}, "source": provenance or {}}
    with DatasetWriter(out_dir, options.overwrite) as writer:
        written: list[EdgeType] = []
        for et, source in edge_types.items():
            src, dst = _read_edges(et, source.edges, counts)
            feats = None if source.features is None else _edge_features(et, source, len(src))
            wanted = [(et, src, dst)]
            rev = (et[2], f"rev_{et[1]}", et[0])
            if options.add_reverse and rev not in edge_types:
                wanted.append((rev, dst, src))
            for key, s, d in wanted:
                if key in written:
                    raise DatasetError(f"edge type {key} is given twice; merge its edge lists into one")
                _write_edge_type(writer, key, s, d, counts, feats, meta)
                written.append(key)
        unlabelled: dict[str, np.ndarray] = {}
        for t, node in node_types.items():
            entry = {"num_nodes": counts[t], "feature_dim": 0, "feature_dtype": None, "num_classes": None}
            where = f"the {counts[t]} {t!r} nodes"
            if node.features is not None:
                entry["feature_dim"] = _write_features(writer, node.features, counts[t], where, None, build, hfmt.node_file(t, "features"))
                entry["feature_dtype"] = options.feature_dtype
            if node.labels is not None:
                entry["num_classes"], unlabelled[t] = _write_labels(writer, node.labels, counts[t], where, None, node.num_classes,
                                                                    hfmt.node_file(t, "labels"))
                refuse_unlabelled(t, node.labels, unlabelled[t])
            meta["node_types"][t] = entry
        if target_type is not None:
            split_arrays = _read_splits(splits or {}, counts[target_type], unlabelled.get(target_type))
            if not split_arrays and node_types[target_type].labels is not None:
                split_arrays = _random_split(counts[target_type], unlabelled[target_type], options.split_fractions, options.seed)
                meta["splits_from"] = {"random": list(options.split_fractions), "seed": options.seed}
            for name, idx in split_arrays.items():
                writer.save_array(fmt.split_file(name), np.sort(idx))
                meta["splits"][name] = int(len(idx))
        writer.commit(meta, version=hfmt.HETERO_VERSION)
    return load(out_dir)


def _edge_features(et: EdgeType, source: EdgeTypeSource, num_edges: int) -> np.ndarray:
    parts = [np.asarray(c, dtype=np.float32).reshape(len(c), -1) for c in source.features.chunks()]
    feats = np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)
    if len(feats) != num_edges:
        raise DatasetError(f"{source.features.name}: has {len(feats)} rows but edge type {et} has {num_edges} edges; give one row per edge")
    bad = ~np.isfinite(feats)
    if bad.any():
        row, col = (int(i[0]) for i in np.nonzero(bad))
        raise DatasetError(f"{source.features.name}: {source.features.where(row)}, column {col}: {feats[row, col]} is not a finite number; replace NaN/inf edge features")
    return feats


def _write_edge_type(writer: DatasetWriter, et: EdgeType, src: np.ndarray, dst: np.ndarray, counts: dict[str, int],
                     feats: np.ndarray | None, meta: dict) -> None:
    n_src, n_dst = counts[et[0]], counts[et[2]]
    order = np.argsort(dst * n_src + src, kind="stable")
    indptr = np.zeros(n_dst + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n_dst), out=indptr[1:])
    writer.save_array(hfmt.edge_file(et, "indptr"), indptr)
    writer.save_array(hfmt.edge_file(et, "indices"), src[order].astype(fmt.index_dtype(n_src)))
    writer.save_array(hfmt.edge_file(et, "edge_ids"), order.astype(np.int64))
    if feats is not None:
        writer.save_array(hfmt.edge_file(et, "features"), feats[order])
    meta["edge_types"].append({"src": et[0], "rel": et[1], "dst": et[2], "num_edges": int(len(src)),
                               "edge_feature_dim": 0 if feats is None else int(feats.shape[1])})
