"""The fused last hop's per-node work, written once for the CPU and the GPU: a node's in-neighbours drawn as the
sampler draws them (:func:`draw_sources`, over :mod:`sparsetrain.sampling.draw` and :mod:`sparsetrain.sampling.rng`),
and the mean of their feature rows (:func:`mean_columns`).

:func:`sparsetrain.sampling.fused_mean.fused_mean_cpu` inlines them into its CPU kernel;
:mod:`sparsetrain.sampling.cuda.fused_mean` compiles the same source as device functions.
"""

from __future__ import annotations

import numba

from sparsetrain.sampling.draw import draw_positions, edge_count
from sparsetrain.sampling.rng import node_stream

SLOTS_CHECKED_ABOVE = 64  # fanouts above this look the largest in-degree up, to size the draws' scratch by it


def draw_slots(indptr, fanout: int, replace: bool) -> int:
    """Scratch slots one destination's draws take (``indptr``: NumPy or torch): its fanout (none for -1), at most the
    largest in-degree without replacement."""
    if fanout <= SLOTS_CHECKED_ABOVE or replace or len(indptr) < 2:
        return max(fanout, 0)
    return min(fanout, int((indptr[1:] - indptr[:-1]).max()))


@numba.njit(cache=True, inline="always")
def draw_sources(indptr, indices, weights, v, fanout, replace, weighted, key, num_nodes, scratch, slot):
    """Node ``v``'s in-neighbours as the sampler's hop with key ``key`` draws them: ``(start, k)``.

    The sources are ``indices[start:start + k]`` for a fanout of -1 (every in-edge), else ``scratch[slot:slot + k]``
    (written here). ``k`` is -1 when ``v``, its ``indptr`` range or one of its drawn sources lies outside the graph.
    """
    if v < 0 or v >= indptr.shape[0] - 1:
        return 0, -1
    a = indptr[v]
    b = indptr[v + 1]
    if a < 0 or b < a or b > indices.shape[0]:
        return 0, -1
    if fanout < 0:
        for p in range(a, b):
            if indices[p] < 0 or indices[p] >= num_nodes:
                return 0, -1
        return a, b - a
    k = edge_count(weights, a, b - a, fanout, replace, weighted)
    draw_positions(weights, a, b - a, k, fanout, replace, weighted, node_stream(key, v), scratch, slot)
    for j in range(slot, slot + k):
        u = indices[a + scratch[j]]
        if u < 0 or u >= num_nodes:
            return 0, -1
        scratch[j] = u
    return slot, k


@numba.njit(cache=True, inline="always")
def mean_columns(x, sources, start, k, out, row, f0, f1):
    """``out[row, f0:f1]``: the mean of rows ``sources[start:start + k]`` of ``x`` over those columns, summed in
    ``out``'s float32 in source order; zeros when ``k`` is 0 (PyG's mean of no messages)."""
    for f in range(f0, f1):
        out[row, f] = 0.0
    for j in range(start, start + k):
        s = sources[j]
        for f in range(f0, f1):
            out[row, f] += x[s, f]
    if k > 0:
        for f in range(f0, f1):
            out[row, f] /= k
