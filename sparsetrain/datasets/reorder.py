"""Node orderings that make a graph friendlier to caches: hubs first, or neighbors close.

Each function returns ``order``: ``order[new_id] = old_id``.
"""

from __future__ import annotations

import numba
import numpy as np

from sparsetrain.datasets.clustering import cluster_order
from sparsetrain.datasets.csc import RawCSC
from sparsetrain.datasets.traversal import enqueue_unvisited
from sparsetrain.errors import SettingError

METHODS = ("degree", "rcm", "cluster")


def degree_order(csc: RawCSC) -> np.ndarray:
    """Nodes by in-degree, highest first (ties by old id): the hot rows become a prefix."""
    return np.argsort(-csc.degrees(), kind="stable").astype(np.int64)


@numba.njit(cache=True, nogil=True)
def _rcm(indptr, indices, degrees, starts):
    n = indptr.shape[0] - 1
    order = np.empty(n, dtype=np.int64)
    visited = np.zeros(n, dtype=np.bool_)
    head = 0
    tail = 0
    for start in starts:
        if visited[start]:
            continue
        visited[start] = True
        order[tail] = start
        tail += 1
        while head < tail:
            v = order[head]
            head += 1
            first_new = tail
            tail = enqueue_unvisited(indptr, indices, v, visited, order, tail)
            if tail - first_new > 1:  # Cuthill-McKee: enqueue new neighbors by ascending degree
                block = order[first_new:tail].copy()
                by_degree = np.argsort(degrees[block], kind="mergesort")
                order[first_new:tail] = block[by_degree]
    return order[::-1].copy()


def rcm_order(csc: RawCSC) -> np.ndarray:
    """Reverse Cuthill-McKee over in-neighbors: BFS from low-degree nodes, so neighbors get close ids.

    Every connected component is ordered in turn; for an undirected graph this is the classic RCM.
    """
    degrees = csc.degrees()
    starts = np.argsort(degrees, kind="stable").astype(np.int64)
    return _rcm(csc.indptr, csc.indices, degrees, starts)


def node_order(method: str, csc: RawCSC) -> np.ndarray:
    if method == "degree":
        return degree_order(csc)
    if method == "rcm":
        return rcm_order(csc)
    if method == "cluster":  # contiguous clusters (see clustering.py; build.py also saves the cluster ids)
        return cluster_order(csc)[0]
    raise SettingError(f"unknown reorder method {method!r}; choose one of {', '.join(METHODS)}")
