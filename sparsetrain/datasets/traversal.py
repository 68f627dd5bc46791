"""The breadth-first step shared by the RCM ordering (reorder.py) and the BFS partitioner (clustering.py)."""

from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True, inline="always")
def enqueue_unvisited(indptr, indices, v, visited, order, tail):
    """Breadth-first step: append v's not yet visited neighbors to ``order`` at ``tail``; returns the new tail."""
    for p in range(indptr[v], indptr[v + 1]):
        u = indices[p]
        if not visited[u]:
            visited[u] = True
            order[tail] = u
            tail += 1
    return tail
