"""Belady's optimum: the best hit rate any cache of a given size can reach on a known trace.

On a miss with the cache full, the clairvoyant policy evicts the resident row whose next use is
farthest away, or skips admitting the new row when its own next use is farther still. The
trace is flattened with each batch's ids made distinct, the same accounting as
:func:`sparsetrain.storage.policies.replay`.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _next_use(seq, num_rows):
    n = seq.size
    nxt = np.empty(n, np.int64)
    last = np.full(num_rows, n, np.int64)
    for t in range(n - 1, -1, -1):
        nxt[t] = last[seq[t]]
        last[seq[t]] = t
    return nxt


@njit(cache=True, nogil=True)
def _belady_hits(seq, nxt, num_rows, capacity, count_from):
    """Replay with a max-heap of resident rows keyed by next use; returns the hits at positions ``>= count_from``."""
    heap = np.empty(capacity, np.int64)
    key = np.empty(num_rows, np.int64)
    pos = np.full(num_rows, -1, np.int64)
    size = 0
    hits = 0
    for t in range(seq.size):
        row = seq[t]
        nu = nxt[t]
        j = pos[row]
        if j >= 0:
            if t >= count_from:
                hits += 1
        elif size < capacity:
            j = size
            heap[j] = row
            pos[row] = j
            size += 1
        else:
            top = heap[0]
            if nu >= key[top]:
                continue
            pos[top] = -1
            heap[0] = row
            pos[row] = 0
            j = 0
        key[row] = nu
        # the key of heap[j] changed: restore the max-heap property both ways
        while j > 0:
            p = (j - 1) // 2
            if key[heap[p]] >= key[heap[j]]:
                break
            heap[p], heap[j] = heap[j], heap[p]
            pos[heap[p]] = p
            pos[heap[j]] = j
            j = p
        while True:
            c = 2 * j + 1
            if c >= size:
                break
            if c + 1 < size and key[heap[c + 1]] > key[heap[c]]:
                c += 1
            if key[heap[c]] <= key[heap[j]]:
                break
            heap[c], heap[j] = heap[j], heap[c]
            pos[heap[c]] = c
            pos[heap[j]] = j
            j = c
    return hits


def flatten_trace(trace) -> np.ndarray:
    """One int64 array of the trace's batches, each batch's ids made distinct."""
    parts = [np.unique(np.asarray(b.numpy() if hasattr(b, "numpy") else b, dtype=np.int64)) for b in trace]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def belady_hit_rate(trace, capacity_rows: int, num_rows: int | None = None, warmup: int = 0) -> float:
    """Optimal (clairvoyant) hit rate of a ``capacity_rows``-row cache over ``trace`` (iterable of id batches), starting
    empty; the first ``warmup`` batches fill the cache but are not counted (as in ``policies.replay``)."""
    trace = list(trace)
    seq = flatten_trace(trace)
    count_from = flatten_trace(trace[:warmup]).size
    if seq.size == count_from or capacity_rows <= 0:
        return 0.0
    rows = int(num_rows if num_rows is not None else seq.max() + 1)
    nxt = _next_use(seq, rows)
    return _belady_hits(seq, nxt, rows, int(capacity_rows), count_from) / (seq.size - count_from)
