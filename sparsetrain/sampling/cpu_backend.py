"""The CPU backend of :class:`~sparsetrain.sampling.NeighborSampler`: the host hop loop over the Numba kernels of
:mod:`~sparsetrain.sampling.neighbor`, one :class:`~sparsetrain.sampling.neighbor.HostScratch` per concurrent call.

The sampler builds one :class:`CpuBackend` when it is made (or moved with ``.to()``), and the backend fixes its mode
hooks there: the node map of a batch (:class:`SharedNodes`, the workspace's direct-address table, or
:class:`~sparsetrain.sampling.disjoint.DisjointNodes`, one subgraph per seed), how a hop counts its edges (all of a
node's in-edges, or only those before its seed's time: :meth:`~sparsetrain.sampling.temporal.Times.count_hop`) and
whether the batch's induced edges are read before its table is cleared (:func:`~sparsetrain.sampling.subgraph.induced`).
"""

from __future__ import annotations

import functools
import threading
from typing import NamedTuple

import numpy as np
import torch

from sparsetrain.sampling import disjoint, neighbor, subgraph, temporal
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.layout import KernelLayout
from sparsetrain.sampling.minibatch import Block
from sparsetrain.sampling.neighbor import NO_ITEMS, threads_for


class Drawn(NamedTuple):
    """What a backend drew for one batch, before the core assembles it: the seeds as sampled (``(node type index,
    ids)`` on the target's device), the nodes per type, per hop ``(edge_index, edge_ids, segments, before, after)``
    (innermost first), each node's seed index per type (disjoint sampling, else None) and the flat induced subgraph
    (``subgraph_type="induced"``, else None)."""

    seeds: list[tuple[int, torch.Tensor]]
    nodes: list[torch.Tensor]
    layers: list
    batch: list[torch.Tensor] | None = None
    flat: Block | None = None


class SharedNodes:
    """The node map of a batch whose seeds share their nodes: the workspace's direct-address table (one slot per node
    of the graph), left clean for the next batch by :meth:`release`."""

    keys = values = NO_ITEMS  # (sample_hop's disjoint table: none)

    def __init__(self, layout: KernelLayout) -> None:
        self.layout = layout
        self.single = len(layout.node_types) == 1  # new nodes go straight to the one node array

    def reuse(self, num_seeds: int) -> SharedNodes:
        """This map for the next batch (the table is the workspace's)."""
        return self

    def insert_seeds(self, ws: neighbor.HostScratch, seeds: list[tuple[int, torch.Tensor]], counts: np.ndarray) -> None:
        """Put the seeds in the table (local ids from 0 per type); ``counts[t]`` is set as each type's go in."""
        for t, ids in seeds:
            seeds_np = ids.numpy()
            repeated = neighbor.insert_seeds(seeds_np, self.layout.type_offset[t], ws.table)
            if repeated >= 0:
                raise self.layout.seed_repeated(int(seeds_np[repeated]))
            ws.grow_nodes(t, len(seeds_np), 0)[: len(seeds_np)] = seeds_np
            counts[t] = len(seeds_np)

    def item_batch(self, ws: neighbor.HostScratch, segments) -> np.ndarray:
        return NO_ITEMS

    def new_nodes(self, ws: neighbor.HostScratch, counts: np.ndarray, num_edges: int) -> np.ndarray:
        """Room for a hop's new nodes (up to ``num_edges``)."""
        if self.single:
            return ws.grow_nodes(0, int(counts[0]) + num_edges, int(counts[0]))[counts[0] :]
        ws.new = ws.fit(ws.new, num_edges)
        return ws.new

    def append(self, ws: neighbor.HostScratch, counts: np.ndarray, new_nodes: np.ndarray, found: int) -> None:
        """A hop's ``found`` new nodes (table positions) appended to their types' node arrays."""
        if self.single or not found:
            return
        layout = self.layout
        new = new_nodes[:found]
        new_type = np.searchsorted(layout.type_offset, new, side="right") - 1
        for t in np.flatnonzero(np.bincount(new_type, minlength=len(layout.node_types))):
            mine = new[new_type == t] - layout.type_offset[t]
            start = int(counts[t]) - len(mine)
            ws.grow_nodes(t, int(counts[t]), start)[start : counts[t]] = mine

    def release(self, ws: neighbor.HostScratch, counts: np.ndarray) -> None:
        for t in range(len(self.layout.node_types)):
            with threads_for(int(counts[t])):
                neighbor.reset_table(ws.table, ws.nodes[t][: counts[t]], self.layout.type_offset[t])

    def seed_index(self, ws: neighbor.HostScratch, counts: np.ndarray) -> None:
        """No seed index: the seeds share their nodes."""
        return None


class CpuBackend:
    """Batches drawn on the host; the sampler's options all run here. Every call takes the ``sampler`` (the
    :class:`~sparsetrain.sampling.NeighborSampler` that built it) whose options and layouts it reads."""

    padded = False  # (padded batches are the GPU's)
    last_batch_counts = None

    def __init__(self, sampler) -> None:
        self._lock = threading.Lock()
        self._workspaces: list[neighbor.HostScratch] = []  # one per concurrent call
        shared = None if sampler.disjoint else SharedNodes(sampler._layout)  # (no state of its own: one for all)
        self._node_map = shared.reuse if shared else functools.partial(disjoint.DisjointNodes, sampler._layout)
        self._count = _count_untimed if sampler.times is None else sampler.times.count_hop
        self._induced = sampler.subgraph_type == "induced"

    def select(self, seeds: list[tuple[int, torch.Tensor]]) -> CpuBackend:
        """The backend that draws a batch of ``seeds``: this one."""
        return self

    def check_padded(self) -> None:
        """Nothing in flight on the host."""

    def draw(self, sampler, inp: SamplerInput, named: list, seeds: list[tuple[int, torch.Tensor]],
             key: int) -> Drawn:
        """The hops of batch ``key`` around ``seeds`` (``named``: their node type names as given, for their times)."""
        seeds = [(t, ids.to("cpu", torch.int64)) for t, ids in seeds]
        seed_time = temporal.seed_times_of(sampler.times, inp, named, seeds, sampler._layout.node_types)
        sampler.graph.check_files()
        indptr, indices, weights = sampler.graph.numpy()
        if weights is None or not sampler.weighted:
            weights = np.empty(0, np.float32)
        edge_perm = np.empty(0, np.int64) if sampler.graph.edge_perm is None else sampler.graph.edge_perm.numpy()
        T = len(sampler._layout.node_types)
        counts = np.zeros(T, np.int64)
        first = np.zeros(T, np.int64)  # per node type, the first node the next hop samples for
        layers = []
        ws = self._acquire_workspace(sampler._layout)
        node_map = self._node_map(sum(ids.numel() for _, ids in seeds))
        flat = None
        try:
            try:
                node_map.insert_seeds(ws, seeds, counts)
                for hop in range(sampler._block_layout.fanouts.shape[0]):
                    before = counts.copy()
                    edge_index, edge_ids, segments = self._hop(sampler, hop, key, ws, first, counts, indptr, indices,
                                                               weights, edge_perm, node_map, seed_time)
                    layers.append((torch.from_numpy(edge_index), torch.from_numpy(edge_ids), segments, before,
                                   counts.copy()))
                    if sampler.hop_nodes == "new":
                        first = before
                if self._induced:
                    flat = subgraph.induced(sampler._layout, ws, counts, indptr, indices, edge_perm)
            finally:
                node_map.release(ws, counts)
            nodes = [torch.from_numpy(ws.nodes[t][: counts[t]].copy()) for t in range(T)]
            batch = node_map.seed_index(ws, counts)
        finally:
            self._release_workspace(ws)
        return Drawn(seeds, nodes, layers, batch, flat)

    def _hop(self, sampler, hop, key, ws, first, counts, indptr, indices, weights, edge_perm, node_map, seed_time):
        """Sample hop ``hop`` for every edge type (counts grow by the new nodes); ``(edge_index, edge_ids, segments)``.

        ``segments``: ``(edge type index, first edge, end edge)`` of each edge type sampled at this hop.
        """
        layout = sampler._layout
        fan = layout.fanouts[hop]
        segments = layout.segments(hop, counts, first)
        cols = layout.columns(ws.nodes, segments, np.concatenate, np.zeros(0, np.int64))
        item_batch = node_map.item_batch(ws, segments)  # disjoint: each work item's seed index, in cols' order
        seg_et, seg_start, seg_dst = (np.array(a, np.int64) for a in segments)
        work = len(cols)
        ws.for_items(work)
        with threads_for(work * 8):
            num_edges = self._count(indptr, indices, weights, cols, seg_start, seg_et, fan, seed_time, item_batch,
                                    sampler.replace, sampler.weighted, ws)
        if num_edges < 0:
            raise sampler._bad_range(cols, -1 - num_edges)
        ws.nbr = ws.fit(ws.nbr, num_edges)
        new_nodes = node_map.new_nodes(ws, counts, num_edges)
        edge_index = np.empty((2, num_edges), np.int64)
        edge_ids = np.empty(num_edges, np.int64)
        with threads_for(num_edges):
            found = neighbor.sample_hop(indices, weights, edge_perm, cols, seg_start, seg_et, seg_dst, fan,
                                        layout.hop_keys(sampler.seed, key, hop), sampler.replace, sampler.weighted,
                                        layout.col_offset, layout.edge_offset, layout.et_src, layout.type_offset,
                                        layout.type_size, ws.lo, ws.deg, ws.offsets, ws.nbr, ws.table, counts,
                                        new_nodes, edge_index, edge_ids, item_batch, node_map.keys, node_map.values)
        if found < 0:
            raise sampler._bad_neighbor(cols, ws, -1 - found)
        node_map.append(ws, counts, new_nodes, found)
        ends = ws.offsets[seg_start]
        segments = [(int(k), int(ends[s]), int(ends[s + 1])) for s, k in enumerate(seg_et)]
        return edge_index, edge_ids, segments

    def _acquire_workspace(self, layout: KernelLayout) -> neighbor.HostScratch:
        with self._lock:
            if self._workspaces:
                return self._workspaces.pop()
        return neighbor.HostScratch(int(layout.type_offset[-1]), len(layout.node_types))

    def _release_workspace(self, ws: neighbor.HostScratch) -> None:
        with self._lock:
            self._workspaces.append(ws)


def _count_untimed(indptr, indices, weights, cols, seg_start, seg_et, fan, seed_time, item_batch, replace, weighted,
                   ws: neighbor.HostScratch) -> int:
    """A hop's edge count over every in-edge of its work items (:func:`~sparsetrain.sampling.neighbor.count_hop`)."""
    return neighbor.count_hop(indptr, weights, cols, seg_start, fan[seg_et], replace, weighted, len(indices), ws.lo,
                              ws.deg, ws.offsets)
