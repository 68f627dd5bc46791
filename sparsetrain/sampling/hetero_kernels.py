"""CPU kernels of the fused typed sampler: one call samples one hop for every edge type at once.

The typed topology is laid out flat: the CSCs of all edge types are concatenated
(``indptr`` positions point into the concatenated ``indices``, which hold src-type
ids), and the node maps of all node types are one direct-address table over the
concatenated id space (type ``t`` owns ``[type_offset[t], type_offset[t + 1])``),
whose entry is the node's local id *within its type*. A hop's work list is every
(edge type, dst node) pair to sample, grouped by edge type; :func:`sample_typed_hop`
draws every pair's in-edges in parallel (the per-node draws and counter-based random
numbers of the homogeneous sampler, :mod:`sparsetrain.sampling.draw` /
:mod:`sparsetrain.sampling.rng`), reads the sources in parallel, then dedupes and
relabels every edge's source into its type's map in one sequential pass. New nodes
get local ids in order of first appearance in the (edge-type-major, dst-major) edge list.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from sparsetrain.sampling.draw import count_node, draw_positions
from sparsetrain.sampling.prefetch import prefetch
from sparsetrain.sampling.rng import node_stream

PREFETCH = 32


@numba.njit(cache=True, nogil=True, parallel=True)
def count_typed_hop(indptr, cols, w_et, fanouts, num_edges, lo, deg, offsets):
    """Per work item ``i`` (column ``cols[i]`` of the concatenated CSC, edge type ``w_et[i]``): where its in-edges
    start and how many, and in ``offsets`` the edge ranges; returns the edge count, or ``-1 - i`` for a damaged range."""
    weights = np.empty(0, np.float32)
    n = cols.shape[0]
    offsets[0] = 0
    for i in prange(n):
        if i + PREFETCH < n:
            prefetch(indptr, cols[i + PREFETCH])
        offsets[i + 1] = count_node(indptr, weights, cols, i, fanouts[w_et[i]], False, False, num_edges, lo, deg)
    for i in range(n):
        if offsets[i + 1] < 0:
            return -1 - i
        offsets[i + 1] += offsets[i]
    return offsets[n]


@numba.njit(cache=True, nogil=True, parallel=True)
def sample_typed_hop(indices, w_et, w_node, w_dst, w_bounds, fanouts, keys, et_src, type_offset, type_size,
                     lo, deg, offsets, pos, table, counts, src, dst, new_nodes):
    """One hop after :func:`count_typed_hop`. Fills, per sampled edge ``e``: ``pos[e]`` its position in the concatenated
    CSC, ``src[e]`` the local id of its source within the source's type, ``dst[e]`` the local id ``w_dst`` of its dst;
    appends unseen sources to ``new_nodes`` (concatenated ids) and counts them in ``counts[type]``. Edge type ``k``'s
    work items are ``[w_bounds[k], w_bounds[k + 1])``. Returns the number of new nodes, or ``-1 - e`` when edge ``e``'s
    source is not a node of its type (a damaged graph; the table is then left as before the call)."""
    weights = np.empty(0, np.float32)
    num_work = w_et.shape[0]
    num_edges = offsets[num_work]
    for i in prange(num_work):
        start = offsets[i]
        k = offsets[i + 1] - start
        if k > 0:
            a = lo[i]
            et = w_et[i]
            draw_positions(weights, a, deg[i], k, fanouts[et], False, False, node_stream(keys[et], w_node[i]), pos, start)
            for j in range(start, start + k):
                pos[j] += a
                dst[j] = w_dst[i]
    for e in prange(num_edges):
        if e + PREFETCH < num_edges:
            prefetch(indices, pos[e + PREFETCH])
        src[e] = indices[pos[e]]
    found = 0
    first_counts = counts.copy()
    for et in range(w_bounds.shape[0] - 1):
        t = et_src[et]
        base = type_offset[t]
        size = type_size[t]
        for e in range(offsets[w_bounds[et]], offsets[w_bounds[et + 1]]):
            u = src[e]
            if u < 0 or u >= size:
                for j in range(found):
                    table[new_nodes[j]] = -1
                counts[:] = first_counts
                return -1 - e
            g = base + u
            local = table[g]
            if local < 0:
                local = counts[t]
                counts[t] += 1
                table[g] = local
                new_nodes[found] = g
                found += 1
            src[e] = local
    return found


@numba.njit(cache=True, nogil=True)
def insert_typed_seeds(seeds, base, table):
    """Give seed ``i`` (a node of the type starting at ``base``) local id ``i``; the first repeated seed's index, or -1."""
    for i in range(seeds.shape[0]):
        g = base + seeds[i]
        if table[g] >= 0:
            for j in range(i):
                table[base + seeds[j]] = -1
            return i
        table[g] = i
    return -1


@numba.njit(cache=True, nogil=True, parallel=True)
def reset_typed_table(table, nodes, base):
    for i in prange(nodes.shape[0]):
        table[base + nodes[i]] = -1
