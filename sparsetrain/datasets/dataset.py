"""`GraphDataset` and `load()`: open a dataset folder memory-mapped, in no time and no RAM."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.errors import ChecksumError
from sparsetrain.sampling.graph import CSCGraph
from sparsetrain.storage.errors import FeatureFileError
from sparsetrain.storage.mmap import MmapFeatures


@dataclass
class GraphDataset:
    """A node-property graph dataset: CSC topology, node features, labels and splits.

    Tensors are backed by memory-mapped files; nothing is read until used.
    ``features`` is a :class:`~sparsetrain.storage.MmapFeatures` store: ``gather(ids)``
    reads only those rows, and it also passes for a tensor (indexing, ``torch`` functions,
    ``.numpy()``, ``.tensor()``). :meth:`feature_store` opens another one, with its own
    options and statistics.
    ``original_ids[i]`` is the id node ``i`` had in the imported data when the
    nodes were reordered (``None`` otherwise).
    """

    path: Path
    meta: dict
    graph: CSCGraph
    features: MmapFeatures | None
    labels: torch.Tensor | None
    split: dict[str, torch.Tensor] = field(default_factory=dict)
    original_ids: torch.Tensor | None = None

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


def load(path: str | os.PathLike, verify: bool = False) -> GraphDataset:
    """Open a dataset folder made by ``sparsetrain preprocess`` / ``synth`` / :func:`from_pyg`.

    Arrays are memory-mapped. ``verify=True`` also checks every file's sha256
    (reads everything once) and raises :class:`~sparsetrain.errors.ChecksumError`.
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

    def tensor(name: str) -> torch.Tensor | None:
        return torch.from_numpy(fmt.open_array(folder, name, meta)) if name in meta["files"] else None

    graph = CSCGraph(tensor(fmt.INDPTR), tensor(fmt.INDICES), tensor(fmt.EDGE_WEIGHT))
    if graph.num_nodes != meta["num_nodes"] or graph.num_edges != meta["num_edges"] or int(graph.indptr[-1]) != graph.num_edges:
        raise ChecksumError(f"{folder / fmt.INDPTR}: does not describe {meta['num_edges']} edges over {meta['num_nodes']} nodes; the dataset is damaged")
    split = {name: t for name in fmt.SPLIT_NAMES if (t := tensor(fmt.split_file(name))) is not None}
    dataset = GraphDataset(
        path=folder,
        meta=meta,
        graph=graph,
        features=None,
        labels=tensor(fmt.LABELS),
        split=split,
        original_ids=tensor(fmt.ORIGINAL_IDS),
    )
    if fmt.FEATURES in meta["files"]:
        fmt.open_array(folder, fmt.FEATURES, meta)  # same checks (and errors) as every other array
        dataset.features = dataset.feature_store()
    return dataset


def load_clusters(ds: GraphDataset) -> torch.Tensor | None:
    """The dataset's cluster id per node (``clusters.npy``), or None when it was not built with ``reorder="cluster"``."""
    from sparsetrain.datasets.clustering import CLUSTERS_FILE

    if not ds.meta.get("clusters") or CLUSTERS_FILE not in ds.meta.get("files", {}):
        return None
    return torch.from_numpy(fmt.open_array(ds.path, CLUSTERS_FILE, ds.meta))
