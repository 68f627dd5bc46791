"""Dedupe and relabel of a batch's nodes on the requesting rank, new nodes numbered by first appearance in the
dst-major edge list, as the single-process sampler numbers them. A source the part knows (owned or halo: a *near*
node) is found by its local id in a direct table as long as the part, as the single-process sampler finds every node
in one as long as the graph; any other (*far*, reached through a peer's answer) by its global id in an
open-addressing table sized to the batch. Both are reused from batch to batch, cleared by the entries the last batch
used. In a hop's source list, a near source is its local id (>= 0), a far one ``-1 - global id``."""

from __future__ import annotations

import numba
import numpy as np

from sparsetrain.partitioned.expand import PartIds, find
from sparsetrain.sampling.neighbor import PREFETCH
from sparsetrain.sampling.prefetch import prefetch
from sparsetrain.sampling.rng import mix64

_EMPTY = -1


@numba.njit(cache=True, inline="always")
def _home(mask, g):
    """Where global id ``g``'s probe starts: slot ``h`` is ``table[2h]`` (the id) and ``table[2h + 1]`` (its batch id),
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
def _refill(table, slots, nodes, local, count):
    """Put the far ones of ``nodes[:count]`` in an empty far table."""
    mask = table.shape[0] // 2 - 1
    for i in range(count):
        if local[i] < 0:
            h = _slot(table, mask, nodes[i])
            table[2 * h] = nodes[i]
            table[2 * h + 1] = i
            slots[i] = h


@numba.njit(cache=True, nogil=True)
def _forget(near, table, slots, local, count):
    for i in range(count):
        if local[i] >= 0:
            near[local[i]] = _EMPTY
        else:
            table[2 * slots[i]] = _EMPTY


@numba.njit(cache=True, nogil=True)
def to_sources(rows, counts, out_at, rank, num_owned, owned_ids, owned_bucket, owned_shift, halo_ids, halo_bucket,
               halo_shift, src, src_owner, edge_ids):
    """Node ``i``'s ``counts[i]`` rows (source global id, source owner, edge id), the next ones of ``rows``, go to the
    hop's source list from ``out_at[i]`` on: a source owned here or in the halo by its local id, any other as
    ``-1 - global id`` with its owner."""
    r = 0
    for i in range(counts.shape[0]):
        for o in range(out_at[i], out_at[i] + counts[i]):
            g = rows[r, 0]
            if rows[r, 1] == rank:
                local = find(owned_ids, owned_bucket, owned_shift, g)
            else:
                local = find(halo_ids, halo_bucket, halo_shift, g)
                if local >= 0:
                    local += num_owned
            src[o] = local if local >= 0 else -1 - g
            src_owner[o] = rows[r, 1]
            edge_ids[o] = rows[r, 2]
            r += 1


@numba.njit(cache=True, nogil=True)
def _relabel(near, table, slots, nodes, owner, local, count, limit, l2g, halo_owner, rank, src, src_owner, e):
    """Replace ``src[e:]`` (near: local ids; far: ``-1 - global id``) by batch ids, appending unseen sources to
    ``nodes``/``owner``/``local``; stops before a new node that would make more than ``limit``. Returns (next edge,
    count)."""
    mask = table.shape[0] // 2 - 1
    num_owned = l2g.shape[0] - halo_owner.shape[0]
    total = src.shape[0]
    while e < total:
        if e + PREFETCH < total:
            ahead = src[e + PREFETCH]
            if ahead >= 0:
                prefetch(near, ahead)
                prefetch(l2g, ahead)  # read if it is new
            else:
                prefetch(table, 2 * _home(mask, -1 - ahead))
        x = src[e]
        if x >= 0:
            b = near[x]
            if b < 0:
                if count == limit:
                    break
                b = count
                near[x] = b
                local[count] = x
                nodes[count] = l2g[x]
                owner[count] = rank if x < num_owned else halo_owner[x - num_owned]
                count += 1
        else:
            g = -1 - x
            h = _slot(table, mask, g)
            if table[2 * h] == _EMPTY:
                if count == limit:
                    break
                table[2 * h] = g
                table[2 * h + 1] = count
                slots[count] = h
                local[count] = -1
                nodes[count] = g
                owner[count] = src_owner[e]
                count += 1
            b = table[2 * h + 1]
        src[e] = b
        e += 1
    return e, count


class NodeMap:
    """A batch's nodes (global ids, in batch id order), their owners and local ids (-1: far), and the tables that
    find a node's batch id; one per sampler, cleared and refilled by :meth:`start` for every batch, the node arrays
    and far table doubled when a batch has more nodes than they hold."""

    def __init__(self, ids: PartIds, capacity: int = 1 << 12) -> None:
        self.ids = ids
        num_local = len(ids.local_to_global)
        self.near = np.full(num_local, _EMPTY, np.int32 if num_local < 2**31 else np.int64)
        self.count = 0
        self.nodes = self.owner = self.local = np.empty(0, np.int64)
        self._grow(capacity)

    def _grow(self, needed: int) -> None:
        """Room for ``needed`` nodes (rounded up to a power of two), in a far table at most half full; the current
        nodes are kept."""
        self.capacity = 1 << max(needed - 1, 1).bit_length()
        self.nodes, self.owner, self.local = (_grown(a, self.capacity, self.count) for a in (self.nodes, self.owner,
                                                                                              self.local))
        self.slots = np.empty(self.capacity, np.int64)
        self.table = np.full(4 * self.capacity, _EMPTY, np.int64)
        _refill(self.table, self.slots, self.nodes, self.local, self.count)

    def start(self, seeds: np.ndarray, local: np.ndarray) -> None:
        """Forget the last batch; the batch's nodes are now ``seeds`` (distinct, owned here, local ids ``local``)."""
        _forget(self.near, self.table, self.slots, self.local, self.count)
        self.count = 0
        if len(seeds) > self.capacity:
            self._grow(len(seeds))
        n = len(seeds)
        self.nodes[:n], self.owner[:n], self.local[:n] = seeds, self.ids.rank, local
        self.near[local] = np.arange(n)
        self.count = n

    def relabel(self, src: np.ndarray, src_owner: np.ndarray) -> None:
        """Replace the sources ``src`` (near: local ids; far: ``-1 - global id``, owned by ``src_owner``) by their
        batch ids, in place; unseen ones become new nodes, numbered in order of first appearance."""
        ids, e = self.ids, 0
        while True:
            e, self.count = _relabel(self.near, self.table, self.slots, self.nodes, self.owner, self.local, self.count,
                                     self.capacity, ids.local_to_global, ids.halo_owner, ids.rank, src, src_owner, e)
            if e == len(src):
                return
            self._grow(2 * self.capacity)


def _grown(array: np.ndarray, size: int, keep: int) -> np.ndarray:
    out = np.empty(size, np.int64)
    out[:keep] = array[:keep]
    return out
