"""Per-node neighbor draws, written once for the CPU and the GPU sampler.

These are ``numba.njit`` functions, inlined into the CPU kernels of
:mod:`sparsetrain.sampling.neighbor`; :mod:`sparsetrain.sampling.cuda`
compiles the same Python source as CUDA device functions through
:func:`sparsetrain.sampling.retarget.retarget`. Randomness comes from
:mod:`sparsetrain.sampling.rng` (also retargeted), so a node's draws are the
same on both targets. Only ``math`` and NumPy scalar types are used: both
targets compile them. Per dst node:
- fanout -1 takes every in-edge (weights ignored);
- uniform without replacement: Floyd's algorithm (k <= 32) or selection
  sampling (larger k), each a uniform k-subset of the in-edges;
- uniform with replacement: ``fanout`` independent draws;
- weighted with replacement: ``fanout`` draws, each proportional to the weight;
- weighted without replacement: the k largest keys ``log(u) / w``
  (Efraimidis-Spirakis); edges of weight 0 are never drawn.
"""

from __future__ import annotations

import math

import numba

from sparsetrain.sampling.rng import below, uniform

FLOYD_MAX = 32  # above this fanout, selection sampling (O(degree)) beats Floyd's O(k^2) membership scans


@numba.njit(cache=True, inline="always")
def segment_of(seg_start, i):
    """The segment of a hop's work items holding item ``i``: the last ``s`` with ``seg_start[s] <= i``.

    A hop's work items (graph columns) come in segments, one per edge type sampled at that hop; a homogeneous graph
    has one, found without a loop.
    """
    lo = 0
    hi = seg_start.shape[0] - 2
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if seg_start[mid] <= i:
            lo = mid
        else:
            hi = mid - 1
    return lo


@numba.njit(cache=True, inline="always")
def edge_count(weights, lo, d, fanout, replace, weighted):
    """How many in-edges a node with ``d`` in-edges starting at ``lo`` gets."""
    if d == 0 or fanout < 0:
        return d
    if weighted:
        positive = 0
        for p in range(lo, lo + d):
            if weights[p] > 0:
                positive += 1
        if replace:
            return fanout if positive > 0 else 0
        return fanout if fanout < positive else positive  # (not min(): numba 0.68.1 types it for CPUs only)
    return fanout if replace or fanout < d else d


@numba.njit(cache=True, inline="always")
def count_node(indptr, weights, nodes, i, fanout, replace, weighted, num_edges, lo, deg):
    """Record where dst node ``i``'s in-edges start (``lo[i]``) and how many it has (``deg[i]``); return how many it
    gets.

    -1 (and no edges) when its range is not inside ``[0, num_edges)``: a damaged ``indptr`` is reported, never read
    through.
    """
    v = nodes[i]
    a = indptr[v]
    b = indptr[v + 1]
    if a < 0 or b < a or b > num_edges:
        lo[i] = 0
        deg[i] = 0
        return -1
    lo[i] = a
    deg[i] = b - a
    return edge_count(weights, a, b - a, fanout, replace, weighted)


@numba.njit(cache=True, inline="always")
def es_key(weights, lo, p, stream):
    """Efraimidis-Spirakis key of edge ``lo + p``: larger keys win; -inf for weight 0."""
    w = weights[lo + p]
    if w <= 0:
        return -math.inf
    return math.log(uniform(stream, p)) / w


@numba.njit(cache=True, inline="always")
def draw_positions(weights, lo, d, k, fanout, replace, weighted, stream, out, start):
    """Write the positions (0 <= p < d) of the ``k`` sampled in-edges of one node to ``out[start:start + k]``.

    ``lo`` is where the node's edges start (weights are read at ``lo + p``).
    """
    if fanout < 0 or (k == d and not replace and not weighted):
        for j in range(k):
            out[start + j] = j
    elif weighted and replace:
        total = 0.0
        for p in range(d):
            total += weights[lo + p]
        for j in range(k):
            target = uniform(stream, j) * total
            acc = 0.0
            pick = 0
            for p in range(d):
                w = weights[lo + p]
                if w > 0:
                    pick = p
                    acc += w
                    if target < acc:
                        break
            out[start + j] = pick
    elif weighted:
        # the k largest keys; a full heap is not worth it for fanouts of tens
        filled = 0
        worst = 0
        worst_key = math.inf
        for p in range(d):
            if weights[lo + p] <= 0:
                continue
            key = es_key(weights, lo, p, stream)
            if filled < k:
                out[start + filled] = p
                if key < worst_key:
                    worst_key = key
                    worst = filled
                filled += 1
            elif key > worst_key:
                out[start + worst] = p
                worst_key = math.inf
                for j in range(k):
                    kj = es_key(weights, lo, out[start + j], stream)
                    if kj < worst_key:
                        worst_key = kj
                        worst = j
    elif replace:
        for j in range(k):
            out[start + j] = below(stream, j, d)
    elif k <= FLOYD_MAX:
        # Floyd: for j = d-k .. d-1 draw t in [0, j]; take t unless taken, else j
        c = 0
        for j in range(d - k, d):
            t = below(stream, j, j + 1)
            for q in range(start, start + c):
                if out[q] == t:
                    t = j
                    break
            out[start + c] = t
            c += 1
    else:
        # selection sampling: keep edge p with probability (still needed) / (still left)
        c = 0
        for p in range(d):
            if (d - p) * uniform(stream, p) < k - c:
                out[start + c] = p
                c += 1
                if c == k:
                    break
