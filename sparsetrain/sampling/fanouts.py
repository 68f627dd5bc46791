"""`Fanouts`: the neighbours sampled per hop, one value from the command line (``--fanout``) to the kernels.

PyG calls this idea ``num_neighbors`` (its ``NumNeighbors``); sparsetrain calls it ``fanouts`` everywhere, and the PyG
adapter maps ``num_neighbors`` to it once (:mod:`sparsetrain.pyg.sampler`). This is the one place the counts are
checked and normalised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sparsetrain.errors import InputError
from sparsetrain.sampling.graph import EDGE_TYPE, CSCGraph, EdgeType
from sparsetrain.sampling.minibatch import one_type_view

PerHop = tuple[int, ...]
MAX_COUNT = 2**31 - 1
"""The largest count: a hop's edges (count x work items, each below 2**32) then stay within the kernels' int64 offsets,
and no graph has a node with more in-edges (a larger count draws what this one does, or overflows with replacement)."""


@dataclass(frozen=True)
class Fanouts:
    """Neighbours drawn per hop, from the seeds outward (``values[0]`` for the seeds' own in-edges); -1 = all, 0 = none.

    ``values``: one sequence for every edge type, or (typed graphs) a mapping ``{edge_type: per hop}``, every edge type
    with the same number of hops; edge types left out of a mapping sample 0. ``[]`` samples no hop. Counts are ints
    from -1 to :data:`MAX_COUNT` (not bools). 0 is a count, as in PyG's ``NumNeighbors``: the hop adds no neighbours
    (its block has no edges), the usual way to leave an edge type out of one hop. Stored as tuples: a ``Fanouts`` does
    not change after it was checked.
    """

    values: PerHop | Mapping[EdgeType, PerHop]

    def __post_init__(self) -> None:
        values = self.values
        if isinstance(values, Fanouts):
            values = values.values
        if isinstance(values, Mapping):
            if not values:
                raise InputError("fanouts={} names no edge type; give a list for every edge type, or a list per "
                                 "edge type to sample")
            lengths = {len(list(v)) for v in values.values()}
            if len(lengths) != 1:
                raise InputError(f"fanouts per edge type have different hop counts {sorted(lengths)}; give every "
                                 "edge type one entry per hop")
            checked = {et: _hop_counts(v, et) for et, v in values.items()}
        elif isinstance(values, Sequence) and not isinstance(values, str):
            checked = _hop_counts(values, None)
        else:
            raise InputError(f"fanouts={values!r}; give a list of ints (one per hop, every edge type) or a dict "
                             "{edge_type: list}")
        object.__setattr__(self, "values", checked)

    @classmethod
    def of(cls, fanouts: Fanouts | Sequence[int] | Mapping[EdgeType, Sequence[int]]) -> Fanouts:
        """``fanouts`` as a checked ``Fanouts`` (itself when it already is one)."""
        return fanouts if isinstance(fanouts, Fanouts) else cls(fanouts)

    @classmethod
    def parse(cls, text: str) -> Fanouts:
        """The command line's spelling, ``15,10,5``: comma-separated counts, checked as the constructor checks them."""
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise InputError(f"{text!r}: expected comma-separated integers like 15,10,5 (-1 = all "
                             "neighbors)") from None
        return cls(values)

    @property
    def num_hops(self) -> int:
        """How many hops are sampled (the layers of a model trained on the blocks)."""
        if isinstance(self.values, Mapping):
            return len(next(iter(self.values.values())))
        return len(self.values)

    def as_list(self) -> list[int]:
        """The one list of counts (not for per-edge-type counts)."""
        if isinstance(self.values, Mapping):
            raise InputError("fanouts are given per edge type; this needs one list for every edge type")
        return list(self.values)

    def for_graph(self, graph: CSCGraph) -> Fanouts:
        """These counts as the sampler over ``graph`` holds them: one list (every edge type), or on a typed graph given
        a mapping, a mapping over all the graph's edge types (those left out: 0); a mapping over a homogeneous graph's
        one edge type is its list. An edge type the graph lacks is refused."""
        if not isinstance(self.values, Mapping):
            return self
        unknown = [k for k in self.values if tuple(k) not in graph.edge_types]
        if unknown:
            raise InputError(f"fanouts names edge type {unknown[0]!r}, which the graph does not have; its edge "
                             f"types are {graph.edge_types}")
        zeros = (0,) * self.num_hops
        full = {et: self.values.get(et, zeros) for et in graph.edge_types}
        return Fanouts(one_type_view(full, EDGE_TYPE))

    def kernel_array(self, graph: CSCGraph) -> np.ndarray:
        """The counts as the kernels (CPU and CUDA) read them: int64 ``[hops, edge types]`` in ``graph.edge_types``
        order."""
        counts = self.for_graph(graph).values
        per_type = counts if isinstance(counts, Mapping) else dict.fromkeys(graph.edge_types, counts)
        by_type = np.array([per_type[et] for et in graph.edge_types], np.int64)
        return by_type.reshape(len(graph.edge_types), self.num_hops).T.copy()

    def edges_per_seed(self) -> float:
        """Block edges one seed's sampled batch aggregates at most (every hop's product of counts); ``inf`` with -1."""
        counts = self.as_list()
        if any(f < 0 for f in counts):
            return math.inf
        return float(sum(math.prod(counts[: k + 1]) for k in range(len(counts))))


def _hop_counts(per_hop, edge_type) -> PerHop:
    per_hop = list(per_hop)
    if any(not isinstance(f, (int, np.integer)) or isinstance(f, bool) or not -1 <= f <= MAX_COUNT for f in per_hop):
        where = "" if edge_type is None else f" for {edge_type}"
        raise InputError(f"fanouts={per_hop!r}{where}; give a list of ints >= 0 and <= {MAX_COUNT} (one per hop), "
                         "or -1 for all neighbors")
    return tuple(int(f) for f in per_hop)
