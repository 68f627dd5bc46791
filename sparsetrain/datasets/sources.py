"""What importers hand the writer: a :class:`GraphInput` of re-iterable streams of node rows and edges by type, each
named for error messages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from sparsetrain.datasets.applicable import ONE_TYPE, TYPED
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE, EdgeType


@dataclass
class Source:
    """A re-iterable stream of chunks with a name for error messages.

    ``where(row)`` turns a 0-based data row into the user's terms (a CSV line, an array row).
    """

    name: str
    chunks: Callable[[], Iterator]
    rows: int | None = None
    where: Callable[[int], str] = field(default=lambda row: f"row {row}")

    @classmethod
    def from_reader(cls, reader) -> Source:
        return cls(str(reader.path), reader, reader.num_rows(), reader.where)

    @classmethod
    def from_array(cls, name: str, array: np.ndarray, chunk_rows: int = 1 << 22) -> Source:
        return cls(name, lambda: (array[lo : lo + chunk_rows] for lo in range(0, len(array), chunk_rows)), len(array))


@dataclass
class EdgeSource(Source):
    """Edge chunks ``(src, dst, weight | None)``; ``weighted`` says whether weights come along.

    ``weight_name`` names the weights in errors when they are not a column of ``name`` (a separate array).
    ``release`` is called once the edges have been read for the last time (a generated source frees its scratch).
    """

    weighted: bool = False
    weight_name: str | None = None
    release: Callable[[], None] | None = None

    def reversed(self) -> EdgeSource:
        """The same edges from dst to src (the reverse edge type of a typed graph); rows stay in order."""
        return EdgeSource(self.name, lambda: ((dst, src, w) for src, dst, w in self.chunks()), self.rows, self.where,
                          weighted=self.weighted, weight_name=self.weight_name)


@dataclass
class EdgeFeatures:
    """One feature row per edge of an edge source, in memory: ``values[i]`` belongs to the source's row ``i``."""

    name: str
    values: np.ndarray


@dataclass
class TimeColumn:
    """Times in memory, one per node of a node type or per edge of an edge source (row ``i`` = its row ``i``):
    int64 or float64, finite (see :func:`~sparsetrain.datasets.readers.check_times`). ``where(row)`` names a row."""

    name: str
    values: np.ndarray
    where: Callable[[int], str] = field(default=lambda row: f"row {row}")

    @property
    def rows(self) -> int:
        return len(self.values)


@dataclass
class GraphInput:
    """A graph as every importer hands it to the writer: per node type tables, per edge type edge sources.

    A homogeneous graph is the one-type case (node type ``NODE``, edge type ``EDGE``; :meth:`one_type`).
    ``num_nodes`` lists node types in their order (a count, or None: the rows of the type's features, labels or
    times, else the largest id + 1); ``target_type`` names the node type ``splits`` and an int ``num_classes`` are for
    (default: the only labelled type); ``edge_splits`` are given link-prediction splits
    (``{name: (EdgeSplit, where it came from)}``, e.g. OGB's); ``provenance`` goes to ``meta.json``.
    """

    edges: dict[EdgeType, EdgeSource]
    num_nodes: dict[str, int | None] = field(default_factory=dict)
    features: dict[str, Source] = field(default_factory=dict)
    labels: dict[str, Source] = field(default_factory=dict)
    node_time: dict[str, TimeColumn] = field(default_factory=dict)
    edge_features: dict[EdgeType, EdgeFeatures] = field(default_factory=dict)
    edge_time: dict[EdgeType, TimeColumn] = field(default_factory=dict)
    splits: dict[str, Source] = field(default_factory=dict)
    target_type: str | None = None
    edge_splits: dict | None = None
    provenance: dict = field(default_factory=dict)

    @classmethod
    def one_type(cls, edges: EdgeSource, *, num_nodes: int | None = None, features: Source | None = None,
                 labels: Source | None = None, node_time: TimeColumn | None = None,
                 edge_features: EdgeFeatures | None = None, edge_time: TimeColumn | None = None,
                 **rest) -> GraphInput:
        """A homogeneous graph: each table one value (or None) instead of a dict by type."""
        nodes = lambda value: {} if value is None else {NODE_TYPE: value}  # noqa: E731
        edge = lambda value: {} if value is None else {EDGE_TYPE: value}  # noqa: E731
        return cls({EDGE_TYPE: edges}, {NODE_TYPE: num_nodes}, nodes(features), nodes(labels), nodes(node_time),
                   edge(edge_features), edge(edge_time), **rest)

    @property
    def kind(self) -> str:
        """``ONE_TYPE``: the one node type and edge type of a homogeneous graph (``NODE``, ``EDGE``); else ``TYPED``
        (the kinds :data:`~sparsetrain.datasets.applicable.IMPORT_APPLIES` reads)."""
        one_type = list(self.edges) == [EDGE_TYPE] and all(t == NODE_TYPE for t in self.num_nodes)
        return ONE_TYPE if one_type else TYPED

    def target(self) -> str | None:
        """The node type labels and splits are for: ``target_type``, else the only labelled type, else the only node
        type; None when that is unclear (several labelled types: :func:`build_dataset` refuses it)."""
        if self.target_type is not None:
            return self.target_type
        for candidates in (list(self.labels), self.node_types):
            if candidates:
                return candidates[0] if len(candidates) == 1 else None
        return None

    @property
    def node_types(self) -> list[str]:
        """The counted types in their order, then those only the edge types name."""
        return list(dict.fromkeys([*self.num_nodes, *(end for et in self.edges for end in (et[0], et[2]))]))
