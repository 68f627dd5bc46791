"""The node map of disjoint sampling: one subgraph per seed, so a node is a (seed index, node) pair.

With ``disjoint=True`` (PyG's option) each seed grows its own tree: a node reached from two seeds appears
twice, once per seed, and ``MiniBatch.batch`` says which seed each node belongs to. The direct-address table
of :mod:`sparsetrain.sampling.neighbor` (one slot per graph node) cannot hold a node twice, so these kernels key
an open-addressing hash table by ``batch * total + g`` (``g``: the node's table position, its id offset by its
node type; ``total``: the table positions of the whole graph). The table is the batch's own and sized to it:
:meth:`DisjointMap.reserve` doubles it before a hop could fill it past half.
"""

from __future__ import annotations

import numba
import numpy as np

from sparsetrain.sampling.rng import mix64

EMPTY = -1


@numba.njit(cache=True, nogil=True, inline="always")
def _slot(keys, key):
    """The slot holding ``key``, or the empty slot where it goes (linear probing; the table is never full)."""
    mask = keys.shape[0] - 1
    s = np.int64(mix64(np.uint64(key)) & np.uint64(mask))
    while keys[s] != EMPTY and keys[s] != key:
        s = (s + 1) & mask
    return s


@numba.njit(cache=True, nogil=True)
def insert_seeds(seeds, base, total, first_batch, keys, values):
    """Seed ``i`` (of the node type at table position ``base``) is node ``i`` of seed ``first_batch + i``'s
    subgraph."""
    for i in range(seeds.shape[0]):
        key = (first_batch + i) * total + base + seeds[i]
        s = _slot(keys, key)
        keys[s] = key
        values[s] = i


@numba.njit(cache=True, nogil=True)
def relabel(nbr, dst, offsets, seg_start, seg_et, seg_dst, et_src, type_offset, type_size, item_batch, keys, values,
            counts, new_nodes, src):
    """The dedupe + relabel pass of :func:`~sparsetrain.sampling.neighbor.sample_hop` for disjoint subgraphs.

    Edge ``e`` (source ``nbr[e]``, dst local id ``dst[e]``) belongs to the subgraph of its dst's seed,
    ``item_batch[i]`` of its work item ``i``; a source not yet in that subgraph gets the next local id of its type
    and its key goes to ``new_nodes``. Returns the new-node count, or ``-1 - e`` for a source outside its node type.
    """
    total = type_offset[type_offset.shape[0] - 1]
    found = 0
    for s in range(seg_et.shape[0]):
        t = et_src[seg_et[s]]
        base = type_offset[t]
        size = type_size[t]
        n = counts[t]
        shift = seg_start[s] - seg_dst[s]
        for e in range(offsets[seg_start[s]], offsets[seg_start[s + 1]]):
            u = nbr[e]
            if u < 0 or u >= size:
                return -1 - e
            key = item_batch[dst[e] + shift] * total + base + u
            slot = _slot(keys, key)
            if keys[slot] == EMPTY:
                keys[slot] = key
                values[slot] = n
                new_nodes[found] = key
                found += 1
                n += 1
            src[e] = values[slot]
        counts[t] = n
    return found


@numba.njit(cache=True, nogil=True)
def _rehash(old_keys, old_values, keys, values):
    for s in range(old_keys.shape[0]):
        if old_keys[s] != EMPTY:
            slot = _slot(keys, old_keys[s])
            keys[slot] = old_keys[s]
            values[slot] = old_values[s]


class DisjointMap:
    """One batch's (seed index, node) -> local id table; ``reserve(n)`` before up to ``n`` entries can be in it."""

    def __init__(self, entries: int) -> None:
        self.keys = np.full(_capacity(entries), EMPTY, np.int64)
        self.values = np.empty(self.keys.shape[0], np.int64)

    def reserve(self, entries: int) -> None:
        size = _capacity(entries)
        if size > self.keys.shape[0]:
            keys, values = np.full(size, EMPTY, np.int64), np.empty(size, np.int64)
            _rehash(self.keys, self.values, keys, values)
            self.keys, self.values = keys, values


def _capacity(entries: int) -> int:
    """A power of two at least twice ``entries`` (linear probing stays short below half full)."""
    return 1 << max(4, int(2 * max(entries, 1) - 1).bit_length())
