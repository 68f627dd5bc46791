"""Edge list -> CSC in bounded memory.

Two streaming passes over the edge chunks: the first counts in-degrees (and
validates ids), the second scatters sources into their column. Columns are then
sorted, and optionally cleaned (self loops, duplicates) in place. Memory is the
output arrays (memory-mapped) plus one chunk and an int64 array per node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numba
import numpy as np

EdgeChunk = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]
EdgeChunks = Callable[[], Iterator[EdgeChunk]]
"""A re-iterable edge source: each call yields ``(src, dst, weight | None)`` int64/float32 chunks."""


@numba.njit(cache=True, nogil=True)
def _scatter(indices, cursor, src, dst, both_directions):
    for i in range(src.shape[0]):
        s, d = src[i], dst[i]
        indices[cursor[d]] = s
        cursor[d] += 1
        if both_directions:
            indices[cursor[s]] = d
            cursor[s] += 1


@numba.njit(cache=True, nogil=True)
def _scatter_weighted(indices, weights, cursor, src, dst, w, both_directions):
    for i in range(src.shape[0]):
        s, d = src[i], dst[i]
        indices[cursor[d]] = s
        weights[cursor[d]] = w[i]
        cursor[d] += 1
        if both_directions:
            indices[cursor[s]] = d
            weights[cursor[s]] = w[i]
            cursor[s] += 1


@numba.njit(cache=True, nogil=True, parallel=True)
def _sort_columns(indptr, indices):
    for v in numba.prange(indptr.shape[0] - 1):
        indices[indptr[v] : indptr[v + 1]].sort()


@numba.njit(cache=True, nogil=True, parallel=True)
def _sort_columns_weighted(indptr, indices, weights):
    for v in numba.prange(indptr.shape[0] - 1):
        lo, hi = indptr[v], indptr[v + 1]
        order = np.argsort(indices[lo:hi], kind="mergesort")
        indices[lo:hi] = indices[lo:hi][order]
        weights[lo:hi] = weights[lo:hi][order]


@numba.njit(cache=True, nogil=True, parallel=True)
def _clean_columns(indptr, indices, weights, has_weights, drop_self_loops, drop_duplicates):
    """Compact each sorted column in place; returns the new length of every column.

    Duplicate edges are merged and their weights summed (PyG's ``coalesce``).
    """
    n = indptr.shape[0] - 1
    kept = np.zeros(n, dtype=np.int64)
    for v in numba.prange(n):
        lo, hi = indptr[v], indptr[v + 1]
        out = lo
        for p in range(lo, hi):
            u = indices[p]
            if drop_self_loops and u == v:
                continue
            if drop_duplicates and out > lo and indices[out - 1] == u:
                if has_weights:
                    weights[out - 1] += weights[p]
                continue
            indices[out] = u
            if has_weights:
                weights[out] = weights[p]
            out += 1
        kept[v] = out - lo
    return kept


@numba.njit(cache=True, nogil=True, parallel=True)
def _write_columns(new_indptr, out_indices, out_weights, old_indptr, old_indices, old_weights, has_weights, order, inverse, relabel):
    """Column ``v`` of the output is column ``order[v]`` of the input, ids mapped through ``inverse``."""
    for v in numba.prange(new_indptr.shape[0] - 1):
        src = order[v]
        lo, hi = old_indptr[src], old_indptr[src] + (new_indptr[v + 1] - new_indptr[v])
        dst = new_indptr[v]
        if relabel:
            column = np.empty(hi - lo, dtype=np.int64)
            for p in range(lo, hi):
                column[p - lo] = inverse[old_indices[p]]
            if has_weights:
                perm = np.argsort(column, kind="mergesort")
                for j in range(hi - lo):
                    out_indices[dst + j] = column[perm[j]]
                    out_weights[dst + j] = old_weights[lo + perm[j]]
            else:
                column.sort()
                for j in range(hi - lo):
                    out_indices[dst + j] = column[j]
        else:
            for p in range(lo, hi):
                out_indices[dst + p - lo] = old_indices[p]
                if has_weights:
                    out_weights[dst + p - lo] = old_weights[p]


@numba.njit(cache=True, nogil=True, parallel=True)
def _count_asymmetric(indptr, indices):
    """Number of edges u -> v whose reverse v -> u is absent (columns must be sorted)."""
    n = indptr.shape[0] - 1
    missing = np.zeros(n, dtype=np.int64)
    for v in numba.prange(n):
        for p in range(indptr[v], indptr[v + 1]):
            u = indices[p]
            column = indices[indptr[u] : indptr[u + 1]]
            k = np.searchsorted(column, v)
            if k == column.shape[0] or column[k] != v:
                missing[v] += 1
    return missing.sum()


@dataclass
class RawCSC:
    """CSC arrays before they are written into the dataset (may live in scratch memmaps)."""

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None

    @property
    def num_nodes(self) -> int:
        return self.indptr.shape[0] - 1

    @property
    def num_edges(self) -> int:
        return int(self.indptr[-1])

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    def is_symmetric(self) -> bool:
        return _count_asymmetric(self.indptr, self.indices) == 0


def count_in_degrees(chunks: EdgeChunks, num_nodes: int | None, undirected: bool, check: Callable, on_chunk=None) -> np.ndarray:
    """Pass 1: in-degree of every node (both directions when ``undirected``).

    ``check(src, dst, weight, first_row)`` validates a chunk before any of its ids
    is used. When ``num_nodes`` is not known in advance the count array grows to
    the largest id at either end of an edge, so no source id lies past the last node.
    """
    counts = np.zeros(num_nodes or 0, dtype=np.int64)
    row = 0
    for src, dst, w in chunks():
        check(src, dst, w, row)
        row += len(src)
        if len(src):
            need = max(int(src.max()), int(dst.max())) + 1
            if need > len(counts):
                counts = np.concatenate([counts, np.zeros(need - len(counts), dtype=np.int64)])
            for ids in [dst, src] if undirected else [dst]:
                counts += np.bincount(ids, minlength=len(counts))
        if on_chunk is not None:
            on_chunk(len(src))
    return counts


def fill_columns(chunks: EdgeChunks, counts: np.ndarray, indices: np.ndarray, weights: np.ndarray | None, undirected: bool, on_chunk=None) -> np.ndarray:
    """Pass 2: scatter every edge's source into its column; returns ``indptr``."""
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    cursor = indptr[:-1].copy()
    for src, dst, w in chunks():
        if weights is None:
            _scatter(indices, cursor, src, dst, undirected)
        else:
            _scatter_weighted(indices, weights, cursor, src, dst, w, undirected)
        if on_chunk is not None:
            on_chunk(len(src))
    return indptr


def sort_and_clean(csc: RawCSC, drop_self_loops: bool, drop_duplicates: bool) -> RawCSC:
    """Sort every column; drop self loops / merge duplicates in place when asked."""
    has_weights = csc.weights is not None
    if has_weights:
        _sort_columns_weighted(csc.indptr, csc.indices, csc.weights)
    else:
        _sort_columns(csc.indptr, csc.indices)
    if not (drop_self_loops or drop_duplicates):
        return csc
    weights = csc.weights if has_weights else np.zeros(0, dtype=np.float32)
    kept = _clean_columns(csc.indptr, csc.indices, weights, has_weights, drop_self_loops, drop_duplicates)
    # Move the compacted columns left; sequential, so no column overwrites one not yet moved.
    new_indptr = np.zeros_like(csc.indptr)
    np.cumsum(kept, out=new_indptr[1:])
    _compact(csc.indptr, new_indptr, csc.indices, weights, has_weights)
    return RawCSC(new_indptr, csc.indices, csc.weights)


@numba.njit(cache=True, nogil=True)
def _compact(old_indptr, new_indptr, indices, weights, has_weights):
    for v in range(old_indptr.shape[0] - 1):
        lo, dst = old_indptr[v], new_indptr[v]
        for j in range(new_indptr[v + 1] - dst):
            indices[dst + j] = indices[lo + j]
            if has_weights:
                weights[dst + j] = weights[lo + j]


def write_permuted(csc: RawCSC, out_indptr: np.ndarray, out_indices: np.ndarray, out_weights: np.ndarray | None, order: np.ndarray | None) -> None:
    """Write ``csc`` into the output arrays; with ``order`` (new id -> old id) relabel the nodes.

    ``csc.indptr`` may describe compacted columns; only ``num_edges`` entries are copied.
    """
    n = csc.num_nodes
    degrees = csc.degrees()
    relabel = order is not None
    if relabel:
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n, dtype=np.int64)
        degrees = degrees[order]
    else:
        order = np.arange(n, dtype=np.int64)
        inverse = order
    out_indptr[0] = 0
    np.cumsum(degrees, out=out_indptr[1:])
    has_weights = csc.weights is not None
    empty_w = np.zeros(0, dtype=np.float32)
    _write_columns(
        out_indptr[:], out_indices, out_weights if has_weights else empty_w,
        csc.indptr, csc.indices, csc.weights if has_weights else empty_w,
        has_weights, order, inverse, relabel,
    )
