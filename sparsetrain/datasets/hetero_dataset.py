"""`HeteroGraphDataset`: a typed dataset folder (format version 2) opened memory-mapped."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets import hetero_format as hfmt
from sparsetrain.datasets.checks import check_increasing, check_range, mapped_file
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.graph import CSCGraph, EdgeType
from sparsetrain.storage.mmap import MmapFeatures

_REBUILD = "the dataset is damaged, re-run `sparsetrain preprocess`"


@dataclass
class HeteroGraphDataset:
    """Node types with their features and labels, edge types each as a CSC over its dst type, and the target type's splits.

    ``graph`` is a typed :class:`~sparsetrain.sampling.CSCGraph` (read into memory; its edge ids are CSC positions
    per edge type); ``features[type]`` a :class:`~sparsetrain.storage.MmapFeatures` per node type that has features;
    ``labels[type]`` int64 per labelled type; ``split`` holds ids of ``target_type`` nodes;
    ``edge_features[edge_type]`` [E, F] in CSC order; ``edge_ids[edge_type]`` each CSC edge's position in the
    imported edge list.
    """

    path: Path
    meta: dict
    graph: CSCGraph
    features: dict[str, MmapFeatures] = field(default_factory=dict)
    labels: dict[str, torch.Tensor] = field(default_factory=dict)
    edge_features: dict[EdgeType, torch.Tensor] = field(default_factory=dict)
    split: dict[str, torch.Tensor] = field(default_factory=dict)
    edge_ids: dict[EdgeType, torch.Tensor] = field(default_factory=dict)

    @property
    def node_types(self) -> list[str]:
        return list(self.graph.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return self.graph.edge_types

    @property
    def num_nodes(self) -> dict[str, int]:
        return dict(self.graph.num_nodes)

    @property
    def num_edges(self) -> dict[EdgeType, int]:
        return self.graph.num_edges_per_type

    @property
    def target_type(self) -> str | None:
        return self.meta.get("target_type")

    @property
    def num_classes(self) -> int | None:
        """Classes of the target type's labels."""
        target = self.target_type
        return None if target is None else self.meta["node_types"][target].get("num_classes")

    def num_features(self, node_type: str) -> int:
        store = self.features.get(node_type)
        return 0 if store is None else store.shape[1]

    def feature_store(self, node_type: str, **options) -> MmapFeatures:
        """A new :class:`~sparsetrain.storage.MmapFeatures` over one node type's features (``options`` as MmapFeatures takes)."""
        name = hfmt.node_file(node_type, "features")
        if name not in self.meta["files"]:
            raise DatasetError(f"{self.path / fmt.META_FILE}: node type {node_type!r} has no features; known types with features: {sorted(self.features)}")
        return MmapFeatures(self.path / name, **options)

    def __repr__(self) -> str:
        splits = ", ".join(f"{k}={v.numel()}" for k, v in self.split.items())
        return (f"HeteroGraphDataset({self.path}, num_nodes={self.num_nodes}, edge_types={len(self.edge_types)}, "
                f"num_edges={self.graph.num_edges}, target_type={self.target_type!r}, split=({splits}))")


def load_hetero(folder: Path, meta: dict, verify: bool = False) -> HeteroGraphDataset:
    """Open a version-2 folder whose ``meta`` was read (and checked) by :func:`~sparsetrain.datasets.format.read_meta`."""
    hfmt.check_hetero_meta(meta, folder / fmt.META_FILE)
    files = meta["files"]
    num_nodes = {t: e["num_nodes"] for t, e in meta["node_types"].items()}

    def array(name: str, mmap: bool, dtypes: tuple[str, ...], shape: tuple) -> np.ndarray:
        a = fmt.open_array(folder, name, meta, mmap=mmap)
        if str(a.dtype) not in dtypes or a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape)):
            want = f"{' or '.join(dtypes)}[{', '.join('*' if s is None else str(s) for s in shape)}]"
            raise DatasetError(f"{folder / name}: holds {a.dtype}{list(a.shape)} but the format needs {want}; {_REBUILD}")
        return a

    edges, edge_ids, edge_features = {}, {}, {}
    for entry in meta["edge_types"]:
        et = (entry["src"], entry["rel"], entry["dst"])
        e = entry["num_edges"]
        indptr = array(hfmt.edge_file(et, "indptr"), True, ("int64",), (num_nodes[et[2]] + 1,))
        indices = array(hfmt.edge_file(et, "indices"), True, ("int32", "int64"), (e,))
        if int(indptr[0]) != 0 or int(indptr[-1]) != e:
            raise DatasetError(f"{folder / hfmt.edge_file(et, 'indptr')}: does not describe {e} edges (first {indptr[0]}, last {indptr[-1]}); {_REBUILD}")
        mapped = {"indptr": mapped_file(folder, hfmt.edge_file(et, "indptr")), "indices": mapped_file(folder, hfmt.edge_file(et, "indices"))}
        edges[et] = CSCGraph(torch.from_numpy(indptr), torch.from_numpy(indices), files=mapped)
        edge_ids[et] = torch.from_numpy(array(hfmt.edge_file(et, "edge_ids"), False, ("int64",), (e,)))
        name = hfmt.edge_file(et, "features")
        if name in files:
            edge_features[et] = torch.from_numpy(array(name, True, ("float32",), (e, None)))
    ds = HeteroGraphDataset(folder, meta, CSCGraph.from_relations(num_nodes, edges), edge_features=edge_features, edge_ids=edge_ids)
    for t, n in num_nodes.items():
        if hfmt.node_file(t, "features") in files:
            array(hfmt.node_file(t, "features"), True, fmt.FEATURE_DTYPES, (n, None))
            ds.features[t] = ds.feature_store(t)
        if hfmt.node_file(t, "labels") in files:
            ds.labels[t] = torch.from_numpy(array(hfmt.node_file(t, "labels"), False, ("int64",), (n,)))
    for name in fmt.SPLIT_NAMES:
        if fmt.split_file(name) in files:
            ds.split[name] = torch.from_numpy(array(fmt.split_file(name), False, ("int64",), (None,)))
    if ds.split and ds.target_type is None:
        raise DatasetError(f"{folder / fmt.META_FILE}: has splits but no 'target_type' they refer to; {_REBUILD}")
    if verify:
        verify_hetero_structure(ds)
    return ds


def verify_hetero_structure(ds: HeteroGraphDataset, chunk: int = 1 << 24) -> None:
    """Pointers monotone, every src id, label, edge id and split id in range; raises naming the file and the first bad entry."""
    folder = ds.path
    for et, csc in ds.graph.edges.items():
        csc.check_files()
        check_increasing(folder / hfmt.edge_file(et, "indptr"), csc.indptr.numpy(), False, "column pointers", chunk, csc.check_files)
        check_range(folder / hfmt.edge_file(et, "indices"), csc.indices.numpy(), 0, ds.graph.num_nodes[et[0]], f"{et[0]!r} node", chunk, csc.check_files)
        check_range(folder / hfmt.edge_file(et, "edge_ids"), ds.edge_ids[et].numpy(), 0, csc.num_edges, "edge id", chunk)
    for t, labels in ds.labels.items():
        check_range(folder / hfmt.node_file(t, "labels"), labels.numpy(), 0, ds.meta["node_types"][t]["num_classes"], "label", chunk)
    for name, idx in ds.split.items():
        file = folder / fmt.split_file(name)
        check_range(file, idx.numpy(), 0, ds.graph.num_nodes[ds.target_type], f"{ds.target_type!r} node", chunk)
        check_increasing(file, idx.numpy(), True, "split node ids", chunk)
