"""CPU kernels of the fused multi-hop neighbor sampler (Numba, ``parallel=True``).

One hop of a message-flow graph is :func:`count_hop` (how many edges each dst
node gets, in parallel) then :func:`sample_hop`: for every dst node (the first
``num_dst`` entries of ``nodes``) it draws up to ``fanout`` in-neighbors, in
parallel over dst nodes; then one pass over the drawn edges looks every source
up in the node map (global id -> local id), appends the unseen ones to
``nodes`` and writes the local source id of every edge: dedupe and relabel are
the same lookup, with no sort and no second pass. The read of the sources also
writes every edge's id (its CSC position, or the graph's ``edge_perm`` there). The map is a direct-address
table (one int32 per graph node, -1 = absent): the identity hash, with no
probing and a size that fits the last-level cache on graphs of a few million
nodes (9.6 MB for 2.4M nodes; the GPU kernels use an open-addressing table
sized to the batch instead). The table is left clean by :func:`reset_table`
for the next batch, touching only the batch's nodes. Sampling is bound by
memory latency, so loads are prefetched a few iterations ahead.

The per-node draws (:mod:`sparsetrain.sampling.draw`) and the random numbers
(:mod:`sparsetrain.sampling.rng`, counter-based, so a batch is the same
whatever the thread count) are shared with the GPU kernels, which compile the
same source. The dedupe + relabel pass is not shared: here it is one sequential
pass over a direct-address table (cheap, cache-friendly, no atomics), while the
GPU inserts from thousands of threads at once into a hash table with
``atomicCAS``/``atomicMin`` and numbers first occurrences with a scan
(:mod:`sparsetrain.sampling.neighbor_cuda`). Both give new nodes local ids in
order of first appearance in the edge list, so the batches are identical.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from sparsetrain.sampling.draw import count_node, draw_positions
from sparsetrain.sampling.prefetch import prefetch
from sparsetrain.sampling.rng import node_stream

PREFETCH = 32  # loads issued this many iterations ahead
GATHER_CHUNKS = 256  # edge ranges of the parallel source read (results do not depend on it)


@numba.njit(cache=True, nogil=True, parallel=True)
def count_hop(indptr, weights, nodes, num_dst, fanout, replace, weighted, num_edges, lo, deg, offsets):
    """Fill ``lo``/``deg`` (where each dst node's in-edges start, how many) and ``offsets`` (edge ranges); returns the edge count.

    The dst nodes are ``nodes[:num_dst]`` (a hop that samples only for some nodes passes a slice).
    ``-1 - i`` when dst node ``i``'s range in ``indptr`` lies outside ``[0, num_edges)`` (a damaged graph).
    """
    offsets[0] = 0
    for i in prange(num_dst):
        if i + PREFETCH < num_dst:
            prefetch(indptr, nodes[i + PREFETCH])
        offsets[i + 1] = count_node(indptr, weights, nodes, i, fanout, replace, weighted, num_edges, lo, deg)
    for i in range(num_dst):
        if offsets[i + 1] < 0:
            return -1 - i
        offsets[i + 1] += offsets[i]
    return offsets[num_dst]


@numba.njit(cache=True, nogil=True, parallel=True)
def sample_hop(indices, weights, edge_perm, nodes, first, num_dst, fanout, replace, weighted, key, lo, deg, offsets, nbr, table,
               edge_index, edge_ids):
    """One hop after :func:`count_hop`: fills ``edge_index`` [2, E] (local src, dst) and ``edge_ids``, appends new nodes; returns the node count.

    ``-1 - e`` when edge ``e``'s source (``nbr[e]``) is not a node id (a damaged graph); the table is then as before the call.

    ``nodes[:num_dst]`` are the nodes found so far, all already in ``table``
    (global id -> local id, -1 = absent); the hop samples in-edges of
    ``nodes[first:num_dst]`` (``lo``/``deg``/``offsets`` are indexed from
    ``first``, as :func:`count_hop` filled them for that slice). ``nodes`` has
    room for ``num_dst + E`` entries and ``nbr`` for ``E``. ``edge_ids[e]`` is the
    CSC position of edge ``e``, or ``edge_perm`` at it when ``edge_perm`` is not
    empty. New nodes get local ids in order of first appearance in the
    (dst-major) edge list. Passes: draw edge positions (parallel, compute
    only), read the sources there (parallel, prefetched), then the fused dedupe
    + relabel (one map lookup per edge).
    """
    count = num_dst - first
    num_edges = offsets[count]
    src = edge_index[0]
    dst = edge_index[1]
    permuted = edge_perm.shape[0] > 0
    for i in prange(count):
        start = offsets[i]
        k = offsets[i + 1] - start
        if k > 0:
            a = lo[i]
            draw_positions(weights, a, deg[i], k, fanout, replace, weighted, node_stream(key, nodes[first + i]), nbr, start)
            for j in range(start, start + k):
                nbr[j] += a
                dst[j] = first + i
    chunks = min(GATHER_CHUNKS, num_edges // 1024 + 1)
    per = (num_edges + chunks - 1) // chunks
    for c in prange(chunks):
        first_edge = c * per
        last = min(num_edges, first_edge + per)
        for e in range(first_edge, last):
            if e + PREFETCH < last:
                prefetch(indices, nbr[e + PREFETCH])
                if permuted:
                    prefetch(edge_perm, nbr[e + PREFETCH])
            p = nbr[e]
            edge_ids[e] = edge_perm[p] if permuted else p
            nbr[e] = indices[p]
    # fused dedupe + relabel: one lookup per edge in the node map
    n = num_dst
    for e in range(num_edges):
        if e + PREFETCH < num_edges:
            prefetch(table, nbr[e + PREFETCH])
        u = nbr[e]
        if u < 0 or u >= table.shape[0]:  # a damaged ``indices``: leave the table as it was and report edge e
            for j in range(num_dst, n):
                table[nodes[j]] = -1
            return -1 - e
        t = table[u]
        if t < 0:
            t = n
            table[u] = n
            nodes[n] = u
            n += 1
        src[e] = t
    return n


class Workspace:
    """Scratch reused from batch to batch (fresh pages cost a fault each): the node map and the per-hop arrays."""

    def __init__(self, num_nodes: int) -> None:
        self.table = np.full(num_nodes, -1, np.int32 if num_nodes < 2**31 else np.int64)
        self.lo = self.deg = self.offsets = self.nbr = self.nodes = np.empty(0, np.int64)

    @staticmethod
    def _fit(array: np.ndarray, size: int, keep: int = 0) -> np.ndarray:
        if array.shape[0] >= size:
            return array
        grown = np.empty(max(size, array.shape[0] + array.shape[0] // 2), np.int64)
        grown[:keep] = array[:keep]
        return grown

    def for_dst(self, num_dst: int) -> None:
        self.lo = self._fit(self.lo, num_dst)
        self.deg = self._fit(self.deg, num_dst)
        self.offsets = self._fit(self.offsets, num_dst + 1)

    def for_edges(self, num_dst: int, num_edges: int) -> None:
        self.nbr = self._fit(self.nbr, num_edges)
        self.nodes = self._fit(self.nodes, num_dst + num_edges, keep=num_dst)


@numba.njit(cache=True, nogil=True)
def insert_seeds(seeds, table):
    """Give seed ``i`` local id ``i``; returns the index of the first repeated seed, or -1."""
    for i in range(seeds.shape[0]):
        s = seeds[i]
        if table[s] >= 0:
            for j in range(i):  # undo, so the table stays clean
                table[seeds[j]] = -1
            return i
        table[s] = i
    return -1


@numba.njit(cache=True, nogil=True, parallel=True)
def reset_table(table, nodes):
    """Mark every node of a finished batch absent again (touches only those entries)."""
    for i in prange(nodes.shape[0]):
        table[nodes[i]] = -1
