"""Dedupe and relabel of a batch's nodes on the requesting rank: global id -> local id in an open-addressing table
sized to the batch (never to the graph), new nodes numbered by first appearance in the dst-major edge list, as the
single-process sampler numbers them."""

from __future__ import annotations

import numba
import numpy as np

from sparsetrain.sampling.rng import mix64

_EMPTY = -1


@numba.njit(cache=True, inline="always")
def _slot(keys, mask, g):
    """The slot holding global id ``g``, or the empty slot where it goes (linear probing)."""
    h = np.int64(mix64(np.uint64(g)) & np.uint64(mask))
    while keys[h] != _EMPTY and keys[h] != g:
        h = (h + 1) & mask
    return h


@numba.njit(cache=True, nogil=True)
def _insert_nodes(keys, values, nodes, count):
    for i in range(count):
        h = _slot(keys, keys.shape[0] - 1, nodes[i])
        keys[h] = nodes[i]
        values[h] = i


@numba.njit(cache=True, nogil=True)
def _relabel(keys, values, src, src_owner, nodes, owner, count, local_src):
    """Local id of every source (known: its id; new: the next one, appended to ``nodes``/``owner``); new count."""
    mask = keys.shape[0] - 1
    for e in range(src.shape[0]):
        g = src[e]
        h = _slot(keys, mask, g)
        if keys[h] == _EMPTY:
            keys[h] = g
            values[h] = count
            nodes[count] = g
            owner[count] = src_owner[e]
            count += 1
        local_src[e] = values[h]
    return count


class NodeMap:
    """A batch's nodes (global ids, in local id order), their owners, and the table that finds a node's local id."""

    def __init__(self, seeds: np.ndarray, owner: int) -> None:
        self.count = len(seeds)
        self.nodes = seeds.astype(np.int64)
        self.owner = np.full(self.count, owner, np.int64)
        self.keys = np.empty(0, np.int64)
        self.values = np.empty(0, np.int64)
        self._reserve(self.count)

    def _reserve(self, total: int) -> None:
        """Room for ``total`` nodes: the node arrays, and a table at most half full (rebuilt when it grows)."""
        if len(self.nodes) < total:
            self.nodes = np.concatenate([self.nodes[: self.count], np.empty(total - self.count, np.int64)])
            self.owner = np.concatenate([self.owner[: self.count], np.empty(total - self.count, np.int64)])
        if len(self.keys) < 2 * total:
            size = 1 << max(4, int(4 * total - 1).bit_length())  # twice what is needed now: few rebuilds
            self.keys = np.full(size, _EMPTY, np.int64)
            self.values = np.empty(size, np.int64)
            _insert_nodes(self.keys, self.values, self.nodes, self.count)

    def add(self, src: np.ndarray, src_owner: np.ndarray) -> np.ndarray:
        """The local ids of ``src`` (global ids whose owners are ``src_owner``); unseen ones become new nodes."""
        self._reserve(self.count + len(src))
        local = np.empty(len(src), np.int64)
        self.count = _relabel(self.keys, self.values, src, src_owner, self.nodes, self.owner, self.count, local)
        return local
