"""Numba kernels of the streaming partitioner: node assignment (LDG, hash), halo marking, and the per-part
relabelling of a chunk of columns. Each walks one chunk of the CSC; the state across chunks is a few arrays per node
(the owner of each node, its local id) and one bit per (part, node) for the halos."""

from __future__ import annotations

import numba
import numpy as np

from sparsetrain.sampling.rng import mix64

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_ONE = np.uint64(1)


@numba.njit(cache=True, nogil=True)
def ldg_chunk(c0, indptr, indices, owner, sizes, capacity, counts):
    """Linear deterministic greedy (Stanton & Kliot, KDD 2012) over columns ``c0, c0 + 1, ...``: each node goes to
    the part holding most of its placed in-neighbours, weighted by ``1 - size / capacity``; ties and nodes with no
    placed neighbour go to the smallest part. A full part (``size >= capacity``) takes no more nodes.

    A node already placed (a later pass: restreaming LDG, Nishimura & Ugander, KDD 2013) is taken out of its part
    first and placed again, its neighbours counted where the last pass left them; returns how many nodes moved.
    """
    num_parts = sizes.shape[0]
    base = indptr[0]
    moved = 0
    for i in range(indptr.shape[0] - 1):
        v = c0 + i
        before = owner[v]
        if before >= 0:
            sizes[before] -= 1
        counts[:] = 0
        for e in range(indptr[i] - base, indptr[i + 1] - base):
            u = indices[e]
            p = owner[u]
            if p >= 0 and u != v:
                counts[p] += 1
        best = -1
        best_score = -1.0
        for p in range(num_parts):
            if sizes[p] >= capacity:
                continue
            score = counts[p] * (1.0 - sizes[p] / capacity)
            if score > best_score or (score == best_score and sizes[p] < sizes[best]):
                best = p
                best_score = score
        owner[v] = best
        sizes[best] += 1
        if before >= 0 and before != best:
            moved += 1
    return moved


@numba.njit(cache=True, nogil=True)
def hash_owners(seed, num_parts, owner):
    """A random hash of the node id: the baseline every partitioner is measured against."""
    s = np.uint64(seed)
    for v in range(owner.shape[0]):
        owner[v] = mix64(np.uint64(v) ^ mix64(s)) % np.uint64(num_parts)


@numba.njit(cache=True, nogil=True)
def owned_local_ids(owner, num_parts, local):
    """``local[v]``: node ``v``'s rank among its part's nodes in id order; returns the part sizes."""
    sizes = np.zeros(num_parts, np.int64)
    for v in range(owner.shape[0]):
        p = owner[v]
        local[v] = sizes[p]
        sizes[p] += 1
    return sizes


@numba.njit(cache=True, nogil=True)
def mark_halo(c0, indptr, indices, owner, halo_bits, part_edges):
    """Set bit ``u`` of ``halo_bits[p]`` for every in-neighbour ``u`` of a part-``p`` node owned elsewhere; count each
    part's in-edges; return the chunk's cut edges."""
    base = indptr[0]
    cut = 0
    for i in range(indptr.shape[0] - 1):
        p = owner[c0 + i]
        part_edges[p] += indptr[i + 1] - indptr[i]
        for e in range(indptr[i] - base, indptr[i + 1] - base):
            u = indices[e]
            if owner[u] != p:
                halo_bits[p, u >> 6] |= _ONE << np.uint64(u & 63)
                cut += 1
    return cut


@numba.njit(cache=True, inline="always")
def popcount(x):
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


@numba.njit(cache=True, nogil=True)
def word_ranks(bits, ranks):
    """``ranks[w]``: set bits in words ``[0, w)``; returns the total."""
    total = 0
    for w in range(bits.shape[0]):
        ranks[w] = total
        total += popcount(bits[w])
    return total


@numba.njit(cache=True, nogil=True)
def relabel_chunk(c0, indptr, indices, owner, local, num_owned, halo_bits, halo_ranks, col_order, part_cols,
                  out_indices, out_pos, part_edge_start, owned_shift):
    """The chunk's columns grouped by part (``col_order``: the chunk's columns, part by part, each part's in id order;
    ``part_cols[p]``: where part ``p``'s start), their in-edges in the same order with every source as a part-local id:
    an owned node's ``local`` id - ``owned_shift[p]``, a halo node ``num_owned[p]`` + its rank among the part's halo
    nodes (a typed part's ids count within the source type: the shifts and ``num_owned`` are that type's).

    ``out_pos``: each written edge's position in the chunk (to carry weights along); ``part_edge_start[p]``: where
    part ``p``'s edges start in ``out_indices``."""
    base = indptr[0]
    k = 0
    for p in range(part_cols.shape[0] - 1):
        part_edge_start[p] = k
        for j in range(part_cols[p], part_cols[p + 1]):
            i = col_order[j]
            for e in range(indptr[i] - base, indptr[i + 1] - base):
                u = indices[e]
                if owner[u] == p:
                    out_indices[k] = local[u] - owned_shift[p]
                else:
                    w = u >> 6
                    below = halo_bits[p, w] & ((_ONE << np.uint64(u & 63)) - _ONE)
                    out_indices[k] = num_owned[p] + halo_ranks[p, w] + popcount(below)
                out_pos[k] = e
                k += 1
    part_edge_start[part_cols.shape[0] - 1] = k


@numba.njit(cache=True, nogil=True)
def merge_columns(ptrs, idx, idx_start, src_base, out_ptr, out_idx):
    """One column per node from several edge types' columns of the same nodes (a typed graph as one topology):
    ``ptrs[k]`` (rebased to 0) and ``idx[idx_start[k]:]`` are edge type ``k``'s columns, its sources shifted by
    ``src_base[k]`` into the flat id space of all node types. ``out_ptr`` [n + 1], ``out_idx`` [edges]."""
    out_ptr[0] = 0
    e = 0
    for i in range(ptrs.shape[1] - 1):
        for k in range(ptrs.shape[0]):
            for j in range(ptrs[k, i], ptrs[k, i + 1]):
                out_idx[e] = idx[idx_start[k] + j] + src_base[k]
                e += 1
        out_ptr[i + 1] = e
