"""`GraphDataset` and `load()`: open a dataset folder memory-mapped, in no time and little RAM.

One class, one shape for every graph: every per-type field is a dict by node type (edge type), and a homogeneous
dataset is the one-type case (node type ``_N``, edge type ``(_N, _E, _N)``). The unsuffixed names (``features``,
``labels``, ``num_nodes``...) are views at the API edge: the one value of a homogeneous dataset, the dict of a
typed one, as GraphBolt's fields are a tensor or a dict by type.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets import legacy
from sparsetrain.datasets.checks import array_chunks, check_increasing, check_range, format_array, mapped_file
from sparsetrain.datasets.edge_split import EdgeSplit
from sparsetrain.datasets.format import EdgeType
from sparsetrain.errors import DamagedFileError, DatasetError
from sparsetrain.sampling.graph import CSCGraph, TypeLayout
from sparsetrain.storage.mmap import MmapFeatures


@dataclass
class GraphDataset:
    """A graph dataset: CSC topology, node features, labels and splits, by node and edge type.

    The graph and the features are backed by memory-mapped files (nothing is read until used;
    readers check the files first, so one truncated meanwhile is an error, not a SIGBUS);
    labels, splits and ``original_ids`` are read into memory by :func:`load`.

    ``graph`` is a :class:`~sparsetrain.sampling.CSCGraph` (typed: columns per (edge type, dst node)). By node type:
    ``features_by_type`` :class:`~sparsetrain.storage.MmapFeatures` stores (``gather(ids)`` reads only those rows, and
    a store passes for a tensor: indexing, ``torch`` functions, ``.numpy()``, ``.tensor()``), ``labels_by_type`` int64
    tensors (-1: no label), ``node_time_by_type`` (int64 or float64, one per node). By edge type, in that type's CSC
    order: ``edge_features_by_type`` [E_t, F], ``edge_time_by_type`` (one per edge, so
    ``NeighborSampler(ds.graph, ..., edge_time=ds.edge_time)`` samples temporally), ``edge_ids_by_type`` each CSC
    edge's row in the imported edge list (the graph's own edge ids, which samplers report, are CSC positions within
    the edge type, the rows of the edge features). A type without one is absent from the dict.

    The views :attr:`features`, :attr:`labels`, :attr:`edge_features`, :attr:`edge_ids`, :attr:`node_time`,
    :attr:`edge_time` are the one value (None when absent) of a homogeneous dataset and the dict of a typed one.
    ``original_ids[i]`` is the id node ``i`` had in the imported data when the nodes were reordered; ``split`` holds
    ids of :attr:`target_type` nodes; ``edge_split`` link-prediction edges per split (``"train"``, ``"val"``,
    ``"test"``), empty when the dataset has none. :meth:`feature_store` opens another store, with its own options
    and statistics.
    """

    path: Path
    meta: dict
    graph: CSCGraph
    features_by_type: dict[str, MmapFeatures] = field(default_factory=dict)
    labels_by_type: dict[str, torch.Tensor] = field(default_factory=dict)
    split: dict[str, torch.Tensor] = field(default_factory=dict)
    original_ids: torch.Tensor | None = None
    edge_features_by_type: dict[EdgeType, MmapFeatures] = field(default_factory=dict)
    edge_split: dict[str, EdgeSplit] = field(default_factory=dict)
    edge_ids_by_type: dict[EdgeType, torch.Tensor] = field(default_factory=dict)
    node_time_by_type: dict[str, torch.Tensor] = field(default_factory=dict)
    edge_time_by_type: dict[EdgeType, torch.Tensor] = field(default_factory=dict)

    def _view(self, by_type: dict):
        """The API edge: a homogeneous dataset's one value (None when absent), a typed dataset's dict."""
        return by_type if self.is_typed else next(iter(by_type.values()), None)

    @property
    def features(self) -> MmapFeatures | dict[str, MmapFeatures] | None:
        return self._view(self.features_by_type)

    @property
    def labels(self) -> torch.Tensor | dict[str, torch.Tensor] | None:
        return self._view(self.labels_by_type)

    @property
    def edge_features(self) -> MmapFeatures | dict[EdgeType, MmapFeatures] | None:
        return self._view(self.edge_features_by_type)

    @property
    def edge_ids(self) -> torch.Tensor | dict[EdgeType, torch.Tensor] | None:
        return self._view(self.edge_ids_by_type)

    @property
    def node_time(self) -> torch.Tensor | dict[str, torch.Tensor] | None:
        return self._view(self.node_time_by_type)

    @property
    def edge_time(self) -> torch.Tensor | dict[EdgeType, torch.Tensor] | None:
        return self._view(self.edge_time_by_type)

    @property
    def has_times(self) -> bool:
        """Whether the dataset stores node or edge times (what temporal sampling reads)."""
        return bool(self.node_time_by_type) or bool(self.edge_time_by_type)

    @property
    def is_typed(self) -> bool:
        """More than the one node type and edge type of a homogeneous graph."""
        return not fmt.is_homogeneous(self.meta)

    @property
    def format_version(self) -> int:
        """The format version the folder was written in."""
        return self.meta["format_version"]

    @property
    def node_types(self) -> list[str]:
        return list(self.meta["node_types"])

    @property
    def edge_types(self) -> list[EdgeType]:
        return fmt.edge_types_of(self.meta)

    @property
    def target_type(self) -> str | None:
        """The node type ``split`` (and training) refer to."""
        return self.meta.get("target_type")

    @property
    def num_nodes_by_type(self) -> dict[str, int]:
        return dict(self.meta["node_types"])

    @property
    def num_edges_by_type(self) -> dict[EdgeType, int]:
        return {et: entry["num_edges"] for et, entry in zip(self.edge_types, self.meta["edge_types"])}

    @property
    def num_features_by_type(self) -> dict[str, int]:
        """Feature columns by node type (0 for a type without features)."""
        return {t: (self.features_by_type[t].shape[1] if t in self.features_by_type else 0) for t in self.node_types}

    @property
    def num_nodes(self) -> int | dict[str, int]:
        """The node count; typed: by node type."""
        return self._view(self.num_nodes_by_type)

    @property
    def num_edges(self) -> int | dict[EdgeType, int]:
        """The edge count; typed: by edge type."""
        return self._view(self.num_edges_by_type)

    @property
    def num_features(self) -> int | dict[str, int]:
        """Feature columns (0: none); typed: by node type."""
        return self._view(self.num_features_by_type)

    def num_classes_of(self, node_type: str) -> int | None:
        """Classes of a node type's labels (None: it has no labels)."""
        entry = self.meta.get("labels", {}).get(node_type)
        return None if entry is None else entry["num_classes"]

    @property
    def num_classes(self) -> int | None:
        """Classes of the target type's labels."""
        return None if self.target_type is None else self.num_classes_of(self.target_type)

    @property
    def directed(self) -> bool:
        return bool(self.meta.get("directed", True))

    def feature_store(self, node_type: str = fmt.NODE, **options) -> MmapFeatures:
        """A new :class:`~sparsetrain.storage.MmapFeatures` over a node type's features, checked against ``meta.json``.

        ``node_type`` may be left out for a homogeneous dataset (its one type ``_N``). ``options`` go to
        ``MmapFeatures`` (``mode``, ``coalesce_bytes``, ``advise``).
        """
        name = self.meta.get("features", {}).get(node_type)
        entry = self.meta["files"].get(name)
        if entry is None:
            with_features = sorted(t for t, n in self.meta.get("features", {}).items() if n in self.meta["files"])
            raise DamagedFileError(f"{self.path / fmt.META_FILE}: 'files' has no {fmt.node_file(node_type, 'features')}"
                                   f"; the dataset has no node features{fmt.of_node_type(node_type)} (node types "
                                   f"with features: {', '.join(with_features) or 'none'}); pass node_type= one of "
                                   "those")
        store = MmapFeatures(self.path / name, **options)
        if str(store.np_dtype) != entry["dtype"] or list(store.shape) != list(entry["shape"]):
            store.close()
            raise DamagedFileError(
                f"{store.path}: holds {store.np_dtype}{list(store.shape)} but meta.json records "
                f"{entry['dtype']}{entry['shape']}; "
                "the file was replaced or damaged, re-run `sparsetrain preprocess`"
            )
        return store

    def __repr__(self) -> str:
        splits = ", ".join(f"{k}={v.numel()}" for k, v in self.split.items())
        return (
            f"GraphDataset({self.path}, num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"num_features={self.num_features}, num_classes={self.num_classes}"
            f"{fmt.of_node_type(self.target_type, ', target: ')}, split=({splits}))"
        )


def verify_checksums(path: str | os.PathLike, meta: dict | None = None) -> dict[str, bool]:
    """sha256 of every array file against ``meta.json``: ``{file: matches}``."""
    folder = Path(path)
    meta = meta or fmt.read_meta(folder)

    def check(item):
        name, entry = item
        file = folder / name
        return name, file.is_file() and fmt.sha256_file(file) == entry["sha256"]

    with ThreadPoolExecutor(max_workers=min(4, max(1, len(meta["files"])))) as pool:
        return dict(pool.map(check, meta["files"].items()))


_CHUNK = 1 << 24
_REBUILD = "the dataset is damaged, re-run `sparsetrain preprocess`"


def verify_structure(ds: GraphDataset, chunk: int = _CHUNK) -> None:
    """Check what checksums cannot: pointers monotone, every id and label in range, weights finite.

    Streams every array in chunks of ``chunk`` entries (bounded memory); raises
    :class:`~sparsetrain.errors.DatasetError` naming the file and the first bad entry.
    """
    folder, meta = ds.path, ds.meta
    counts = meta["node_types"]
    if ds.format_version == 2:
        legacy.verify_relations(folder, meta, chunk)
    else:
        _verify_topology(ds, chunk)
    for t, entry in meta.get("labels", {}).items():
        check_range(folder / entry["file"], ds.labels_by_type[t].numpy(), -1, entry["num_classes"], "label", chunk)
    for name, idx in ds.split.items():
        file = folder / fmt.split_file(name)
        check_range(file, idx.numpy(), 0, counts[ds.target_type], fmt.node_word(ds.target_type), chunk)
        check_increasing(file, idx.numpy(), True, "split node ids", chunk)
    verify_edge_splits(ds, chunk)
    for name in [*meta.get("node_time", {}).values(), *(e.get("time") for e in meta["edge_types"])]:
        if name is not None:
            _check_finite_times(folder / name, fmt.open_array(folder, name, meta), chunk)
    if ds.original_ids is not None:
        check_range(folder / fmt.ORIGINAL_IDS, ds.original_ids.numpy(), 0, counts[fmt.NODE], "node", chunk)
    clusters = meta.get("clusters")
    if clusters is not None:
        ids = fmt.open_array(folder, clusters["file"], meta, mmap=False)
        check_range(folder / clusters["file"], ids, 0, clusters["count"], "cluster", chunk)


def verify_edge_splits(ds: GraphDataset, chunk: int = _CHUNK) -> None:
    """Every link-prediction edge (``ds.edge_split``, in memory) joins two node ids of its edge type's node types;
    raises :class:`~sparsetrain.errors.DatasetError` naming the file and the first bad entry."""
    folder, meta, counts = ds.path, ds.meta, ds.meta["node_types"]
    for name, split in ds.edge_split.items():
        entry = meta["link_split"][name]
        src, _, dst = fmt.link_edge_type(entry)
        for kind in ("pos", "neg"):
            edges = getattr(split, kind)
            if edges is None:
                continue
            if src == dst:
                check_range(folder / entry[kind], edges.numpy().reshape(-1), 0, counts[src], "node", chunk)
            else:
                for row, end in ((0, src), (1, dst)):
                    check_range(folder / entry[kind], edges[row].numpy(), 0, counts[end], f"{end!r} node", chunk,
                                first=row * edges.shape[1])


def _check_finite_times(path: Path, times: np.ndarray, chunk: int) -> None:
    if times.dtype.kind != "f":
        return
    for lo, part in array_chunks(times, chunk):
        bad = ~np.isfinite(part)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DatasetError(f"{path}: entry {lo + i} is {part[i]}, times must be finite; {_REBUILD}")


def _verify_topology(ds: GraphDataset, chunk: int) -> None:
    """The flat CSC: pointers start at 0 and never decrease; each edge type's source ids and edge ids in range."""
    folder, graph = ds.path, ds.graph
    check = graph.check_files
    check()
    # read-only maps: the checks read them with positioned reads (nothing stays resident; see array_chunks)
    indptr = fmt.open_array(folder, fmt.INDPTR, ds.meta, readonly=True)
    if len(indptr) == 0 or indptr[0] != 0:
        raise DatasetError(f"{folder / fmt.INDPTR}: entry 0 is {indptr[0] if len(indptr) else 'missing'}, column "
                           f"pointers must start at 0; {_REBUILD}")
    check_increasing(folder / fmt.INDPTR, indptr, False, "column pointers", chunk, check)
    indices = fmt.open_array(folder, fmt.INDICES, ds.meta, readonly=True)
    edge_ids = (None if fmt.EDGE_IDS not in ds.meta["files"]
                else fmt.open_array(folder, fmt.EDGE_IDS, ds.meta, readonly=True))
    start = 0
    for et, entry in zip(ds.edge_types, ds.meta["edge_types"]):
        end = start + entry["num_edges"]
        check_range(folder / fmt.INDICES, indices[start:end], 0, ds.meta["node_types"][et[0]], fmt.node_word(et[0]),
                    chunk, check,
                    first=start)
        if edge_ids is not None:
            check_range(folder / fmt.EDGE_IDS, edge_ids[start:end], 0, entry["num_edges"], "edge id", chunk,
                        first=start)
        start = end
    if graph.weights is not None:
        for lo, part in array_chunks(graph.weights.numpy(), chunk, check):
            bad = ~np.isfinite(part) | (part < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise DatasetError(f"{folder / fmt.EDGE_WEIGHT}: entry {lo + i} is {part[i]}, edge weights must be "
                                   f"finite and >= 0; {_REBUILD}")


def load(path: str | os.PathLike, verify: bool = False) -> GraphDataset:
    """Open a dataset folder made by ``sparsetrain preprocess`` / ``synth`` / :func:`from_pyg` (any format version).

    The graph and the features are memory-mapped, the per-node arrays read. ``verify=True`` also checks every
    file's sha256 (reads everything once; :class:`~sparsetrain.errors.DatasetError`) and the structure
    (:func:`verify_structure`).
    """
    folder = Path(path)
    meta = fmt.read_meta(folder)
    if verify:
        bad = [name for name, ok in verify_checksums(folder, meta).items() if not ok]
        if bad:
            raise DatasetError(
                f"{folder / bad[0]}: sha256 does not match meta.json ({len(bad)} file(s) differ: {', '.join(bad)}); "
                "the file was altered or truncated, re-run `sparsetrain preprocess`"
            )
    counts = meta["node_types"]
    if meta["format_version"] == 2:
        graph, edge_ids = legacy.open_graph(folder, meta)
    else:
        graph, edge_ids = _open_graph(folder, meta)

    def array(name: str, dtypes: tuple[str, ...], shape: tuple, mmap: bool = False) -> np.ndarray:
        return format_array(folder, meta, name, dtypes, shape, mmap=mmap)

    # the per-node arrays are read into memory (8 bytes a node each): no later truncation of their files reaches them
    split = {name: torch.from_numpy(array(fmt.split_file(name), ("int64",), (None,)))
             for name in fmt.SPLIT_NAMES if fmt.split_file(name) in meta["files"]}
    original_ids = None
    if fmt.ORIGINAL_IDS in meta["files"]:
        original_ids = torch.from_numpy(array(fmt.ORIGINAL_IDS, ("int64",), (counts[next(iter(counts))],)))
    labels = {t: torch.from_numpy(array(entry["file"], ("int64",), (counts[t],)))
              for t, entry in meta.get("labels", {}).items()}
    ds = GraphDataset(path=folder, meta=meta, graph=graph, labels_by_type=labels, split=split,
                      original_ids=original_ids, edge_ids_by_type=edge_ids)
    ds.edge_split = _edge_splits(folder, meta)
    for t, name in meta.get("features", {}).items():
        format_array(folder, meta, name, fmt.FEATURE_DTYPES, (counts[t], None), readonly=True)  # every array's checks
        ds.features_by_type[t] = ds.feature_store(t)
    for et, entry in zip(fmt.edge_types_of(meta), meta["edge_types"]):
        if entry.get("features") is not None:
            array(entry["features"], fmt.FEATURE_DTYPES, (entry["num_edges"], None), mmap=True)
            ds.edge_features_by_type[et] = MmapFeatures(folder / entry["features"])
        if entry.get("time") is not None:
            ds.edge_time_by_type[et] = torch.from_numpy(array(entry["time"], fmt.TIME_DTYPES, (entry["num_edges"],),
                                                              mmap=True))
    ds.node_time_by_type.update({t: torch.from_numpy(array(name, fmt.TIME_DTYPES, (counts[t],)))
                                 for t, name in meta.get("node_time", {}).items()})
    if verify:
        verify_structure(ds)
    return ds


_GRAPH_FILES = {"indptr": fmt.INDPTR, "indices": fmt.INDICES, "weights": fmt.EDGE_WEIGHT}


def _open_graph(folder: Path, meta: dict) -> tuple[CSCGraph, dict[EdgeType, torch.Tensor]]:
    """The flat CSC, memory-mapped (its readers check its files first), and each edge type's edge ids (when stored).

    The graph gets no ``edge_perm``: the edge ids samplers report are CSC positions (within the edge type), the
    rows of the edge features.
    """
    counts, edge_types = meta["node_types"], fmt.edge_types_of(meta)
    columns = sum(counts[et[2]] for et in edge_types)
    num_edges = sum(entry["num_edges"] for entry in meta["edge_types"])
    layout = {"indptr": (("int64",), columns + 1), "indices": (("int32", "int64"), num_edges),
              "weights": (("float32",), num_edges)}
    arrays = {key: torch.from_numpy(format_array(folder, meta, name, layout[key][0], (layout[key][1],), mmap=True))
              for key, name in _GRAPH_FILES.items() if name in meta["files"]}
    files = {key: mapped_file(folder, name) for key, name in _GRAPH_FILES.items() if name in meta["files"]}
    for key, name in _GRAPH_FILES.items():
        if key in files and not files[key].same_file(folder / name):
            raise DatasetError(f"{folder / name}: was replaced while the dataset was being opened; open it again")
    # each edge type's first column starts where the edge counts before it say (a few reads of indptr)
    column, edge = 0, 0
    indptr = arrays["indptr"]
    for et, entry in zip(edge_types, meta["edge_types"]):
        if int(indptr[column]) != edge:
            raise DatasetError(f"{folder / fmt.INDPTR}: entry {column} is {int(indptr[column])}, but edge type "
                               f"{et}'s edges start at {edge}; the dataset is damaged")
        column, edge = column + counts[et[2]], edge + entry["num_edges"]
    if int(indptr[-1]) != num_edges:
        raise DatasetError(f"{folder / fmt.INDPTR}: does not describe {num_edges} edges over {columns} columns; the "
                           "dataset is damaged")
    edge_ids = {}
    if fmt.EDGE_IDS in meta["files"]:
        flat = torch.from_numpy(format_array(folder, meta, fmt.EDGE_IDS, ("int64",), (num_edges,)))
        starts = np.cumsum([0] + [entry["num_edges"] for entry in meta["edge_types"]]).tolist()
        edge_ids = {et: flat[starts[k] : starts[k + 1]] for k, et in enumerate(edge_types)}
    types = TypeLayout(dict(counts), tuple(edge_types))
    return CSCGraph(arrays["indptr"], arrays["indices"], arrays.get("weights"), files=files, types=types), edge_ids


def _edge_splits(folder: Path, meta: dict) -> dict[str, EdgeSplit]:
    """The link-prediction edges meta.json lists, read into memory and checked for shape and count."""
    result = {}
    for name, entry in (meta.get("link_split") or {}).items():
        arrays = {}
        for kind in ("pos", "neg"):
            if entry.get(kind) is None:
                continue
            arrays[kind] = torch.from_numpy(format_array(folder, meta, entry[kind], ("int64",), (2, None), mmap=False))
        split = EdgeSplit(arrays["pos"], arrays.get("neg"), entry.get("neg_per_pos"))
        k = split.neg_per_pos
        if k is not None and split.neg is not None and split.neg.shape[1] != k * split.pos.shape[1]:
            raise DatasetError(f"{folder / entry['neg']}: holds {split.neg.shape[1]} negatives but meta.json records "
                               f"{k} for each of {split.pos.shape[1]} positives; {_REBUILD}")
        result[name] = split
    return result


def load_clusters(ds: GraphDataset) -> torch.Tensor | None:
    """The dataset's cluster id per node (``clusters.npy``), or None when it was not built with
    ``reorder="cluster"``."""
    from sparsetrain.datasets.clustering import CLUSTERS_FILE

    if not ds.meta.get("clusters") or CLUSTERS_FILE not in ds.meta.get("files", {}):
        return None
    return torch.from_numpy(fmt.open_array(ds.path, CLUSTERS_FILE, ds.meta, mmap=False))
