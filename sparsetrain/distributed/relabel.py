"""Dedupe and relabel of a batch's nodes on the requesting rank: global id -> local id in an open-addressing table
sized to the batch (never to the graph) and reused from batch to batch, new nodes numbered by first appearance in
the dst-major edge list, as the single-process sampler numbers them."""

from __future__ import annotations

import numba
import numpy as np

from sparsetrain.sampling.neighbor import PREFETCH
from sparsetrain.sampling.prefetch import prefetch
from sparsetrain.sampling.rng import mix64

_EMPTY = -1


@numba.njit(cache=True, inline="always")
def _home(mask, g):
    """Where global id ``g``'s probe starts: slot ``h`` is ``table[2h]`` (the id) and ``table[2h + 1]`` (its local id),
    one cache line for both."""
    return np.int64(mix64(np.uint64(g)) & np.uint64(mask))


@numba.njit(cache=True, inline="always")
def _slot(table, mask, g):
    """The slot holding global id ``g``, or the empty slot where it goes (linear probing)."""
    h = _home(mask, g)
    while table[2 * h] != _EMPTY and table[2 * h] != g:
        h = (h + 1) & mask
    return h


@numba.njit(cache=True, nogil=True)
def _insert(table, slots, nodes, count):
    """Put ``nodes[:count]`` (distinct) in an empty table with local ids ``0..count-1``."""
    mask = table.shape[0] // 2 - 1
    for i in range(count):
        h = _slot(table, mask, nodes[i])
        table[2 * h] = nodes[i]
        table[2 * h + 1] = i
        slots[i] = h


@numba.njit(cache=True, nogil=True)
def _forget(table, slots, count):
    for i in range(count):
        if i + PREFETCH < count:
            prefetch(table, 2 * slots[i + PREFETCH])
        table[2 * slots[i]] = _EMPTY


@numba.njit(cache=True, nogil=True)
def _gather_hop(frontier_owner, rank, own_counts, own_rows, remote_counts, remote_rows, count_at, row_at, first, src,
                src_owner, dst, edge_ids):
    """The hop's edges in frontier order: frontier node ``i`` (owner ``p``) takes the next count of its owner's list
    and that many rows from its owner's part of the pool (this rank's own draws, or the answers, grouped by owner);
    ``count_at[p]`` / ``row_at[p]`` are where those start, advanced as they are consumed. Edge ``e`` gets the global
    id and owner of its source, ``dst = first + i`` and its edge id."""
    e = 0
    for i in range(frontier_owner.shape[0]):
        p = frontier_owner[i]
        rows = own_rows if p == rank else remote_rows
        k = own_counts[count_at[p]] if p == rank else remote_counts[count_at[p]]
        r = row_at[p]
        for j in range(r, r + k):
            src[e] = rows[j, 0]
            src_owner[e] = rows[j, 1]
            dst[e] = first + i
            edge_ids[e] = rows[j, 2]
            e += 1
        count_at[p] += 1
        row_at[p] += k


@numba.njit(cache=True, nogil=True)
def _relabel(table, slots, nodes, owner, count, limit, src, src_owner, e):
    """Replace ``src[e:]`` (global ids) by local ids, appending unseen ones (and their ``src_owner``) to
    ``nodes``/``owner``; stops before a new node that would make more than ``limit``. Returns (next edge, count)."""
    mask = table.shape[0] // 2 - 1
    total = src.shape[0]
    while e < total:
        if e + PREFETCH < total:
            prefetch(table, 2 * _home(mask, src[e + PREFETCH]))
        g = src[e]
        h = _slot(table, mask, g)
        if table[2 * h] == _EMPTY:
            if count == limit:
                break
            table[2 * h] = g
            table[2 * h + 1] = count
            slots[count] = h
            nodes[count] = g
            owner[count] = src_owner[e]
            count += 1
        src[e] = table[2 * h + 1]
        e += 1
    return e, count


class NodeMap:
    """A batch's nodes (global ids, in local id order), their owners, and the table that finds a node's local id;
    one per sampler, cleared and refilled by :meth:`start` for every batch, grown (doubled) when a batch has more nodes
    than it holds."""

    def __init__(self, capacity: int = 1 << 12) -> None:
        self.count = 0
        self.nodes = self.owner = np.empty(0, np.int64)
        self._grow(capacity)

    def _grow(self, needed: int) -> None:
        """Room for ``needed`` nodes (rounded up to a power of two), in a table at most half full; the current nodes
        are kept."""
        self.capacity = 1 << max(needed - 1, 1).bit_length()
        self.nodes = _grown(self.nodes, self.capacity, self.count)
        self.owner = _grown(self.owner, self.capacity, self.count)
        self.slots = np.empty(self.capacity, np.int64)
        self.table = np.full(4 * self.capacity, _EMPTY, np.int64)
        _insert(self.table, self.slots, self.nodes, self.count)

    def start(self, seeds: np.ndarray, owner: int) -> None:
        """Forget the last batch; the batch's nodes are now ``seeds`` (distinct), owned by ``owner``."""
        _forget(self.table, self.slots, self.count)
        self.count = 0
        if len(seeds) > self.capacity:
            self._grow(len(seeds))
        self.nodes[: len(seeds)] = seeds
        self.owner[: len(seeds)] = owner
        _insert(self.table, self.slots, self.nodes, len(seeds))
        self.count = len(seeds)

    def add_hop(self, first: int, rank: int, own: tuple, remote: tuple, remote_sizes: tuple) -> tuple:
        """The edges of one hop whose frontier is nodes ``first..count-1``: ``own`` = (counts, rows) of the frontier
        nodes this rank owns, in frontier order; ``remote`` = (counts, rows) of the others, grouped by owner (in
        frontier order within an owner); ``remote_sizes`` = (nodes, rows) of each owner in ``remote`` (0 for this
        rank). Returns ``(edge_index [2, E] of (local source, local dst), edge_ids)``; unseen sources are appended to
        the batch's nodes."""
        (own_counts, own_rows), (remote_counts, remote_rows) = own, remote
        count_at, row_at = (np.cumsum(sizes, dtype=np.int64) - sizes for sizes in remote_sizes)
        count_at[rank] = row_at[rank] = 0  # this rank's nodes and rows: in its own lists, from the start
        total = len(own_rows) + len(remote_rows)
        edge_index, edge_ids, src_owner = np.empty((2, total), np.int64), np.empty(total, np.int64), np.empty(total,
                                                                                                            np.int64)
        _gather_hop(self.owner[first : self.count], rank, own_counts, own_rows, remote_counts, remote_rows, count_at,
                    row_at, first, edge_index[0], src_owner, edge_index[1], edge_ids)
        e = 0
        while True:
            e, self.count = _relabel(self.table, self.slots, self.nodes, self.owner, self.count, self.capacity,
                                     edge_index[0], src_owner, e)
            if e == total:
                return edge_index, edge_ids
            self._grow(2 * self.capacity)


def _grown(array: np.ndarray, size: int, keep: int) -> np.ndarray:
    out = np.empty(size, np.int64)
    out[:keep] = array[:keep]
    return out
