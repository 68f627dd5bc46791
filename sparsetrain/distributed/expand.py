"""The owner's side of a hop: draw the in-neighbours of some of its nodes exactly as the single-process sampler
would, from the same counter-based stream (:mod:`sparsetrain.sampling.rng`) keyed by (sampler seed, batch key, hop,
global node id) and the same per-node draws (:mod:`sparsetrain.sampling.draw`) over the node's in-edges, which a part
keeps in the global CSC's order. Nothing depends on where the node sits in a frontier or on which rank asked."""

from __future__ import annotations

import numba
import numpy as np

from sparsetrain.distributed.errors import DistSamplingError, PartDamagedError
from sparsetrain.sampling.draw import count_node, draw_positions
from sparsetrain.sampling.rng import hop_key, node_stream

SEED_MASK = (1 << 63) - 1  # the single-process sampler's seed mask


@numba.njit(cache=True, nogil=True)
def _count(indptr, weights, cols, fanout, replace, weighted, num_edges, lo, deg, offsets):
    """``offsets``: where each item's draws go; returns the draw count, or ``-1 - i`` for a damaged column ``i``."""
    offsets[0] = 0
    for i in range(cols.shape[0]):
        k = count_node(indptr, weights, cols, i, fanout, replace, weighted, num_edges, lo, deg)
        if k < 0:
            return -1 - i
        offsets[i + 1] = offsets[i] + k
    return offsets[cols.shape[0]]


@numba.njit(cache=True, nogil=True)
def _draw(indices, weights, nodes, keys, fanout, replace, weighted, lo, deg, offsets, pos, src):
    """Item ``i`` (global node ``nodes[i]``, hop key ``keys[i]``): its draws' positions in its column and sources."""
    for i in range(nodes.shape[0]):
        start = offsets[i]
        k = offsets[i + 1] - start
        if k > 0:
            stream = node_stream(keys[i], nodes[i])
            draw_positions(weights, lo[i], deg[i], k, fanout, replace, weighted, stream, pos, start)
            for j in range(start, start + k):
                src[j] = indices[lo[i] + pos[j]]


@numba.njit(cache=True, nogil=True)
def _locate(owned, ids, out):
    """``out[i]``: the local id of global ``ids[i]`` (its index in the sorted ``owned``); the index of the first id
    not in ``owned``, or -1."""
    n = owned.shape[0]
    for i in range(ids.shape[0]):
        j = np.searchsorted(owned, ids[i])
        if j >= n or owned[j] != ids[i]:
            return i
        out[i] = j
    return -1


def hop_keys(seed: int, batch_keys: np.ndarray, hop: int) -> np.ndarray:
    """The single-process sampler's hop key of each batch key (homogeneous graph: counter ``hop``)."""
    seed &= SEED_MASK
    return np.array([hop_key(seed, int(k), hop) for k in batch_keys], np.uint64)


class Expander:
    """Draws for nodes a part owns: ``(per-node counts, rows [E, 3] of (source global id, source owner, global edge
    id))``, in the order of the nodes, each node's draws in the single-process order."""

    def __init__(self, part, *, replace: bool, weighted: bool) -> None:
        graph = part.dataset.graph
        self.indptr, self.indices, weights = graph.numpy()
        self.weights = weights if weighted and weights is not None else np.empty(0, np.float32)
        self.replace, self.weighted = bool(replace), bool(weighted)
        self.l2g = part.local_to_global.numpy()
        self.col_start = part.col_start.numpy()
        self.num_owned = part.num_owned
        self.rank = part.rank
        local_owner = np.full(len(self.l2g), part.rank, np.int64)
        local_owner[self.num_owned :] = part.halo_owner.numpy()
        self.local_owner = local_owner
        self.owned = np.ascontiguousarray(self.l2g[: self.num_owned])

    def __call__(self, nodes: np.ndarray, keys: np.ndarray, fanout: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(nodes)
        cols = np.empty(n, np.int64)
        bad = _locate(self.owned, nodes, cols)
        if bad >= 0:
            raise DistSamplingError(f"partition part {self.rank}: asked for node {nodes[bad]}, which it does not own; "
                                    "every rank must load the part of its own rank from one partitioned folder")
        lo, deg, offsets = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n + 1, np.int64)
        total = _count(self.indptr, self.weights, cols, fanout, self.replace, self.weighted, len(self.indices), lo, deg,
                       offsets)
        if total < 0:
            raise PartDamagedError(f"partition part {self.rank}: the in-edges of node {nodes[-1 - total]} lie outside "
                                   "its edge list; the part is damaged, re-run `sparsetrain partition`")
        pos, src = np.empty(total, np.int64), np.empty(total, np.int64)
        _draw(self.indices, self.weights, nodes.astype(np.int64), keys, fanout, self.replace, self.weighted, lo, deg,
              offsets, pos, src)
        counts = np.diff(offsets)
        rows = np.empty((total, 3), np.int64)
        rows[:, 0] = self.l2g[src]
        rows[:, 1] = self.local_owner[src]
        rows[:, 2] = np.repeat(self.col_start[cols], counts) + pos
        return counts, rows
