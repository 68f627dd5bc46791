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
import torch

from sparsetrain.sampling.layout import KernelLayout
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


class DisjointNodes(DisjointMap):
    """The node map of a disjoint batch for the CPU hop loop (:mod:`~sparsetrain.sampling.cpu_backend`): the hash
    table of (seed index, node) keys, the seed index of every node in the workspace's ``batch`` arrays; the
    counterpart of :class:`~sparsetrain.sampling.cpu_backend.SharedNodes` (``ws``: the hop loop's
    :class:`~sparsetrain.sampling.neighbor.HostScratch`)."""

    def __init__(self, layout: KernelLayout, num_seeds: int) -> None:
        super().__init__(num_seeds)
        self.layout = layout

    def insert_seeds(self, ws, seeds: list[tuple[int, torch.Tensor]], counts: np.ndarray) -> None:
        """Seed ``i`` (counted over every seed type, in order) is node 0 of subgraph ``i``; ``counts[t]`` is set as
        each type's go in."""
        layout = self.layout
        first_batch = 0
        for t, ids in seeds:
            seeds_np = ids.numpy()
            insert_seeds(seeds_np, layout.type_offset[t], layout.type_offset[-1], first_batch, self.keys, self.values)
            ws.batch[t] = ws.fit(ws.batch[t], len(seeds_np))
            ws.batch[t][: len(seeds_np)] = np.arange(first_batch, first_batch + len(seeds_np))
            first_batch += len(seeds_np)
            ws.grow_nodes(t, len(seeds_np), 0)[: len(seeds_np)] = seeds_np
            counts[t] = len(seeds_np)

    def item_batch(self, ws, segments) -> np.ndarray:
        """Each work item's seed index, in the order of the hop's columns."""
        layout = self.layout
        seg_et, seg_start, seg_dst = segments
        parts = [ws.batch[layout.et_dst[k]][seg_dst[i] : seg_dst[i] + seg_start[i + 1] - seg_start[i]]
                 for i, k in enumerate(seg_et)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def new_nodes(self, ws, counts: np.ndarray, num_edges: int) -> np.ndarray:
        """Room for a hop's new keys (up to ``num_edges``), the table grown to hold them."""
        ws.new = ws.fit(ws.new, num_edges)
        self.reserve(int(counts.sum()) + num_edges)
        return ws.new

    def append(self, ws, counts: np.ndarray, new_nodes: np.ndarray, found: int) -> None:
        """A hop's ``found`` new (seed index, node) keys, appended to the node and batch arrays of their types."""
        keys = new_nodes[:found]
        if not len(keys):
            return
        offset = self.layout.type_offset
        total = offset[-1]
        position = keys % total
        one_type = len(offset) == 2
        new_type = None if one_type else np.searchsorted(offset, position, side="right") - 1
        for t in [0] if one_type else np.unique(new_type):
            mine = slice(None) if one_type else new_type == t
            start = int(counts[t]) - (len(keys) if one_type else int(mine.sum()))
            ws.grow_nodes(t, int(counts[t]), start)[start : counts[t]] = position[mine] - offset[t]
            ws.batch[t] = ws.fit(ws.batch[t], int(counts[t]), start)
            ws.batch[t][start : counts[t]] = keys[mine] // total

    def release(self, ws, counts: np.ndarray) -> None:
        """Nothing to clear: the table is the batch's own."""

    def seed_index(self, ws, counts: np.ndarray) -> list[torch.Tensor]:
        """Each node's seed index, per node type."""
        return [torch.from_numpy(ws.batch[t][: counts[t]].copy()) for t in range(len(self.layout.node_types))]
