"""Edge list -> CSC in memory bounded independently of the edge count.

Pass 1 streams the edge chunks once to count in-degrees (and validate ids).
Pass 2 streams them again and appends every directed edge, as one int64 key
``(dst - first node of its range) * num_nodes + src``, to the scratch file of its
destination range ("bucket"); ranges hold at most ``bucket_edges`` edges each.
Then each bucket in turn is read, sorted, cleaned (self loops, duplicates) and
appended to the output column arrays, which are written, never mapped.
Memory is two int64 arrays per node plus one bucket (512 MiB at the default),
whatever the number of edges.

Sources and destinations may be different node types (one edge type of a typed graph): the key
multiplier is then the source type's count and the columns are the destination type's nodes. With
``with_ids`` each edge also carries its row in the edge stream, kept in the same order as the keys
(equal keys in stream order), so edge features and edge ids follow the edges into CSC order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from sparsetrain.errors import DatasetError
from sparsetrain.sampling.rng import mix64

EdgeChunk = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]
EdgeChunks = Callable[[], Iterator[EdgeChunk]]
"""A re-iterable edge source: each call yields ``(src, dst, weight | None)`` int64/float32 chunks."""

BUCKET_EDGES = 1 << 26
MAX_NODES = 3_037_000_499  # keys (dst * num_nodes + src) must fit in int64


@numba.njit(cache=True, nogil=True)
def _count(counts, src, dst, both_directions):
    for i in range(src.shape[0]):
        counts[dst[i]] += 1
        if both_directions:
            counts[src[i]] += 1


@numba.njit(cache=True, nogil=True)
def _group_by_bucket(src, dst, w, has_weights, bucket_of_node, first_node, num_nodes, both_directions, bucket, keys,
                     weights, offsets, has_ids, first_row, ids):
    """Fill ``keys`` (and ``weights``, ``ids``) with the chunk's directed edges grouped by bucket; ``offsets[b]`` starts
    bucket b.

    Outputs are passed in rather than returned: no arrays are boxed on the way back,
    which keeps the call safe when a signal handler raises right after it.
    """
    per_edge = 2 if both_directions else 1
    m = src.shape[0] * per_edge
    offsets[:] = 0
    for i in range(src.shape[0]):
        offsets[bucket_of_node[dst[i]] + 1] += 1
        if both_directions:
            offsets[bucket_of_node[src[i]] + 1] += 1
    for b in range(offsets.shape[0] - 1):
        offsets[b + 1] += offsets[b]
    bucket[: offsets.shape[0] - 1] = offsets[:-1]
    for j in range(m):
        i = j // per_edge
        s, d = (src[i], dst[i]) if j % per_edge == 0 else (dst[i], src[i])
        b = bucket_of_node[d]
        p = bucket[b]
        keys[p] = (d - first_node[b]) * num_nodes + s
        if has_weights:
            weights[p] = w[i]
        if has_ids:
            ids[p] = first_row + i
        bucket[b] += 1


@numba.njit(cache=True, nogil=True)
def _clean_bucket(keys, weights, has_weights, num_nodes, first_node, degrees, drop_self_loops, drop_duplicates, result):
    """Compact sorted keys in place into source ids; count each column; hash the distinct edges both ways.

    ``result`` (uint64[3]) receives the kept count and the two hashes.

    Duplicate edges are merged and their weights summed (PyG's ``coalesce``). The two
    hashes are sums of a bijective mixer over every distinct edge as (src, dst) and as
    (dst, src): equal exactly when the edge set equals its reverse, up to a 2**-64 chance.
    """
    out = 0
    forward = np.uint64(0)
    backward = np.uint64(0)
    n = np.uint64(num_nodes)
    previous = -1
    for p in range(keys.shape[0]):
        key = keys[p]  # read before the slot is overwritten below (out <= p)
        d = key // num_nodes
        s = key - d * num_nodes
        v = d + first_node
        distinct = key != previous
        previous = key
        if drop_self_loops and s == v:
            continue
        if drop_duplicates and not distinct:
            if has_weights:
                weights[out - 1] += weights[p]
            continue
        if distinct:
            forward += mix64(np.uint64(s) * n + np.uint64(v))
            backward += mix64(np.uint64(v) * n + np.uint64(s))
        keys[out] = s
        if has_weights:
            weights[out] = weights[p]
        degrees[d] += 1
        out += 1
    result[0] = out
    result[1] = forward
    result[2] = backward


def count_in_degrees(chunks: EdgeChunks, num_nodes: int | None, undirected: bool, check: Callable,
                     on_chunk=None) -> np.ndarray:
    """Pass 1: in-degree of every node (both directions when ``undirected``).

    ``check(src, dst, weight, first_row)`` validates a chunk before any of its ids
    is used. When ``num_nodes`` is not known in advance the count array grows to
    the largest id at either end of an edge, so no source id lies past the last node;
    a given ``num_nodes`` is the destination count (``check`` keeps every id in range).
    """
    counts = np.zeros(num_nodes or 0, dtype=np.int64)
    row = 0
    for src, dst, w in chunks():
        check(src, dst, w, row)
        row += len(src)
        if len(src) and num_nodes is None:
            need = max(int(src.max()), int(dst.max())) + 1
            if need > len(counts):
                counts = np.concatenate([counts, np.zeros(need - len(counts), dtype=np.int64)])
        if len(src):
            _count(counts, src, dst, undirected)
        if on_chunk is not None:
            on_chunk(len(src))
    return counts


def bucket_ranges(counts: np.ndarray, bucket_edges: int | None = None) -> np.ndarray:
    """First node of each destination range (plus ``num_nodes`` at the end); a range holds at most
    ``bucket_edges`` (default :data:`BUCKET_EDGES`) in-edges unless one node alone has more."""
    bucket_edges = bucket_edges or BUCKET_EDGES
    total = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=total[1:])
    firsts = [0]
    while firsts[-1] < len(counts):
        start = firsts[-1]
        end = int(np.searchsorted(total, total[start] + bucket_edges, side="right")) - 1
        firsts.append(min(len(counts), max(start + 1, end)))
    return np.asarray(firsts, dtype=np.int64)


Bucket = tuple[Path, "Path | None", "Path | None"]
"""Scratch files of one bucket: keys, weights (or None), edge ids (or None)."""


def write_buckets(chunks: EdgeChunks, firsts: np.ndarray, num_nodes: int, undirected: bool, weighted: bool,
                  scratch: Callable[[str], Path], on_chunk=None, with_ids: bool = False) -> list[Bucket]:
    """Pass 2: append every directed edge's key (and weight, and row in the stream) to its bucket's scratch files.

    ``num_nodes`` is the key multiplier: the node count, or the source type's count for one edge type of a typed graph.
    """
    num_buckets = len(firsts) - 1
    bucket_of = np.repeat(np.arange(num_buckets, dtype=np.int32), np.diff(firsts))
    paths = [(scratch(f"bucket{b}.keys"), scratch(f"bucket{b}.weights") if weighted else None,
              scratch(f"bucket{b}.ids") if with_ids else None)
             for b in range(num_buckets)]
    files = [tuple(None if p is None else open(p, "wb") for p in bucket) for bucket in paths]
    no_weights = np.zeros(0, dtype=np.float32)
    no_ids = np.zeros(0, dtype=np.int64)
    cursor = np.zeros(num_buckets, dtype=np.int64)
    offsets = np.zeros(num_buckets + 1, dtype=np.int64)
    row = 0
    try:
        for src, dst, w in chunks():
            m = len(src) * (2 if undirected else 1)
            keys = np.empty(m, dtype=np.int64)
            weights = np.empty(m, dtype=np.float32) if weighted else no_weights
            ids = np.empty(m, dtype=np.int64) if with_ids else no_ids
            _group_by_bucket(src, dst, no_weights if w is None else w, weighted, bucket_of, firsts, num_nodes,
                             undirected, cursor, keys, weights, offsets, with_ids, row, ids)
            for b in np.flatnonzero(np.diff(offsets)):
                for values, f in zip((keys, weights, ids), files[b]):
                    if f is not None:
                        values[offsets[b] : offsets[b + 1]].tofile(f)
            row += len(src)
            if on_chunk is not None:
                on_chunk(len(src))
    finally:
        for bucket in files:
            for f in bucket:
                if f is not None:
                    f.close()
    return paths


@dataclass
class ColumnsWritten:
    """What :func:`assemble_columns` produced: column pointers, edge count and whether the edge set is symmetric."""

    indptr: np.ndarray
    num_edges: int
    symmetric: bool


def _stable_sort(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``order = np.argsort(keys, kind="stable")`` and ``keys[order]``; by one plain sort of ``key * n + position`` when
    that fits in int64 (several times faster than a stable argsort), else by the stable argsort."""
    n = len(keys)
    if n and int(keys.min()) >= 0 and (int(keys.max()) + 1) * n < 2**63:
        packed = keys * n
        packed += np.arange(n, dtype=np.int64)
        packed.sort()
        order = packed % n
        packed //= n
        return order, packed
    order = np.argsort(keys, kind="stable")
    return order, keys[order]


def assemble_columns(buckets: list[Bucket], firsts: np.ndarray, num_nodes: int, indices, weights, drop_self_loops: bool,
                     drop_duplicates: bool, on_bucket=None, ids=None) -> ColumnsWritten:
    """Sort and clean each bucket, append its columns to ``indices`` / ``weights`` / ``ids`` (:class:`ArrayFile`),
    delete it.

    ``num_nodes`` is the key multiplier of :func:`write_buckets`; the columns are the nodes ``[0, firsts[-1])``.
    Edge ids need every edge kept: no ``drop_self_loops``, no ``drop_duplicates``.
    """
    if ids is not None and (drop_self_loops or drop_duplicates):
        raise DatasetError("edge ids follow every edge; they cannot be kept while self loops or duplicates are dropped "
                           "(build without drop_self_loops / drop_duplicates / undirected)")
    num_columns = int(firsts[-1])
    degrees = np.zeros(num_columns, dtype=np.int64)
    forward = backward = 0  # sums modulo 2**64 (Python ints: NumPy scalars warn on the intended wrap-around)
    result = np.zeros(3, dtype=np.uint64)
    written = 0
    for b, (key_path, weight_path, id_path) in enumerate(buckets):
        keys = np.fromfile(key_path, dtype=np.int64)
        w = np.fromfile(weight_path, dtype=np.float32) if weight_path else np.zeros(0, dtype=np.float32)
        rows = np.fromfile(id_path, dtype=np.int64) if id_path else None
        if weight_path or id_path:
            order, keys = _stable_sort(keys)
            w = w[order] if weight_path else w
            rows = rows[order] if id_path else None
            del order
        else:
            keys.sort()
        lo = int(firsts[b])
        _clean_bucket(keys, w, weight_path is not None, num_nodes, lo, degrees[lo : int(firsts[b + 1])],
                      drop_self_loops, drop_duplicates, result)
        kept = int(result[0])
        forward, backward = (forward + int(result[1])) % 2**64, (backward + int(result[2])) % 2**64
        indices.append(keys[:kept].astype(indices.dtype))
        if weight_path:
            weights.append(w[:kept])
        if id_path:
            ids.append(rows)
        written += kept
        del keys, w, rows
        for path in (key_path, weight_path, id_path):
            if path is not None:
                path.unlink()
        if on_bucket is not None:
            on_bucket(1)
    indptr = np.zeros(num_columns + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    return ColumnsWritten(indptr, written, bool(forward == backward))


@numba.njit(cache=True, nogil=True, parallel=True)
def _write_columns(new_indptr, out_indices, out_weights, out_ids, old_indptr, old_indices, old_weights, old_ids,
                   has_weights, has_ids, order, inverse, relabel):
    """Column ``v`` of the output is column ``order[v]`` of the input, ids mapped through ``inverse``; weights and edge
    ids follow."""
    for v in numba.prange(new_indptr.shape[0] - 1):
        src = order[v]
        lo, hi = old_indptr[src], old_indptr[src] + (new_indptr[v + 1] - new_indptr[v])
        dst = new_indptr[v]
        if relabel:
            column = np.empty(hi - lo, dtype=np.int64)
            for p in range(lo, hi):
                column[p - lo] = inverse[old_indices[p]]
            if has_weights or has_ids:
                perm = np.argsort(column, kind="mergesort")
                for j in range(hi - lo):
                    out_indices[dst + j] = column[perm[j]]
                    if has_weights:
                        out_weights[dst + j] = old_weights[lo + perm[j]]
                    if has_ids:
                        out_ids[dst + j] = old_ids[lo + perm[j]]
            else:
                column.sort()
                for j in range(hi - lo):
                    out_indices[dst + j] = column[j]
        else:
            for p in range(lo, hi):
                out_indices[dst + p - lo] = old_indices[p]
                if has_weights:
                    out_weights[dst + p - lo] = old_weights[p]
                if has_ids:
                    out_ids[dst + p - lo] = old_ids[p]


@dataclass
class RawCSC:
    """CSC arrays in memory or memory-mapped (the reorderings and the partitioner read them).

    ``edge_ids``: optional, each CSC edge's row in the edge stream it was built from.
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None
    edge_ids: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return self.indptr.shape[0] - 1

    @property
    def num_edges(self) -> int:
        return int(self.indptr[-1])

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)


def write_permuted(csc: RawCSC, out_indptr: np.ndarray, out_indices: np.ndarray, out_weights: np.ndarray | None,
                   order: np.ndarray | None, out_ids: np.ndarray | None = None) -> None:
    """Write ``csc`` into the output arrays; with ``order`` (new id -> old id) relabel the nodes (within a column, equal
    sources keep their order, so edge ids follow their edges)."""
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
    has_weights, has_ids = csc.weights is not None, out_ids is not None
    empty_w, empty_ids = np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
    _write_columns(
        out_indptr[:], out_indices, out_weights if has_weights else empty_w, out_ids if has_ids else empty_ids,
        csc.indptr, csc.indices, csc.weights if has_weights else empty_w, csc.edge_ids if has_ids else empty_ids,
        has_weights, has_ids, order, inverse, relabel,
    )
