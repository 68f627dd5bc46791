"""`GraphDataset` and `load()`: open a dataset folder memory-mapped, in no time and little RAM."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.checks import array_chunks, check_increasing, check_range, mapped_file
from sparsetrain.datasets.edge_split import EdgeSplit
from sparsetrain.errors import ChecksumError, DatasetError
from sparsetrain.sampling.graph import CSCGraph
from sparsetrain.storage.errors import FeatureFileError
from sparsetrain.storage.mmap import MmapFeatures


@dataclass
class GraphDataset:
    """A node-property graph dataset: CSC topology, node features, labels and splits.

    The graph and the features are backed by memory-mapped files (nothing is read until used;
    readers check the files first, so one truncated meanwhile is an error, not a SIGBUS);
    labels, splits and ``original_ids`` are read into memory by :func:`load`.
    ``features`` is a :class:`~sparsetrain.storage.MmapFeatures` store: ``gather(ids)``
    reads only those rows, and it also passes for a tensor (indexing, ``torch`` functions,
    ``.numpy()``, ``.tensor()``). :meth:`feature_store` opens another one, with its own
    options and statistics.
    ``original_ids[i]`` is the id node ``i`` had in the imported data when the
    nodes were reordered (``None`` otherwise). ``edge_features``: a store of one row per
    edge in CSC order (row = a sampled block's ``edge_ids``), or ``None``. ``edge_split``: link-prediction
    edges per split (``"train"``, ``"val"``, ``"test"``), empty when the dataset has none.
    """

    path: Path
    meta: dict
    graph: CSCGraph
    features: MmapFeatures | None
    labels: torch.Tensor | None
    split: dict[str, torch.Tensor] = field(default_factory=dict)
    original_ids: torch.Tensor | None = None
    edge_features: MmapFeatures | None = None
    edge_split: dict[str, EdgeSplit] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges

    @property
    def num_classes(self) -> int | None:
        return self.meta.get("num_classes")

    @property
    def num_features(self) -> int:
        return 0 if self.features is None else self.features.shape[1]

    @property
    def directed(self) -> bool:
        return bool(self.meta.get("directed", True))

    def feature_store(self, **options) -> MmapFeatures:
        """A new :class:`~sparsetrain.storage.MmapFeatures` over this dataset's features, checked against ``meta.json``.

        ``options`` go to ``MmapFeatures`` (``mode``, ``coalesce_bytes``, ``advise``).
        """
        entry = self.meta["files"].get(fmt.FEATURES)
        if entry is None:
            raise FeatureFileError(f"{self.path / fmt.META_FILE}: 'files' has no {fmt.FEATURES}; this dataset has no node features")
        store = MmapFeatures(self.path / fmt.FEATURES, **options)
        if str(store.np_dtype) != entry["dtype"] or list(store.shape) != list(entry["shape"]):
            store.close()
            raise FeatureFileError(
                f"{store.path}: holds {store.np_dtype}{list(store.shape)} but meta.json records {entry['dtype']}{entry['shape']}; "
                "the file was replaced or damaged, re-run `sparsetrain preprocess`"
            )
        return store

    def __repr__(self) -> str:
        splits = ", ".join(f"{k}={v.numel()}" for k, v in self.split.items())
        return (
            f"GraphDataset({self.path}, num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"num_features={self.num_features}, num_classes={self.num_classes}, split=({splits}))"
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
    folder, meta, n = ds.path, ds.meta, ds.num_nodes
    check = ds.graph.check_files
    check()
    indptr = ds.graph.indptr.numpy()
    if len(indptr) == 0 or indptr[0] != 0:
        raise DatasetError(f"{folder / fmt.INDPTR}: entry 0 is {indptr[0] if len(indptr) else 'missing'}, column pointers must start at 0; {_REBUILD}")
    check_increasing(folder / fmt.INDPTR, indptr, False, "column pointers", chunk, check)
    check_range(folder / fmt.INDICES, ds.graph.indices.numpy(), 0, n, "node", chunk, check)
    if ds.graph.weights is not None:
        for lo, part in array_chunks(ds.graph.weights.numpy(), chunk, check):
            bad = ~np.isfinite(part) | (part < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise DatasetError(f"{folder / fmt.EDGE_WEIGHT}: entry {lo + i} is {part[i]}, edge weights must be finite and >= 0; {_REBUILD}")
    if ds.labels is not None:
        check_range(folder / fmt.LABELS, ds.labels.numpy(), -1, ds.num_classes, "label", chunk)
    for name, idx in ds.split.items():
        file = folder / fmt.split_file(name)
        check_range(file, idx.numpy(), 0, n, "node", chunk)
        check_increasing(file, idx.numpy(), True, "split node ids", chunk)
    for name, split in ds.edge_split.items():
        entry = meta["link_split"][name]
        for kind in ("pos", "neg"):
            edges = getattr(split, kind)
            if edges is not None:
                check_range(folder / entry[kind], edges.numpy().reshape(-1), 0, n, "node", chunk)
    if ds.original_ids is not None:
        check_range(folder / fmt.ORIGINAL_IDS, ds.original_ids.numpy(), 0, n, "node", chunk)
    clusters = meta.get("clusters")
    if clusters is not None:
        check_range(folder / clusters["file"], fmt.open_array(folder, clusters["file"], meta, mmap=False), 0, clusters["count"], "cluster", chunk)


def load(path: str | os.PathLike, verify: bool = False) -> GraphDataset:
    """Open a dataset folder made by ``sparsetrain preprocess`` / ``synth`` / :func:`from_pyg`.

    A typed folder (format version 2) opens as a :class:`~sparsetrain.datasets.HeteroGraphDataset`.

    The graph and the features are memory-mapped, the per-node arrays read. ``verify=True`` also checks every file's sha256
    (reads everything once; :class:`~sparsetrain.errors.ChecksumError`) and the
    structure (:func:`verify_structure`).
    """
    folder = Path(path)
    meta = fmt.read_meta(folder)
    if verify:
        bad = [name for name, ok in verify_checksums(folder, meta).items() if not ok]
        if bad:
            raise ChecksumError(
                f"{folder / bad[0]}: sha256 does not match meta.json ({len(bad)} file(s) differ: {', '.join(bad)}); "
                "the file was altered or truncated, re-run `sparsetrain preprocess`"
            )
    if meta["format_version"] >= 2:
        from sparsetrain.datasets.hetero_dataset import load_hetero

        return load_hetero(folder, meta, verify)

    n, e = meta["num_nodes"], meta["num_edges"]
    layout = {fmt.INDPTR: (("int64",), n + 1), fmt.INDICES: (("int32", "int64"), e), fmt.EDGE_WEIGHT: (("float32",), e),
              fmt.LABELS: (("int64",), n), fmt.ORIGINAL_IDS: (("int64",), n)}

    def tensor(name: str, mmap: bool = False) -> torch.Tensor | None:
        if name not in meta["files"]:
            return None
        array = fmt.open_array(folder, name, meta, mmap=mmap)
        dtypes, length = layout.get(name, (("int64",), None))
        if str(array.dtype) not in dtypes or array.ndim != 1 or (length is not None and len(array) != length):
            want = f"{' or '.join(dtypes)}[{'' if length is None else length}]"
            raise DatasetError(f"{folder / name}: holds {array.dtype}{list(array.shape)} but the format needs {want}; {_REBUILD}")
        return torch.from_numpy(array)

    # the graph stays mapped (it is the large part) and its readers check its files first; the per-node arrays are
    # read into memory (8 bytes a node each), so no later truncation of their files can reach a reader
    files = {key: mapped_file(folder, name) for key, name in _GRAPH_FILES.items() if name in meta["files"]}
    graph = CSCGraph(tensor(fmt.INDPTR, True), tensor(fmt.INDICES, True), tensor(fmt.EDGE_WEIGHT, True), files=files)
    for key, name in _GRAPH_FILES.items():
        if key in files and not files[key].same_file(folder / name):
            raise DatasetError(f"{folder / name}: was replaced while the dataset was being opened; open it again")
    if graph.num_nodes != meta["num_nodes"] or graph.num_edges != meta["num_edges"] or int(graph.indptr[-1]) != graph.num_edges:
        raise ChecksumError(f"{folder / fmt.INDPTR}: does not describe {meta['num_edges']} edges over {meta['num_nodes']} nodes; the dataset is damaged")
    split = {name: t for name in fmt.SPLIT_NAMES if (t := tensor(fmt.split_file(name))) is not None}
    ds = GraphDataset(
        path=folder,
        meta=meta,
        graph=graph,
        features=None,
        labels=tensor(fmt.LABELS),
        split=split,
        original_ids=tensor(fmt.ORIGINAL_IDS),
    )
    ds.edge_split = _edge_splits(folder, meta)
    if fmt.FEATURES in meta["files"]:
        _check_feature_array(folder, meta)
        ds.features = ds.feature_store()
    if fmt.EDGE_FEATURES in meta["files"]:
        array = fmt.open_array(folder, fmt.EDGE_FEATURES, meta)
        if str(array.dtype) not in fmt.FEATURE_DTYPES or array.ndim != 2 or len(array) != meta["num_edges"]:
            raise DatasetError(f"{folder / fmt.EDGE_FEATURES}: holds {array.dtype}{list(array.shape)} but the format needs "
                               f"{' or '.join(fmt.FEATURE_DTYPES)}[{meta['num_edges']}, D]; {_REBUILD}")
        ds.edge_features = MmapFeatures(folder / fmt.EDGE_FEATURES)
    if verify:
        verify_structure(ds)
    return ds


def _edge_splits(folder: Path, meta: dict) -> dict[str, EdgeSplit]:
    """The link-prediction edges meta.json lists, read into memory and checked for shape and count."""
    result = {}
    for name, entry in (meta.get("link_split") or {}).items():
        arrays = {}
        for kind in ("pos", "neg"):
            if entry.get(kind) is None:
                continue
            array = fmt.open_array(folder, entry[kind], meta, mmap=False)
            if array.dtype != np.int64 or array.ndim != 2 or array.shape[0] != 2:
                raise DatasetError(f"{folder / entry[kind]}: holds {array.dtype}{list(array.shape)} but the format needs int64[2, E]; {_REBUILD}")
            arrays[kind] = torch.from_numpy(array)
        split = EdgeSplit(arrays["pos"], arrays.get("neg"), entry.get("neg_per_pos"))
        k = split.neg_per_pos
        if k is not None and split.neg is not None and split.neg.shape[1] != k * split.pos.shape[1]:
            raise DatasetError(f"{folder / entry['neg']}: holds {split.neg.shape[1]} negatives but meta.json records {k} for each of "
                               f"{split.pos.shape[1]} positives; {_REBUILD}")
        result[name] = split
    return result


_GRAPH_FILES = {"indptr": fmt.INDPTR, "indices": fmt.INDICES, "weights": fmt.EDGE_WEIGHT}


def _check_feature_array(folder: Path, meta: dict) -> None:
    array = fmt.open_array(folder, fmt.FEATURES, meta, readonly=True)  # same checks (and errors) as every other array
    if str(array.dtype) not in fmt.FEATURE_DTYPES or array.ndim != 2 or len(array) != meta["num_nodes"]:
        raise DatasetError(
            f"{folder / fmt.FEATURES}: holds {array.dtype}{list(array.shape)} but the format needs "
            f"{' or '.join(fmt.FEATURE_DTYPES)}[{meta['num_nodes']}, D]; {_REBUILD}"
        )


def load_clusters(ds: GraphDataset) -> torch.Tensor | None:
    """The dataset's cluster id per node (``clusters.npy``), or None when it was not built with ``reorder="cluster"``."""
    from sparsetrain.datasets.clustering import CLUSTERS_FILE

    if not ds.meta.get("clusters") or CLUSTERS_FILE not in ds.meta.get("files", {}):
        return None
    return torch.from_numpy(fmt.open_array(ds.path, CLUSTERS_FILE, ds.meta, mmap=False))
