"""The owner's side of a hop: draw the in-neighbours of some of its nodes exactly as the single-process sampler
would, from the same counter-based stream (:mod:`sparsetrain.sampling.rng`) keyed by (sampler seed, batch key, hop,
global node id) and the same per-node draws (:mod:`sparsetrain.sampling.draw`) over the node's in-edges, which a part
keeps in the global CSC's order. Nothing depends on where the node sits in a frontier or on which rank asked."""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from sparsetrain.errors import DamagedFileError, InputError
from sparsetrain.sampling.draw import count_node, draw_positions
from sparsetrain.sampling.neighbor import PREFETCH
from sparsetrain.sampling.prefetch import prefetch
from sparsetrain.sampling.rng import hop_key, node_stream

SEED_MASK = (1 << 63) - 1  # the single-process sampler's seed mask


@numba.njit(cache=True, inline="always")
def find(ids, bucket_start, shift, g):
    """The index of global id ``g`` in the sorted ``ids``, or -1: a binary search within its bucket (the ids in
    ``[b << shift, (b + 1) << shift)``)."""
    b = g >> shift
    if g < 0 or b > bucket_start.shape[0] - 2:
        return -1
    lo = bucket_start[b]
    end = hi = bucket_start[b + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if ids[mid] < g:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < end and ids[lo] == g else -1


@numba.njit(cache=True, nogil=True)
def _locate(ids, bucket_start, shift, nodes, out):
    """``out[i]``: the index of ``nodes[i]`` in the sorted ``ids``; the index of the first node not there, or -1."""
    for i in range(nodes.shape[0]):
        j = find(ids, bucket_start, shift, nodes[i])
        if j < 0:
            return i
        out[i] = j
    return -1


@numba.njit(cache=True, nogil=True)
def _count(indptr, col_start, weights, cols, seg_end, seg_fanout, replace, weighted, num_edges, lo, deg, edge_base,
           offsets):
    """``offsets``: where each item's draws go (items in consecutive segments ending at ``seg_end``, segment ``s``
    drawing ``seg_fanout[s]`` each); ``edge_base``: what turns a position in the part's edge list into a global edge
    id. Returns the draw count, or ``-1 - i`` for a damaged column ``i``."""
    offsets[0] = 0
    s = 0
    for i in range(cols.shape[0]):
        while i >= seg_end[s]:
            s += 1
        if i + PREFETCH < cols.shape[0]:
            prefetch(indptr, cols[i + PREFETCH])
            prefetch(col_start, cols[i + PREFETCH])
        k = count_node(indptr, weights, cols, i, seg_fanout[s], replace, weighted, num_edges, lo, deg)
        if k < 0:
            return -1 - i
        edge_base[i] = col_start[cols[i]] - lo[i]
        offsets[i + 1] = offsets[i] + k
    return offsets[cols.shape[0]]


@numba.njit(cache=True, nogil=True)
def _draw(indices, weights, l2g, halo_owner, rank, nodes, seg_end, seg_key, seg_fanout, seg_et, et_stream_base,
          et_owned, et_owned_shift, et_halo_shift, replace, weighted, lo, deg, edge_base, offsets, pos, out_at,
          local_sources, src, src_owner, edge_ids):
    """Item ``i`` (global node ``nodes[i]``, in segment ``s``: edge type ``seg_et[s]``, hop key ``seg_key[s]``, fanout
    ``seg_fanout[s]``): its draws' sources (global ids and owners, or ``local_sources``: the part's local ids) and
    global edge ids, written from ``out_at[i]`` on. The stream of a node is keyed by its id within its type
    (``nodes[i] - et_stream_base[k]``); a source read from the part's CSC (an id within the edge type's source type)
    becomes a flat local id by ``et_owned_shift[k]`` (owned: below ``et_owned[k]``) or ``et_halo_shift[k]`` (halo).
    Three passes, as the single-process kernel makes them, so that the random reads of the last two can be
    prefetched: draw the positions, read the sources there, map them to global ids and owners."""
    i = 0
    for s in range(seg_end.shape[0]):
        key = seg_key[s]
        k_et = seg_et[s]
        while i < seg_end[s]:
            start = offsets[i]
            k = offsets[i + 1] - start
            if k > 0:
                draw_positions(weights, lo[i], deg[i], k, seg_fanout[s], replace, weighted,
                               node_stream(key, nodes[i] - et_stream_base[k_et]), pos, start)
                for j in range(start, start + k):
                    pos[j] += lo[i]
                    edge_ids[out_at[i] + j - start] = edge_base[i] + pos[j]
            i += 1
    total = pos.shape[0]
    for e in range(total):
        if e + PREFETCH < total:
            prefetch(indices, pos[e + PREFETCH])
        pos[e] = indices[pos[e]]
    i = 0
    for s in range(seg_end.shape[0]):
        k_et = seg_et[s]
        n_owned, owned_shift, halo_shift = et_owned[k_et], et_owned_shift[k_et], et_halo_shift[k_et]
        if owned_shift != 0 or halo_shift != 0:
            for j in range(offsets[i], offsets[seg_end[s]]):
                u = pos[j]
                pos[j] = u + owned_shift if u < n_owned else u + halo_shift
        i = seg_end[s]
    if local_sources:
        for i in range(nodes.shape[0]):
            for j in range(offsets[i], offsets[i + 1]):
                src[out_at[i] + j - offsets[i]] = pos[j]
        return
    num_owned = l2g.shape[0] - halo_owner.shape[0]
    for i in range(nodes.shape[0]):
        for j in range(offsets[i], offsets[i + 1]):
            if j + PREFETCH < total:
                prefetch(l2g, pos[j + PREFETCH])
            source = pos[j]
            o = out_at[i] + j - offsets[i]
            src[o] = l2g[source]
            src_owner[o] = rank if source < num_owned else halo_owner[source - num_owned]


def hop_keys(seed: int, batch_keys, hop: int, edge_types, stride: int) -> np.ndarray:
    """The single-process sampler's hop key of each (batch key, edge type index) pair: counter
    ``hop * stride + edge type`` (:func:`~sparsetrain.sampling.layout.key_stride`: ``hop`` on a homogeneous graph)."""
    seed &= SEED_MASK
    return np.array([hop_key(seed, int(b), hop * stride + int(k)) for b, k in zip(batch_keys, edge_types)],
                    np.uint64)


def grown(scratch: np.ndarray, size: int, keep: int = 0) -> np.ndarray:
    """``scratch``, or a larger one (by half again at least) when it holds fewer than ``size`` items, its first
    ``keep`` items copied over."""
    if len(scratch) >= size:
        return scratch
    out = np.empty(max(size, len(scratch) * 3 // 2), scratch.dtype)
    out[:keep] = scratch[:keep]
    return out


def bucket_index(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Where each bucket of ``2**shift`` consecutive global ids starts in the sorted ``ids``, with ``shift`` the
    smallest that leaves no more buckets than ids: a lookup table as long as the part, not the graph."""
    top = int(ids[-1]) if len(ids) else 0
    shift = 0
    while top >> shift >= max(len(ids), 1):
        shift += 1
    bounds = np.arange((top >> shift) + 2, dtype=np.int64) << shift
    return np.searchsorted(ids, bounds).astype(np.int64), shift


class SortedIds(NamedTuple):
    """Sorted global ids and their bucket index (:func:`find` searches them)."""

    ids: np.ndarray
    bucket_start: np.ndarray
    shift: int

    @classmethod
    def of(cls, ids: np.ndarray) -> SortedIds:
        ids = np.ascontiguousarray(ids, np.int64)
        return cls(ids, *bucket_index(ids))


class PartIds(NamedTuple):
    """A part's id maps: local id -> global id and owner, and the owned and halo nodes' global ids (sorted), which
    give a global id's local id: owned ``j`` is local ``j``, halo ``j`` is local ``num_owned + j``."""

    local_to_global: np.ndarray
    halo_owner: np.ndarray
    rank: int
    owned: SortedIds
    halo: SortedIds

    @classmethod
    def of(cls, local_to_global: np.ndarray, num_owned: int, halo_owner: np.ndarray, rank: int) -> PartIds:
        return cls(local_to_global, halo_owner, rank, SortedIds.of(local_to_global[:num_owned]),
                   SortedIds.of(local_to_global[num_owned:]))


class Plan(NamedTuple):
    """Where the draws of some owned nodes come from: their in-edge ranges and global edge offsets, and where each
    node's draws go (``offsets``, the node's count being the difference); the nodes come in segments (ending at
    ``seg_end``), one edge type (``seg_et``) and fanout (``seg_fanout``) each."""

    nodes: np.ndarray
    lo: np.ndarray
    deg: np.ndarray
    edge_base: np.ndarray
    offsets: np.ndarray
    seg_end: np.ndarray
    seg_et: np.ndarray
    seg_fanout: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)


class Expander:
    """Draws for nodes a part owns, each node's draws in the single-process order: :meth:`plan` counts them,
    :meth:`draw` writes (source global id, source owner, global edge id) where they go, :meth:`rows` as rows
    ``[E, 3]`` in the order of the nodes. Global ids are flat (node type after node type, :class:`PartTypes`); a
    homogeneous part is the one-type case."""

    def __init__(self, part, *, replace: bool, weighted: bool) -> None:
        graph = part.dataset.graph
        self.indptr, self.indices, weights = graph.numpy()
        self.weights = weights if weighted and weights is not None else np.empty(0, np.float32)
        self.replace, self.weighted = bool(replace), bool(weighted)
        self.ids = PartIds.of(part.local_to_global.numpy(), part.num_owned, part.halo_owner.numpy(), part.rank)
        self.col_start = part.col_start.numpy()
        self.rank = part.rank
        types = part.types
        s, d = types.et_src, types.et_dst
        self.et_stream_base = types.type_offset[d].astype(np.int64)
        self.et_owned = types.num_owned[s].astype(np.int64)
        self.et_owned_shift = types.owned_start[s].astype(np.int64)
        self.et_halo_shift = (part.num_owned + types.halo_start[s] - types.num_owned[s]).astype(np.int64)
        self.et_col_shift = (types.col_offset[:-1] - types.owned_start[d]).astype(np.int64)  # flat local -> column
        self._pos = np.empty(0, np.int64)  # scratch kept from call to call: fresh pages cost a fault each

    def local_ids(self, nodes: np.ndarray) -> tuple[np.ndarray, int]:
        """The local ids of ``nodes`` (global ids), and the index of the first one this part does not own, or -1."""
        owned = self.ids.owned
        cols = np.empty(len(nodes), np.int64)
        return cols, _locate(owned.ids, owned.bucket_start, owned.shift, nodes, cols)

    def plan(self, nodes: np.ndarray, seg_lengths, seg_et, fanouts: np.ndarray, local: np.ndarray | None = None
             ) -> Plan:
        """How many draws each of ``nodes`` (global ids, owned here; ``local``: their local ids, when known) gets, and
        from where; the nodes come in segments of ``seg_lengths``, segment ``s`` over edge type ``seg_et[s]`` with
        ``fanouts[seg_et[s]]`` draws."""
        n = len(nodes)
        if local is not None and n and local.min() < 0:  # a peer named this part the owner of a node it does not own
            local = None
        if local is None:
            local, bad = self.local_ids(nodes)
            if bad >= 0:
                raise InputError(f"partition part {self.rank}: asked for node {nodes[bad]}, which it does not "
                                 "own; every rank must load the part of its own rank from one partitioned "
                                 "folder")
        seg_et = np.asarray(seg_et, np.int64)
        seg_end = np.cumsum(np.asarray(seg_lengths, np.int64))
        shift = self.et_col_shift[seg_et]
        cols = local if not shift.any() else local + np.repeat(shift, np.asarray(seg_lengths, np.int64))
        lo, deg, edge_base, offsets = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(
            n + 1, np.int64)
        seg_fanout = np.asarray(fanouts, np.int64)[seg_et]
        total = _count(self.indptr, self.col_start, self.weights, cols, seg_end, seg_fanout, self.replace,
                       self.weighted, len(self.indices), lo, deg, edge_base, offsets)
        if total < 0:
            raise DamagedFileError(f"partition part {self.rank}: the in-edges of node {nodes[-1 - total]} lie outside "
                                   "its edge list; the part is damaged, re-run `sparsetrain partition`")
        return Plan(nodes, lo, deg, edge_base, offsets, seg_end, seg_et, seg_fanout)

    def draw(self, plan: Plan, seg_keys: np.ndarray, out_at: np.ndarray, src: np.ndarray, src_owner: np.ndarray,
             edge_ids: np.ndarray, local_sources: bool = False) -> None:
        """The plan's draws, node ``i``'s from ``out_at[i]`` on: sources as global ids and owners (``src``,
        ``src_owner``), or ``local_sources``: as local ids (``src`` only); segment ``s`` drawn with hop key
        ``seg_keys[s]``."""
        ids, total = self.ids, plan.offsets[-1]
        self._pos = grown(self._pos, total)
        _draw(self.indices, self.weights, ids.local_to_global, ids.halo_owner, self.rank, plan.nodes, plan.seg_end,
              seg_keys, plan.seg_fanout, plan.seg_et, self.et_stream_base, self.et_owned, self.et_owned_shift,
              self.et_halo_shift, self.replace, self.weighted, plan.lo, plan.deg, plan.edge_base, plan.offsets,
              self._pos[:total], out_at, local_sources, src, src_owner, edge_ids)

    def rows(self, plan: Plan, seg_keys: np.ndarray) -> np.ndarray:
        """The plan's draws as rows (source global id, source owner, global edge id), node after node."""
        rows = np.empty((plan.offsets[-1], 3), np.int64)
        self.draw(plan, seg_keys, plan.offsets[:-1], rows[:, 0], rows[:, 1], rows[:, 2])
        return rows
