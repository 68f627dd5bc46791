"""The owner's side of a hop: draw the in-neighbours of some of its nodes exactly as the single-process sampler
would, from the same counter-based stream (:mod:`sparsetrain.sampling.rng`) keyed by (sampler seed, batch key, hop,
global node id) and the same per-node draws (:mod:`sparsetrain.sampling.draw`) over the node's in-edges, which a part
keeps in the global CSC's order. Nothing depends on where the node sits in a frontier or on which rank asked."""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from sparsetrain.distributed.errors import DistSamplingError, PartDamagedError
from sparsetrain.sampling.draw import count_node, draw_positions
from sparsetrain.sampling.neighbor import PREFETCH
from sparsetrain.sampling.prefetch import prefetch
from sparsetrain.sampling.rng import hop_key, node_stream

SEED_MASK = (1 << 63) - 1  # the single-process sampler's seed mask


@numba.njit(cache=True, nogil=True)
def _locate(owned, bucket_start, shift, ids, out):
    """``out[i]``: the local id of global ``ids[i]`` (its index in the sorted ``owned``), found by a binary search
    within its bucket (ids ``[b << shift, (b + 1) << shift)``); the index of the first id not owned, or -1."""
    last_bucket = bucket_start.shape[0] - 2
    for i in range(ids.shape[0]):
        g = ids[i]
        b = g >> shift
        if g < 0 or b > last_bucket:
            return i
        lo = bucket_start[b]
        hi = bucket_start[b + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if owned[mid] < g:
                lo = mid + 1
            else:
                hi = mid
        if lo == bucket_start[b + 1] or owned[lo] != g:
            return i
        out[i] = lo
    return -1


@numba.njit(cache=True, nogil=True)
def _count(indptr, col_start, weights, cols, fanout, replace, weighted, num_edges, lo, deg, edge_base, offsets):
    """``offsets``: where each item's draws go; ``edge_base``: what turns a position in the part's edge list into a
    global edge id. Returns the draw count, or ``-1 - i`` for a damaged column ``i``."""
    offsets[0] = 0
    for i in range(cols.shape[0]):
        if i + PREFETCH < cols.shape[0]:
            prefetch(indptr, cols[i + PREFETCH])
            prefetch(col_start, cols[i + PREFETCH])
        k = count_node(indptr, weights, cols, i, fanout, replace, weighted, num_edges, lo, deg)
        if k < 0:
            return -1 - i
        edge_base[i] = col_start[cols[i]] - lo[i]
        offsets[i + 1] = offsets[i] + k
    return offsets[cols.shape[0]]


@numba.njit(cache=True, nogil=True)
def _draw(indices, weights, l2g, halo_owner, rank, nodes, seg_end, seg_key, fanout, replace, weighted, lo, deg,
          edge_base, offsets, pos, out_at, src, src_owner, edge_ids):
    """Item ``i`` (global node ``nodes[i]``, hop key ``seg_key[s]`` of the segment ``s`` holding it): its draws'
    source global ids, source owners and global edge ids, written from ``out_at[i]`` on. Three passes, as the
    single-process kernel makes them, so that the random reads of the last two can be prefetched: draw the positions,
    read the sources there, map them to global ids and owners."""
    i = 0
    for s in range(seg_end.shape[0]):
        key = seg_key[s]
        while i < seg_end[s]:
            start = offsets[i]
            k = offsets[i + 1] - start
            if k > 0:
                draw_positions(weights, lo[i], deg[i], k, fanout, replace, weighted, node_stream(key, nodes[i]), pos,
                               start)
                for j in range(start, start + k):
                    pos[j] += lo[i]
                    edge_ids[out_at[i] + j - start] = edge_base[i] + pos[j]
            i += 1
    total = pos.shape[0]
    for e in range(total):
        if e + PREFETCH < total:
            prefetch(indices, pos[e + PREFETCH])
        pos[e] = indices[pos[e]]
    num_owned = l2g.shape[0] - halo_owner.shape[0]
    for i in range(nodes.shape[0]):
        for j in range(offsets[i], offsets[i + 1]):
            if j + PREFETCH < total:
                prefetch(l2g, pos[j + PREFETCH])
            source = pos[j]
            o = out_at[i] + j - offsets[i]
            src[o] = l2g[source]
            src_owner[o] = rank if source < num_owned else halo_owner[source - num_owned]


def hop_keys(seed: int, batch_keys, hop: int) -> np.ndarray:
    """The single-process sampler's hop key of each batch key (homogeneous graph: counter ``hop``)."""
    seed &= SEED_MASK
    return np.array([hop_key(seed, int(k), hop) for k in batch_keys], np.uint64)


def bucket_index(owned: np.ndarray) -> tuple[np.ndarray, int]:
    """Where each bucket of ``2**shift`` consecutive global ids starts in the sorted ``owned``, with ``shift`` the
    smallest that leaves no more buckets than owned nodes: a lookup table as long as the part, not the graph."""
    top = int(owned[-1]) if len(owned) else 0
    shift = 0
    while top >> shift >= max(len(owned), 1):
        shift += 1
    bounds = np.arange((top >> shift) + 2, dtype=np.int64) << shift
    return np.searchsorted(owned, bounds).astype(np.int64), shift


class Plan(NamedTuple):
    """Where the draws of some owned nodes come from: their local columns, in-edge ranges and global edge offsets, and
    where each node's draws go (``offsets``, the node's count being the difference)."""

    nodes: np.ndarray
    lo: np.ndarray
    deg: np.ndarray
    edge_base: np.ndarray
    offsets: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)


class Expander:
    """Draws for nodes a part owns, each node's draws in the single-process order: :meth:`plan` counts them,
    :meth:`draw` writes (source global id, source owner, global edge id) where they go, :meth:`rows` as rows
    ``[E, 3]`` in the order of the nodes."""

    def __init__(self, part, *, replace: bool, weighted: bool) -> None:
        graph = part.dataset.graph
        self.indptr, self.indices, weights = graph.numpy()
        self.weights = weights if weighted and weights is not None else np.empty(0, np.float32)
        self.replace, self.weighted = bool(replace), bool(weighted)
        self.l2g = part.local_to_global.numpy()
        self.col_start = part.col_start.numpy()
        self.rank = part.rank
        self.halo_owner = part.halo_owner.numpy()
        self.owned = np.ascontiguousarray(self.l2g[: part.num_owned])
        self.bucket_start, self.shift = bucket_index(self.owned)

    def first_foreign(self, nodes: np.ndarray) -> int:
        """The index of the first of ``nodes`` (global ids) this part does not own, or -1."""
        return _locate(self.owned, self.bucket_start, self.shift, nodes, np.empty(len(nodes), np.int64))

    def plan(self, nodes: np.ndarray, fanout: int) -> Plan:
        """How many draws each of ``nodes`` (global ids, owned here) gets, and from where."""
        n = len(nodes)
        cols = np.empty(n, np.int64)
        bad = _locate(self.owned, self.bucket_start, self.shift, nodes, cols)
        if bad >= 0:
            raise DistSamplingError(f"partition part {self.rank}: asked for node {nodes[bad]}, which it does not own; "
                                    "every rank must load the part of its own rank from one partitioned folder")
        lo, deg, edge_base, offsets = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(
            n + 1, np.int64)
        total = _count(self.indptr, self.col_start, self.weights, cols, fanout, self.replace, self.weighted,
                       len(self.indices), lo, deg, edge_base, offsets)
        if total < 0:
            raise PartDamagedError(f"partition part {self.rank}: the in-edges of node {nodes[-1 - total]} lie outside "
                                   "its edge list; the part is damaged, re-run `sparsetrain partition`")
        return Plan(nodes, lo, deg, edge_base, offsets)

    def draw(self, plan: Plan, seg_lengths, seg_keys: np.ndarray, fanout: int, out_at: np.ndarray, src: np.ndarray,
             src_owner: np.ndarray, edge_ids: np.ndarray) -> None:
        """The plan's draws, node ``i``'s from ``out_at[i]`` on; the nodes come in consecutive segments of
        ``seg_lengths``, segment ``s`` drawn with hop key ``seg_keys[s]``."""
        _draw(self.indices, self.weights, self.l2g, self.halo_owner, self.rank, plan.nodes, np.cumsum(seg_lengths),
              seg_keys, fanout, self.replace, self.weighted, plan.lo, plan.deg, plan.edge_base, plan.offsets,
              np.empty(plan.offsets[-1], np.int64), out_at, src, src_owner, edge_ids)

    def rows(self, plan: Plan, seg_lengths, seg_keys: np.ndarray, fanout: int) -> np.ndarray:
        """The plan's draws as rows (source global id, source owner, global edge id), node after node."""
        rows = np.empty((plan.offsets[-1], 3), np.int64)
        self.draw(plan, seg_lengths, seg_keys, fanout, plan.offsets[:-1], rows[:, 0], rows[:, 1], rows[:, 2])
        return rows
