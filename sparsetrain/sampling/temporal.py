"""Temporal sampling: no neighbor later than its seed's time (PyG's rule), node-level or edge-level time.

A sampler with node times (``node_time``: the time of each node) or edge times (``edge_time``: of each edge)
samples, for a node of the subgraph of a seed with time ``t``, only in-edges whose time is ``<= t``: the source
node's time for node-level time, the edge's own for edge-level time. Every node of a seed's subgraph uses that
seed's time, so temporal sampling is disjoint (one subgraph per seed, as in PyG).

The graph's columns are kept sorted by time (:func:`sort_by_time`, once, when the sampler is built), so the
eligible in-edges of a node are a prefix of its column, found by binary search: :func:`count_hop_in_time` is
:func:`~sparsetrain.sampling.neighbor.count_hop` on that prefix, and the draws that follow are the ordinary ones
within it. ``"uniform"`` draws from the whole prefix; ``"last"`` from its last ``fanout`` edges (the most recent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numba
import numpy as np
import torch
from numba import prange

from sparsetrain.errors import InputError
from sparsetrain.sampling.draw import edge_count, segment_of
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE, CSCGraph

STRATEGIES = ("uniform", "last")
UNTIMED, NODE_TIME, EDGE_TIME = 0, 1, 2


@numba.njit(cache=True, inline="always")
def _time_at(p, kind, src_base, indices, node_time, edge_time):
    if kind == EDGE_TIME:
        return edge_time[p]
    u = indices[p]
    if u < 0 or src_base + u >= node_time.shape[0]:  # a damaged entry: sample_hop reports it
        return node_time[0] - node_time[0]
    return node_time[src_base + u]


@numba.njit(cache=True, nogil=True, parallel=True)
def count_hop_in_time(indptr, indices, weights, cols, seg_start, seg_et, fanouts, et_kind, et_src_base, node_time,
                      edge_time, item_time, last, replace, weighted, num_edges, lo, deg, offsets):
    """:func:`~sparsetrain.sampling.neighbor.count_hop` with each item's range cut to its in-edges of time
    <= ``item_time[i]``.

    Edge type ``k`` is timed by ``et_kind[k]`` (``NODE_TIME``: ``node_time[et_src_base[k] + source]``; ``EDGE_TIME``:
    ``edge_time`` at the CSC position; ``UNTIMED``: not cut). ``last``: keep only the last ``fanout`` eligible edges.
    """
    n = cols.shape[0]
    offsets[0] = 0
    for i in prange(n):
        s = segment_of(seg_start, i)
        k = seg_et[s]
        fanout = fanouts[k]
        v = cols[i]
        a = indptr[v]
        b = indptr[v + 1]
        if a < 0 or b < a or b > num_edges:
            lo[i] = 0
            deg[i] = 0
            offsets[i + 1] = -1
            continue
        kind = et_kind[k]
        if kind != UNTIMED:
            t = item_time[i]
            left, right = a, b
            while left < right:  # the first in-edge later than t
                mid = (left + right) >> 1
                if _time_at(mid, kind, et_src_base[k], indices, node_time, edge_time) <= t:
                    left = mid + 1
                else:
                    right = mid
            b = left
            if last and fanout >= 0 and b - a > fanout:
                a = b - fanout
        lo[i] = a
        deg[i] = b - a
        offsets[i + 1] = edge_count(weights, a, b - a, fanout, replace, weighted)
    for i in range(n):
        if offsets[i + 1] < 0:
            return -1 - i
        offsets[i + 1] += offsets[i]
    return offsets[n]


class Times:
    """The times a temporal sampler reads, laid out for :func:`count_hop_in_time` (see :meth:`of`)."""

    def __init__(self, graph: CSCGraph, node_time, edge_time, strategy: str) -> None:
        if strategy not in STRATEGIES:
            raise InputError(f"temporal_strategy={strategy!r}; choose 'uniform' or 'last'")
        if node_time is not None and edge_time is not None:
            raise InputError("both node_time and edge_time are given; temporal sampling reads one of them")
        self.last = strategy == "last"
        types, edge_types = graph.node_types, graph.edge_types
        node_time = _per_type(node_time, types, NODE_TYPE, "node_time")
        edge_time = _per_type(edge_time, edge_types, EDGE_TYPE, "edge_time")
        values = list((node_time or {}).values()) + list((edge_time or {}).values())
        self.dtype = torch.float64 if any(v.dtype.is_floating_point for v in values) else torch.int64
        sizes = graph.type_layout.num_nodes
        per_type_edges = graph.num_edges_per_type
        self.types = types
        self.type_offset = np.concatenate([[0], np.cumsum([sizes[t] for t in types])]).astype(np.int64)
        self.timed_types = set(node_time or ())
        self.et_kind = np.zeros(len(edge_types), np.int64)
        self.et_src_base = np.array([self.type_offset[types.index(et[0])] for et in edge_types], np.int64)
        self.node_time = np.zeros(1, _np(self.dtype))
        self.edge_time = np.zeros(1, _np(self.dtype))
        if node_time is not None:
            parts = []
            for t in types:
                given = node_time.get(t)
                if given is not None and given.numel() != sizes[t]:
                    raise InputError(f"node_time of {t!r} has {given.numel()} entries for {sizes[t]} nodes; give "
                                     "one time per node")
                own = torch.zeros(sizes[t], dtype=self.dtype) if given is None else given.reshape(-1).to(self.dtype)
                parts.append(own)
            self.node_time = torch.cat(parts).numpy() if parts else self.node_time
            self.et_kind[:] = [NODE_TIME if et[0] in node_time else UNTIMED for et in edge_types]
        self.by_edge = {}  # per edge type, its edges' times in edge-id order (what the sort reads)
        if edge_time is not None:
            for et in edge_types:
                given = edge_time.get(et)
                if given is not None and given.numel() != per_type_edges[et]:
                    raise InputError(f"edge_time of {et} has {given.numel()} entries for {per_type_edges[et]} "
                                     "edges; give one time per edge, in edge-id order")
                if given is not None:
                    self.by_edge[et] = given.reshape(-1).to(self.dtype)
            self.et_kind[:] = [EDGE_TIME if et in edge_time else UNTIMED for et in edge_types]

    def seed_times(self, node_type: str, seeds: np.ndarray, given: torch.Tensor | None) -> np.ndarray:
        """The seeds' times: ``given``, else their own node times (PyG's default; edge-level time needs them given)."""
        if given is not None:
            given = torch.as_tensor(given).reshape(-1)
            if given.numel() != seeds.shape[0]:
                raise InputError(f"seed_time has {given.numel()} entries for {seeds.shape[0]} seeds; give one time "
                                 "per seed")
            return given.to(self.dtype).numpy()
        if node_type not in self.timed_types:
            raise InputError(f"the seeds have no time: {node_type!r} nodes have no node_time; give the seeds' times "
                             "(SamplerInput(..., seed_time=...))")
        return self.node_time[self.type_offset[self.types.index(node_type)] + seeds]

    def count_hop(self, indptr, indices, weights, cols, seg_start, seg_et, fan, seed_time, item_batch, replace,
                  weighted, ws) -> int:
        """A hop's edge count over the in-edges no later than each work item's seed time (:func:`count_hop_in_time`,
        the CPU hop loop's count for a temporal sampler; ``ws``: its ``HostScratch``)."""
        return count_hop_in_time(indptr, indices, weights, cols, seg_start, seg_et, fan, self.et_kind,
                                 self.et_src_base, self.node_time, self.edge_time, seed_time[item_batch], self.last,
                                 replace, weighted, len(indices), ws.lo, ws.deg, ws.offsets)

    def sort(self, graph: CSCGraph) -> CSCGraph:
        """``graph`` with every column sorted by time (itself when it already is); edge ids stay the caller's."""
        ids = _edge_ids(graph)
        time = self.at_positions(graph, ids)
        sorted_graph = sort_by_time(graph, time, ids)
        if sorted_graph is not graph:
            time = self.at_positions(sorted_graph, _edge_ids(sorted_graph))
        self.edge_time = time if time is not None else self.edge_time
        return sorted_graph

    def at_positions(self, graph: CSCGraph, ids: np.ndarray) -> np.ndarray | None:
        """Each CSC position's time (its source's node time, or its edge's time), or None where untimed."""
        if not (self.et_kind != UNTIMED).any():
            return None
        starts = _edge_starts(graph)
        out = np.zeros(graph.num_edges, _np(self.dtype))
        indices = graph.indices.numpy()
        for k, et in enumerate(graph.edge_types):
            a, b = starts[k], starts[k + 1]
            if self.et_kind[k] == NODE_TIME:
                out[a:b] = self.node_time[self.et_src_base[k] + indices[a:b].astype(np.int64)]
            elif self.et_kind[k] == EDGE_TIME:
                out[a:b] = self.by_edge[et].numpy()[ids[a:b]]
        return out


def seed_times_of(times: Times | None, inp, named: list, seeds: list[tuple[int, torch.Tensor]],
                  node_types: tuple[str, ...]) -> np.ndarray | None:
    """The times of a batch's seeds, in seed order (``times``: a temporal sampler's, else None; ``named``: the seeds'
    ``(node type name, ids)`` as ``inp`` gave them; ``seeds``: ``(node type index, ids)``, the ids int64 on the CPU).
    None for a sampler without times, which refuses an input that has them."""
    if times is None:
        if inp.seed_time is not None:
            raise InputError("SamplerInput.seed_time is set but the sampler is not temporal; give it node_time or "
                             "edge_time")
        return None
    given = inp.seed_time if isinstance(inp.seeds, dict) or inp.seed_time is None else {named[0][0]: inp.seed_time}
    parts = [times.seed_times(node_types[t], ids.numpy(),
                              None if given is None else given.get(name))
             for (t, ids), (name, _) in zip(seeds, named)]
    return np.concatenate(parts) if parts else np.zeros(0, times.node_time.dtype)


def sort_by_time(graph: CSCGraph, time: np.ndarray | None, ids: np.ndarray) -> CSCGraph:
    """``graph`` with each column's edges in ascending ``time`` (stable: ties keep their order); ``ids``: its edge
    ids."""
    if time is None or graph.num_edges == 0:
        return graph
    indptr = graph.indptr.numpy()
    column = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    if not np.any((np.diff(time) < 0) & (column[1:] == column[:-1])):
        return graph
    order = np.lexsort((time, column))
    pick = lambda t: None if t is None else t[torch.from_numpy(order)].contiguous()  # noqa: E731
    return CSCGraph(graph.indptr, pick(graph.indices), pick(graph.weights), torch.from_numpy(ids[order]),
                    types=graph.types)


def _edge_starts(graph: CSCGraph) -> np.ndarray:
    """Each edge type's first CSC position, then the edge count (a homogeneous graph: 0 and its edges)."""
    return graph.indptr[torch.tensor(graph.type_layout.col_offset)].numpy().astype(np.int64)


def _edge_ids(graph: CSCGraph) -> np.ndarray:
    """Each CSC position's edge id: the graph's ``edge_perm``, else the position counted within its edge type."""
    if graph.edge_perm is not None:
        return graph.edge_perm.numpy()
    starts = _edge_starts(graph)
    return np.arange(graph.num_edges, dtype=np.int64) - np.repeat(starts[:-1], np.diff(starts))


def _per_type(value, keys, one_key, what: str) -> dict | None:
    """``value`` as a dict over ``keys``: a dict as it is, one tensor as the value of ``one_key`` (a homogeneous graph's
    one type); a key the graph lacks is refused."""
    if value is None:
        return None
    value = dict(value) if isinstance(value, Mapping) else {one_key: value}
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise InputError(f"{what} is given for {unknown[0]!r}, which the graph does not have (one tensor stands for "
                         f"{one_key!r}, a homogeneous graph's one type); give a dict over its types {keys}")
    return {k: torch.as_tensor(v) for k, v in value.items()}


def _np(dtype: torch.dtype):
    return np.float64 if dtype == torch.float64 else np.int64


class SeedNodeTimes:
    """A sampler stage: a batch given without ``seed_time`` gets its seeds' node times (``node_time[seeds]``), then the
    inner temporal ``sampler`` samples it. For a sampler timed by edges (``edge_time``), whose seeds have no time of
    their own: ``sparsetrain train --temporal`` on a dataset with edge and node times.

    ``node_time``: one tensor (homogeneous), or a dict by node type.
    """

    def __init__(self, sampler, node_time) -> None:
        self.sampler = sampler
        self.node_time = node_time

    @property
    def graph(self) -> CSCGraph:
        return self.sampler.graph

    @property
    def fanouts(self) -> Fanouts:
        """The inner sampler's fanouts."""
        return self.sampler.fanouts

    def _times(self, node_type: str | None, seeds: torch.Tensor) -> torch.Tensor:
        times = self.node_time
        if isinstance(times, Mapping):
            node_type = node_type or getattr(self.sampler, "seed_type", None)
            if node_type not in times:
                raise InputError(f"the seeds have no time: {node_type!r} nodes have no node time; give the seeds' "
                                 "times (SamplerInput(..., seed_time=...))")
            times = times[node_type]
        return times[seeds.to("cpu", torch.int64)]

    def sample(self, inp):
        if inp.seed_time is None:
            if isinstance(inp.seeds, dict):
                seed_time = {t: self._times(t, ids) for t, ids in inp.seeds.items()}
            else:
                seed_time = self._times(inp.node_type, inp.seeds)
            inp = dataclasses.replace(inp, seed_time=seed_time)
        return self.sampler.sample(inp)
