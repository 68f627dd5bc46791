"""What a run's plan reads of a dataset: its description, never a value of an array.

:class:`DatasetMeta` is read once from an opened :class:`~sparsetrain.datasets.GraphDataset` (:meth:`DatasetMeta.of`)
and handed to :func:`~sparsetrain.engine.plan.plan`: the node and edge types and their counts, the feature tables'
widths and bytes, the labelled types and their class counts, the split sizes, which types have times, directedness
and the graph's bytes. Every field is by type; a homogeneous dataset is the one-type case (node type ``_N``, edge type
``(_N, _E, _N)``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.format import EdgeType
from sparsetrain.sampling.graph import has_types


class FeatureTable(NamedTuple):
    """A feature table's size: what its placement and its share of a cache are decided from."""

    columns: int
    nbytes: int
    row_bytes: int


@dataclass(frozen=True)
class PartsMeta:
    """A partitioned folder as the plan reads it (``sparsetrain partition``'s output, one part per rank)."""

    num_parts: int
    train_per_part: tuple[int, ...]
    """Owned train nodes of each part (every rank runs as many batches as the largest part needs)."""
    halo_rows: dict[str, int]
    """This rank's halo by node type: the nodes its part reads from other parts."""


@dataclass(frozen=True)
class DatasetMeta:
    """The description of a dataset a run is planned on (see the module)."""

    path: Path
    meta_sha256: str
    """sha256 of ``meta.json`` (which holds every array's sha256): the dataset's contents in a checkpoint's record."""
    num_nodes: dict[str, int]
    num_edges: dict[EdgeType, int]
    features: dict[str, FeatureTable]
    """By the node types that have features."""
    num_classes: dict[str, int | None]
    """By the node types that have labels (None: no class count recorded)."""
    target_type: str | None
    """The node type the dataset's split refers to (None: it has none)."""
    split: dict[str, int]
    """Nodes per stored split (``train``, ``val``, ``test``)."""
    link_train_edges: int | None
    """Positive train edges of a link split (None: the dataset has none)."""
    node_time: frozenset[str]
    """The node types with node times."""
    edge_time: frozenset[EdgeType]
    """The edge types with edge times."""
    directed: bool
    graph_bytes: int
    """Bytes of the graph's arrays (column pointers, indices, weights)."""
    parts: PartsMeta | None = None
    """A partitioned folder's parts (the fields above then describe this rank's part, its features its owned rows,
    ``path`` and ``meta_sha256`` the folder and its manifest's checksum); None: one dataset."""

    @classmethod
    def of(cls, ds) -> DatasetMeta:
        """The description of the opened dataset ``ds`` (reads ``meta.json`` for its sha256, no array)."""
        graph = ds.graph
        train = ds.edge_split.get("train")
        return cls(
            path=ds.path, meta_sha256=hashlib.sha256((ds.path / fmt.META_FILE).read_bytes()).hexdigest(),
            num_nodes=ds.num_nodes_by_type, num_edges=ds.num_edges_by_type,
            features={t: FeatureTable(table.shape[1], table.nbytes, table.row_bytes)
                      for t, table in ds.features_by_type.items()},
            num_classes={t: ds.num_classes_of(t) for t in ds.labels_by_type},
            target_type=ds.target_type, split={name: len(ids) for name, ids in ds.split.items()},
            link_train_edges=None if train is None else train.pos.shape[1],
            node_time=frozenset(ds.node_time_by_type), edge_time=frozenset(ds.edge_time_by_type),
            directed=ds.directed,
            graph_bytes=sum(t.numel() * t.element_size() for t in (graph.indptr, graph.indices, graph.weights)
                            if t is not None),
        )

    @property
    def is_typed(self) -> bool:
        """More than the one node type and edge type of a homogeneous graph."""
        return has_types(self.num_nodes, self.num_edges)

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return list(self.num_edges)

    @property
    def num_features(self) -> dict[str, int]:
        """Feature columns by node type (0 for a type without features)."""
        return {t: self.features[t].columns if t in self.features else 0 for t in self.num_nodes}
