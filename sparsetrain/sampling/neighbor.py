"""CPU kernels of the fused multi-hop neighbor sampler (Numba, ``parallel=True``), for homogeneous and typed graphs.

One hop of a message-flow graph is :func:`count_hop` (how many edges each work
item gets, in parallel) then :func:`sample_hop`. A work item is one column of the
graph's CSC: a dst node of a homogeneous graph, an (edge type, dst node) pair of a
typed one (:mod:`sparsetrain.sampling.graph` lays a typed graph out as one CSC whose
columns are those pairs). A hop's items come in *segments*, one per edge type
sampled at that hop: segment ``s`` is edge type ``seg_et[s]``, its items are
``cols[seg_start[s]:seg_start[s + 1]]`` and their dst nodes have the consecutive
local ids from ``seg_dst[s]``. A homogeneous graph is the one-segment case.

:func:`sample_hop` draws every item's in-edges in parallel, reads their sources in
parallel, then one sequential pass looks every source up in the node map (global
id -> local id), appends the unseen ones to ``new_nodes`` and writes the local
source id of every edge: dedupe and relabel are the same lookup, with no sort and
no second pass. The node map is one direct-address table over every node of the
graph (node type ``t`` owns ``[type_offset[t], type_offset[t + 1])``; one int32
each, -1 = absent): the identity hash, with no probing and a size that fits the
last-level cache on graphs of a few million nodes (the GPU kernels use an
open-addressing table sized to the batch instead). Local ids count within a node
type. The table is left clean by :func:`reset_table` for the next batch, touching
only the batch's nodes. Sampling is bound by memory latency, so loads are
prefetched a few iterations ahead.

The per-node draws (:mod:`sparsetrain.sampling.draw`) and the random numbers
(:mod:`sparsetrain.sampling.rng`, counter-based, so a batch is the same whatever
the thread count) are shared with the GPU kernels, which compile the same source.
The dedupe + relabel pass is not shared: here it is one sequential pass over a
direct-address table (cheap, cache-friendly, no atomics), while the GPU inserts
from thousands of threads at once into a hash table with ``atomicCAS``/``atomicMin``
and numbers first occurrences with a scan (:mod:`sparsetrain.sampling.cuda`).
Both give new nodes local ids in order of first appearance in the (segment-major,
dst-major) edge list, so the batches are identical.
"""

from __future__ import annotations

import contextlib

import numba
import numpy as np
from numba import prange

from sparsetrain.sampling.disjoint import relabel as relabel_disjoint
from sparsetrain.sampling.draw import count_node, draw_positions, segment_of
from sparsetrain.sampling.prefetch import prefetch
from sparsetrain.sampling.rng import node_stream

PREFETCH = 32  # loads issued this many iterations ahead
GATHER_CHUNKS = 256  # edge ranges of the parallel source read (results do not depend on it)
PARALLEL_MIN_WORK = 1 << 16  # edges (or 8 x work items) below which a hop runs on one thread
NO_ITEMS = np.empty(0, np.int64)  # the kernels' "option off" (not disjoint: no per-item seed index, no hash table)


@numba.njit(cache=True, nogil=True, parallel=True)
def count_hop(indptr, weights, cols, seg_start, seg_fanout, replace, weighted, num_edges, lo, deg, offsets):
    """Fill ``lo``/``deg`` (where each item's in-edges start, how many) and ``offsets`` (edge ranges); returns the
    edge count.

    Item ``i`` is column ``cols[i]`` with the fanout of its segment, ``seg_fanout``.
    ``-1 - i`` when item ``i``'s range in ``indptr`` lies outside ``[0, num_edges)`` (a damaged graph).
    """
    n = cols.shape[0]
    offsets[0] = 0
    for i in prange(n):
        if i + PREFETCH < n:
            prefetch(indptr, cols[i + PREFETCH])
        fanout = seg_fanout[segment_of(seg_start, i)]
        offsets[i + 1] = count_node(indptr, weights, cols, i, fanout, replace, weighted, num_edges, lo, deg)
    for i in range(n):
        if offsets[i + 1] < 0:
            return -1 - i
        offsets[i + 1] += offsets[i]
    return offsets[n]


@numba.njit(cache=True, nogil=True, parallel=True)
def sample_hop(indices, weights, edge_perm, cols, seg_start, seg_et, seg_dst, fanouts, keys, replace, weighted,
               col_offset, edge_offset, et_src, type_offset, type_size, lo, deg, offsets, nbr, table, counts, new_nodes,
               edge_index, edge_ids, item_batch, disjoint_keys, disjoint_values):
    """One hop after :func:`count_hop`: fills ``edge_index`` [2, E] (local src, dst) and ``edge_ids``; returns the
    new-node count.

    Per edge type ``k``: ``fanouts[k]``, ``keys[k]`` (its hop key), ``col_offset[k]`` / ``edge_offset[k]`` (its first
    column and edge), ``et_src[k]`` (its source node type). Local id ``j`` of node type ``t`` is in ``table`` at
    ``type_offset[t] + global id``; ``counts[t]`` is how many type-``t`` nodes the batch has, raised as new ones are
    found; new nodes go to ``new_nodes`` as table positions, in order of first appearance. ``nbr`` has room for E
    entries. ``edge_ids[e]``: ``edge_perm`` at the edge's CSC position when ``edge_perm`` is not empty, else that
    position counted from the start of its edge type. Returns ``-1 - e`` when edge ``e``'s source is not a node of
    its type (a damaged graph); ``table`` and ``counts`` are then as before the call. Passes: draw edge positions
    (parallel, compute only), read the sources there (parallel, prefetched), then the fused dedupe + relabel.
    Disjoint sampling (``item_batch`` not empty: work item ``i`` is in the subgraph of seed ``item_batch[i]``) draws
    from a stream per (seed, node) and dedupes in :func:`sparsetrain.sampling.disjoint.relabel`, in the hash table
    ``disjoint_keys`` / ``disjoint_values`` instead of ``table``; ``new_nodes`` then holds its keys.
    """
    num_work = cols.shape[0]
    num_edges = offsets[num_work]
    src = edge_index[0]
    dst = edge_index[1]
    permuted = edge_perm.shape[0] > 0
    split = item_batch.shape[0] > 0
    stride = type_offset[type_offset.shape[0] - 1]
    for i in prange(num_work):
        start = offsets[i]
        k = offsets[i + 1] - start
        if k > 0:
            s = segment_of(seg_start, i)
            et = seg_et[s]
            a = lo[i]
            stream_id = cols[i] - col_offset[et]
            if split:
                stream_id += item_batch[i] * stride
            stream = node_stream(keys[et], stream_id)
            draw_positions(weights, a, deg[i], k, fanouts[et], replace, weighted, stream, nbr, start)
            d = seg_dst[s] + i - seg_start[s]
            base = edge_offset[et]
            for j in range(start, start + k):
                p = nbr[j] + a
                nbr[j] = p
                dst[j] = d
                if not permuted:
                    edge_ids[j] = p - base
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
            if permuted:
                edge_ids[e] = edge_perm[p]
            nbr[e] = indices[p]
    if split:
        return relabel_disjoint(nbr, dst, offsets, seg_start, seg_et, seg_dst, et_src, type_offset, type_size,
                                item_batch, disjoint_keys, disjoint_values, counts, new_nodes, src)
    # fused dedupe + relabel: one lookup per edge in the node map
    found = 0
    counts_before = counts.copy()
    for s in range(seg_et.shape[0]):
        t = et_src[seg_et[s]]
        base = type_offset[t]
        size = type_size[t]
        n = counts[t]
        for e in range(offsets[seg_start[s]], offsets[seg_start[s + 1]]):
            if e + PREFETCH < num_edges:
                prefetch(table, base + nbr[e + PREFETCH])
            u = nbr[e]
            if u < 0 or u >= size:  # a damaged ``indices``: leave the map as it was and report edge e
                for j in range(found):
                    table[new_nodes[j]] = -1
                counts[:] = counts_before
                return -1 - e
            g = base + u
            local = table[g]
            if local < 0:
                local = n
                n += 1
                table[g] = local
                new_nodes[found] = g
                found += 1
            src[e] = local
        counts[t] = n
    return found


@numba.njit(cache=True, nogil=True)
def insert_seeds(seeds, base, table):
    """Give seed ``i`` (of the node type whose table range starts at ``base``) local id ``i``; returns the index of
    the first repeated seed, or -1."""
    for i in range(seeds.shape[0]):
        g = base + seeds[i]
        if table[g] >= 0:
            for j in range(i):  # undo, so the table stays clean
                table[base + seeds[j]] = -1
            return i
        table[g] = i
    return -1


@numba.njit(cache=True, nogil=True, parallel=True)
def reset_table(table, nodes, base):
    """Mark the ``nodes`` (of the type starting at ``base``) of a finished batch absent again, touching only them."""
    for i in prange(nodes.shape[0]):
        table[base + nodes[i]] = -1


class HostScratch:
    """Scratch reused from batch to batch (fresh pages cost a fault each): node map, nodes per type, per-hop arrays."""

    def __init__(self, total_nodes: int, num_types: int) -> None:
        self.table = np.full(total_nodes, -1, np.int32 if total_nodes < 2**31 else np.int64)
        self.lo = self.deg = self.offsets = self.nbr = self.new = np.empty(0, np.int64)
        self.nodes = [np.empty(0, np.int64) for _ in range(num_types)]
        self.batch = [np.empty(0, np.int64) for _ in range(num_types)]  # disjoint sampling: each node's seed index

    @staticmethod
    def fit(array: np.ndarray, size: int, keep: int = 0) -> np.ndarray:
        if array.shape[0] >= size:
            return array
        grown = np.empty(max(size, array.shape[0] + array.shape[0] // 2), np.int64)
        grown[:keep] = array[:keep]
        return grown

    def for_items(self, count: int) -> None:
        self.lo = self.fit(self.lo, count)
        self.deg = self.fit(self.deg, count)
        self.offsets = self.fit(self.offsets, count + 1)

    def grow_nodes(self, t: int, size: int, keep: int) -> np.ndarray:
        """Node type ``t``'s node array with room for ``size`` entries (the first ``keep`` kept)."""
        self.nodes[t] = self.fit(self.nodes[t], size, keep)
        return self.nodes[t]


@contextlib.contextmanager
def threads_for(work: int):
    """Run small kernels on the calling thread: waking the pool costs more than it saves (more on a loaded machine)."""
    if work >= PARALLEL_MIN_WORK:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)
