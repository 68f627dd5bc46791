"""Negative edges for link prediction: destinations drawn uniformly or by degree^0.75, optionally strict.

``strict`` redraws a candidate ``(u, w)`` that is an edge of the graph (or ``w == u``), so no
negative is a positive; the edge test is a binary search in column ``w`` of the CSC, whose
sources are sorted. Draws come from the counter-based RNG of :mod:`sparsetrain.sampling.rng`:
the same (seed, key) gives the same negatives whatever the thread count.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import prange

from sparsetrain.errors import InputError
from sparsetrain.sampling.graph import CSCGraph
from sparsetrain.sampling.rng import below, hop_key, node_stream, uniform

DISTRIBUTIONS = ("uniform", "degree")
MAX_TRIES = 64  # strict draws per negative before giving up (only a near-complete neighborhood needs more)
_SRC_STREAM = 1 << 20  # hop numbers of the negatives' streams: far from any neighbor-sampling hop
_DST_STREAM = _SRC_STREAM + 1


@numba.njit(cache=True, nogil=True, inline="always")
def has_edge(indptr, indices, u, v):
    """Whether ``u -> v`` is an edge: a binary search for ``u`` in column ``v`` (clamped to the arrays)."""
    lo = max(indptr[v], 0)
    hi = min(indptr[v + 1], indices.shape[0])
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < u:
            lo = mid + 1
        else:
            hi = mid
    return lo < min(indptr[v + 1], indices.shape[0]) and indices[lo] == u


@numba.njit(cache=True, nogil=True, inline="always")
def _draw(cdf, num_nodes, stream, j):
    if cdf.shape[0] == 0:
        return below(stream, j, num_nodes)
    r = uniform(stream, j) * cdf[cdf.shape[0] - 1]
    lo, hi = 0, cdf.shape[0] - 1
    while lo < hi:  # first node whose cumulative weight exceeds r
        mid = (lo + hi) // 2
        if cdf[mid] <= r:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True, parallel=True)
def draw_destinations(src, k, cdf, num_nodes, strict, indptr, indices, key, out):
    """``out[i * k + j]``: negative destination ``j`` of source ``src[i]``; -1 where ``strict`` found none in
    ``MAX_TRIES``."""
    for e in prange(src.shape[0] * k):
        u = src[e // k]
        stream = node_stream(key, e)
        w = -1
        for attempt in range(MAX_TRIES):
            c = _draw(cdf, num_nodes, stream, attempt)
            if not strict or (c != u and not has_edge(indptr, indices, u, c)):
                w = c
                break
        out[e] = w


@numba.njit(cache=True, nogil=True, parallel=True)
def draw_nodes(n, cdf, num_nodes, key, out):
    """``out[i]``: node ``i`` drawn from the distribution."""
    for i in prange(n):
        out[i] = _draw(cdf, num_nodes, node_stream(key, i), 0)


class NegativeSampler:
    """Draw negative edges of ``graph``: ``distribution="uniform"`` or ``"degree"`` (in-degree ** ``exponent``, as
    word2vec/PinSAGE).

    ``strict=True``: no negative is an edge of the graph or a self loop (destinations are redrawn;
    an :class:`InputError` when a source has no non-neighbor left). Deterministic in
    ``(seed, key)``. ``graph`` may be one relation of a typed graph (columns: its dst-type nodes); ``num_sources``
    is then the src-type node count (default: ``graph.num_nodes``). ``src_weight`` / ``dst_weight``: a weight per
    source / destination node to draw proportionally to (PyG's ``NegativeSampling`` weights), in place of
    ``distribution``.
    """

    def __init__(self, graph: CSCGraph, *, distribution: str = "uniform", strict: bool = False, exponent: float = 0.75,
                 seed: int = 0, num_sources: int | None = None, src_weight: torch.Tensor | None = None,
                 dst_weight: torch.Tensor | None = None) -> None:
        if distribution not in DISTRIBUTIONS:
            raise InputError(f"negative distribution {distribution!r}; choose one of {', '.join(DISTRIBUTIONS)}")
        self.num_sources = graph.num_nodes if num_sources is None else int(num_sources)
        if graph.num_nodes < 1 or self.num_sources < 1:
            raise InputError("the graph has no nodes to draw negatives from")
        self.graph = graph
        self.distribution = distribution
        self.strict = bool(strict)
        self.seed = int(seed)
        self._cdf = np.empty(0, np.float64)
        self._host = None
        if distribution == "degree":
            weights = graph.in_degrees().to("cpu", torch.float64).numpy() ** float(exponent)
            if not weights.sum() > 0:
                raise InputError("distribution='degree' on a graph without edges; use distribution='uniform'")
            self._cdf = np.cumsum(weights)
        self._src_cdf = self._cdf if self.num_sources == graph.num_nodes else np.empty(0, np.float64)
        if dst_weight is not None:
            self._cdf = _weights_cdf(dst_weight, graph.num_nodes, "dst_weight")
        if src_weight is not None:
            self._src_cdf = _weights_cdf(src_weight, self.num_sources, "src_weight")

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    def _check_ids(self, ids: torch.Tensor, what: str, n: int) -> np.ndarray:
        if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise InputError(f"{what} must be a 1-D integer tensor of node ids; got shape {list(ids.shape)} dtype "
                             f"{ids.dtype}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise InputError(f"{what} has ids outside [0, {n}); pass node ids of this graph")
        return ids.to("cpu", torch.int64).numpy()

    def destinations(self, src: torch.Tensor, k: int = 1, key: int = 0) -> torch.Tensor:
        """``k`` negative destinations per source, row-major: ``[len(src) * k]`` (entry ``i * k + j`` belongs to
        ``src[i]``)."""
        if k < 0:
            raise InputError(f"k={k}; give a number of negatives per source >= 0")
        src_np = self._check_ids(torch.as_tensor(src), "src", self.num_sources)
        out = np.empty(len(src_np) * k, np.int64)
        indptr = indices = np.zeros(1, np.int64)  # read only by the strict check
        if self.strict:
            self.graph.check_files()
            indptr, indices, _ = self._host_graph().numpy()
        draw_destinations(src_np, k, self._cdf, self.num_nodes, self.strict, indptr, indices,
                          np.uint64(hop_key(self.seed, key, _DST_STREAM)), out)
        if self.strict and len(out) and out.min() < 0:
            u = int(src_np[int(np.flatnonzero(out < 0)[0]) // k])
            raise InputError(f"no strict negative found for source node {u} in {MAX_TRIES} draws (it links to "
                             "almost every node); use strict=False or a sparser graph")
        return torch.from_numpy(out).to(torch.as_tensor(src).device)

    def _host_graph(self) -> CSCGraph:
        """The graph on the host, for the strict check's lookups (a GPU graph is copied once: negatives are drawn on
        the CPU, a few per seed edge)."""
        if self.graph.device.type == "cpu":
            return self.graph
        if self._host is None:
            self._host = self.graph.to("cpu")
        return self._host

    def pairs(self, num: int, key: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``num`` negative edges whose sources and destinations are both drawn (PyG's binary negative sampling)."""
        src_t = self.nodes(int(num), key, "src")
        return src_t, self.destinations(src_t, 1, key)

    def nodes(self, num: int, key: int = 0, end: str = "dst", attempt: int = 0) -> torch.Tensor:
        """``num`` nodes drawn from the source (``end="src"``) or destination distribution; ``attempt`` picks another
        stream."""
        out = np.empty(int(num), np.int64)
        cdf, n = (self._src_cdf, self.num_sources) if end == "src" else (self._cdf, self.num_nodes)
        stream = _SRC_STREAM if end == "src" and attempt == 0 else _DST_STREAM + 1 + 2 * attempt + (end == "src")
        draw_nodes(int(num), cdf, n, np.uint64(hop_key(self.seed, key, stream)), out)
        return torch.from_numpy(out)

    def __repr__(self) -> str:
        return f"NegativeSampler(distribution={self.distribution!r}, strict={self.strict}, seed={self.seed})"


def _weights_cdf(weight, n: int, what: str) -> np.ndarray:
    weight = torch.as_tensor(weight).detach().cpu().reshape(-1).to(torch.float64)
    if weight.numel() != n:
        raise InputError(f"{what} has {weight.numel()} entries for {n} nodes; give one weight per node")
    if bool((weight < 0).any()) or not bool(torch.isfinite(weight).all()) or not float(weight.sum()) > 0:
        raise InputError(f"{what} must be finite, >= 0 and not all zero")
    return np.cumsum(weight.numpy())
