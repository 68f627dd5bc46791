"""One GPU batch's state across its hops: host bounds of the device counts (:class:`Bounds`), the nodes per type
(:class:`Regions`), the open-addressing map (:class:`DeviceNodeMap`), and what every hop's kernels read
(:class:`Batch`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsetrain.sampling.cuda.kernels import clear_kernel, insert_known
from sparsetrain.sampling.cuda.workspace import DeviceWorkspace


def table_capacity(n: int) -> int:
    """DeviceNodeMap size for ``n`` keys: a power of two, at most half full."""
    return 1 << max(6, int(2 * max(n, 1) - 1).bit_length())


class Bounds:
    """Host upper bounds of what the device counts: nodes per type, and per hop the work items and edges of each
    segment (an edge type sampled at the hop). The arrays are sized by these, so no count has to come back before
    the batch is done; a batch whose bounds grow past :data:`~sparsetrain.sampling.cuda.driver.EXACT_ABOVE`
    edges reads its counts every hop instead.

    No type counts more nodes than it has; without replacement (``et_edges``: each edge type's edge count) no hop
    draws more edges of a type than it has, since its work items are distinct columns each drawing a subset of their
    own in-edges (a damaged ``indptr`` can break that: the sample kernel then draws nothing past the arrays)."""

    def __init__(self, layout, num_seeds: int, seed_type: int, new_only: bool, max_degree, et_edges=None) -> None:
        self.layout, self.new_only, self.max_degree, self.et_edges = layout, new_only, max_degree, et_edges
        self.counts = np.zeros(len(layout.type_size), np.int64)
        self.counts[seed_type] = num_seeds
        self.new = self.counts.copy()  # nodes first reached at the hop before (the seeds, for hop 0)

    def hop(self, hop: int) -> tuple[list[int], list[int], list[int]]:
        """Hop ``hop``'s segments: edge types, work bound and edge bound of each."""
        layout = self.layout
        fan = layout.fanouts[hop]
        pool = self.new if self.new_only else self.counts
        seg_et = [k for k in range(len(fan)) if fan[k] != 0 and pool[layout.et_dst[k]] > 0]
        work = [int(pool[layout.et_dst[k]]) for k in seg_et]
        per_node = [int(fan[k]) if fan[k] > 0 else int(self.max_degree[k]) for k in seg_et]
        edges = [w * f for w, f in zip(work, per_node)]
        if self.et_edges is not None:
            edges = [min(e, int(self.et_edges[k])) for e, k in zip(edges, seg_et)]
        return seg_et, work, edges

    def advance(self, seg_et: list[int], edges: list[int]) -> None:
        """After a hop: each type gains at most its sampled sources (and no more than its nodes)."""
        new = np.zeros_like(self.counts)
        for k, e in zip(seg_et, edges):
            new[self.layout.et_src[k]] += e
        self.new = np.minimum(new, self.layout.type_size)
        self.counts = np.minimum(self.counts + self.new, self.layout.type_size)

    def exact(self, counts: np.ndarray, first: np.ndarray) -> None:
        """Replace the bounds by the device's counts (exact mode)."""
        self.counts, self.new = counts.copy(), counts - first


class Regions:
    """The batch's nodes: one buffer, a region per node type (``start``, ``caps`` on the host, ``offsets`` on the
    device); type ``n``'s local id ``i`` is at ``buffer[start[n] + i]``."""

    def __init__(self, ops, caps: np.ndarray, offsets=None, buffer=None) -> None:
        """``buffer``: the caller's array for the nodes (at least ``caps.sum()`` long), else one of the workspace's."""
        self.ops = ops
        self._allocate(np.asarray(caps, np.int64), offsets, buffer)

    @staticmethod
    def starts(caps: np.ndarray) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(caps)[:-1]]).astype(np.int64)

    def _allocate(self, caps: np.ndarray, offsets=None, buffer=None) -> None:
        """``offsets``: :meth:`starts` of ``caps`` already on the device (else uploaded)."""
        self.caps = caps
        self.start = self.starts(caps)
        self.offsets = self.ops.upload(self.start) if offsets is None else offsets
        self.buffer = self.ops.empty(max(int(caps.sum()), 1)) if buffer is None else buffer

    def reserve(self, caps: np.ndarray) -> None:
        """Room for ``caps`` nodes per type, keeping every node so far."""
        if (caps <= self.caps).all():
            return
        old, old_start, old_caps = self.buffer, self.start, self.caps
        self._allocate(np.maximum(caps, old_caps))
        for n, (a, c) in enumerate(zip(old_start, old_caps)):
            if c:
                self.ops.assign(self.buffer[self.start[n]: self.start[n] + c], old[a: a + c])

    def of(self, n: int, count: int):
        return self.buffer[self.start[n]: self.start[n] + count]


class DeviceNodeMap:
    """The open-addressing map (global key -> local id) of the batch."""

    def __init__(self, ops) -> None:
        self.ops = ops
        self.capacity, self.keys, self.vals, self.mask = 0, None, None, 0

    def reserve(self, num_keys: int, nodes: Regions, counts, type_offset, type_size, status) -> None:
        """Room for ``num_keys`` keys: a fresh table holding every node so far when the current one is too small (two
        launches, the seed checks riding along: :func:`~sparsetrain.sampling.cuda.kernels.insert_known`)."""
        needed = table_capacity(num_keys)
        if needed <= self.capacity:
            return
        ops, k = self.ops, self.ops.kernel
        self.capacity, self.mask = needed, needed - 1
        self.keys, self.vals = ops.empty(needed), ops.empty(needed)
        ops.launch(clear_kernel, needed, k(self.keys), k(self.vals))
        ops.launch(insert_known, len(nodes.buffer), k(nodes.buffer), k(nodes.offsets), k(counts), type_offset,
                   type_size, k(self.keys), k(self.vals), self.mask, k(status))


@dataclass
class Batch:
    """What every hop of one batch reads: the workspace, the layout, the graph's kernel views and the layout's
    (``col_offset`` ... ``type_size``), and the batch's nodes, table and status."""

    ops: DeviceWorkspace
    layout: object
    exact: bool
    indptr: object
    indices: object
    weights: object
    edge_perm: object
    permuted: bool
    replace: bool
    weighted: bool
    col_offset: object
    edge_offset: object
    et_src: object
    et_dst: object
    type_offset: object
    type_size: object
    nodes: Regions
    table: DeviceNodeMap
    status: object

    @property
    def several_types(self) -> bool:
        """More than one node type: sources carry their type (``src_type``) to the numbering kernels."""
        return len(self.layout.type_size) > 1

    @property
    def graph_edges(self) -> int:
        return self.indices.shape[0]
