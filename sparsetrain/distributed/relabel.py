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
def place_rows(rows, counts, out_at, src, src_owner, edge_ids):
    """Node ``i``'s ``counts[i]`` rows (source global id, source owner, edge id), the next ones of ``rows``, go to the
    hop's edge arrays from ``out_at[i]`` on."""
    r = 0
    for i in range(counts.shape[0]):
        for j in range(counts[i]):
            src[out_at[i] + j] = rows[r, 0]
            src_owner[out_at[i] + j] = rows[r, 1]
            edge_ids[out_at[i] + j] = rows[r, 2]
            r += 1


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

    def relabel(self, src: np.ndarray, src_owner: np.ndarray) -> None:
        """Replace the global ids ``src`` (owned by ``src_owner``) by their local ids, in place; unseen ones become
        new nodes, numbered in order of first appearance."""
        e = 0
        while True:
            e, self.count = _relabel(self.table, self.slots, self.nodes, self.owner, self.count, self.capacity, src,
                                     src_owner, e)
            if e == len(src):
                return
            self._grow(2 * self.capacity)


def _grown(array: np.ndarray, size: int, keep: int) -> np.ndarray:
    out = np.empty(size, np.int64)
    out[:keep] = array[:keep]
    return out
