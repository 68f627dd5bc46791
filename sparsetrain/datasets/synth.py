"""A synthetic power-law graph with learnable communities (``sparsetrain synth``).

Model: a degree-corrected stochastic block model. Every node gets a class
(its community) and a power-law weight (Chung-Lu: expected degree proportional
to the weight). An undirected edge picks one end by weight over all nodes; the
other end, with probability ``p_intra``, by weight inside the first end's
community, else by weight over all nodes. Features are the class centroid plus
Gaussian noise, so features alone predict the class moderately and averaging
over neighbors (what a GNN does) predicts it well. Deterministic for a seed:
random numbers come from a counter-based hash, whatever the thread count.
"""

from __future__ import annotations

import os

import numba
import numpy as np

from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.rng import GOLDEN, mix64

P_INTRA = 0.8
DEGREE_EXPONENT = 0.5  # weight of the node ranked r is (r + 10) ** -0.5: max degree ~ 0.3% of edges on 2.4M nodes
CENTROID_SCALE = 1.5  # distance between class centroids ~ 2.1 noise standard deviations


@numba.njit(cache=True, inline="always")
def _uniform(seed, counter):
    """Uniform [0, 1) from (seed, counter): the sampler's splitmix64 mixer."""
    return (mix64(seed + counter * GOLDEN) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, inline="always")
def _pick(cumulative, lo, hi, u):
    """Index in [lo, hi) drawn with probability proportional to the weights behind ``cumulative``."""
    base = cumulative[lo - 1] if lo > 0 else 0.0
    target = base + u * (cumulative[hi - 1] - base)
    while lo < hi - 1:
        mid = (lo + hi) // 2
        if cumulative[mid - 1] > target:
            hi = mid
        else:
            lo = mid
    return lo


@numba.njit(cache=True, nogil=True, parallel=True)
def _draw_pairs(keys, seed, first, cumulative, community, starts, by_position, num_nodes, p_intra):
    """Fill ``keys`` with undirected pairs as ``min * N + max``; draw ``first + i`` uses counters 16(first+i)...

    Works in "position" space, where nodes are sorted by community so a community
    is one range; ``by_position`` maps a position to the node id.
    """
    seed = np.uint64(seed)
    for i in numba.prange(keys.shape[0]):
        base = np.uint64(first + i) * np.uint64(16)
        s = _pick(cumulative, 0, num_nodes, _uniform(seed, base))
        t = s
        for attempt in range(7):
            c = np.uint64(1 + 2 * attempt)
            if _uniform(seed, base + c) < p_intra and attempt < 4:
                comm = community[s]
                t = _pick(cumulative, starts[comm], starts[comm + 1], _uniform(seed, base + c + np.uint64(1)))
            else:
                t = _pick(cumulative, 0, num_nodes, _uniform(seed, base + c + np.uint64(1)))
            if t != s:
                break
        u, v = by_position[s], by_position[t]
        if u == v:  # only possible on a graph with a node of overwhelming weight; resolve deterministically
            v = (u + 1) % num_nodes
        keys[i] = min(u, v) * num_nodes + max(u, v)


@numba.njit(cache=True, nogil=True)
def _compact_unique(keys, drop):
    """Remove repeats (``keys`` sorted) and entries flagged in ``drop``, in place; returns the new length."""
    out = 0
    for i in range(keys.shape[0]):
        if (out > 0 and keys[i] == keys[out - 1]) or (drop.shape[0] > 0 and drop[i]):
            continue
        keys[out] = keys[i]
        out += 1
    return out


def _unique_pairs(num_pairs: int, num_nodes: int, num_classes: int, seed: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``num_pairs`` distinct undirected pairs (sorted keys) and each node's class.

    Draws into one buffer that is sorted and de-duplicated in place, round after
    round, so memory stays at about one key per requested pair.
    """
    classes = rng.integers(0, num_classes, size=num_nodes)
    rank = rng.permutation(num_nodes)
    weight = (rank + 10.0) ** -DEGREE_EXPONENT
    by_position = np.argsort(classes, kind="stable").astype(np.int64)
    cumulative = np.cumsum(weight[by_position])
    community = classes[by_position]
    starts = np.searchsorted(community, np.arange(num_classes + 1)).astype(np.int64)

    no_drop = np.zeros(0, dtype=np.bool_)
    buffer = np.empty(int(num_pairs * 1.1) + 1024, dtype=np.int64)
    have = drawn = 0
    for _ in range(64):
        missing = num_pairs - have
        if missing <= 0:
            break
        batch = int(missing * 1.1) + 1024
        if have + batch > len(buffer):
            buffer = np.concatenate([buffer[:have], np.empty(batch, dtype=np.int64)])
        _draw_pairs(buffer[have : have + batch], seed, drawn, cumulative, community, starts, by_position, num_nodes, P_INTRA)
        drawn += batch
        buffer[: have + batch].sort()
        have = _compact_unique(buffer[: have + batch], no_drop)
    if have < num_pairs:
        raise DatasetError(f"--edges {2 * num_pairs}: cannot draw that many distinct edges on {num_nodes} nodes; ask for fewer edges or more nodes")
    surplus = have - num_pairs
    if surplus:  # drop a random surplus so the count is exact
        drop = np.zeros(have, dtype=np.bool_)
        while (flagged := int(drop.sum())) < surplus:
            drop[rng.integers(0, have, size=surplus - flagged)] = True
        have = _compact_unique(buffer[:have], drop)
    return buffer[:have], classes


def synthesize(
    out_dir: str | os.PathLike,
    num_nodes: int,
    num_edges: int,
    *,
    feature_dim: int = 100,
    num_classes: int = 47,
    seed: int = 0,
    **options,
) -> GraphDataset:
    """Generate and write a synthetic dataset with ``num_nodes`` nodes and exactly ``num_edges`` directed edges.

    The graph is undirected and stored with both directions, so ``num_edges``
    must be even. Options are :class:`BuildOptions` fields (``reorder``,
    ``feature_dtype``, ``split_fractions``, ``overwrite``, ``quiet``).
    """
    if num_nodes < 2:
        raise DatasetError(f"--nodes {num_nodes}: a synthetic graph needs at least 2 nodes")
    if num_edges < 2 or num_edges % 2:
        raise DatasetError(f"--edges {num_edges}: must be a positive even number (the graph is undirected; each edge is stored both ways)")
    if num_edges // 2 > num_nodes * (num_nodes - 1) // 4:
        raise DatasetError(f"--edges {num_edges}: more than half of all {num_nodes * (num_nodes - 1)} possible edges; ask for fewer edges or more nodes")
    if feature_dim < 1 or num_classes < 2:
        raise DatasetError(f"--feature-dim {feature_dim} / --classes {num_classes}: need at least 1 feature and 2 classes")
    if num_classes > num_nodes:
        raise DatasetError(f"--classes {num_classes}: more classes than the {num_nodes} nodes")

    rng = np.random.default_rng(seed)
    keys, classes = _unique_pairs(num_edges // 2, num_nodes, num_classes, seed, rng)
    centroids = rng.normal(0.0, CENTROID_SCALE / np.sqrt(feature_dim), size=(num_classes, feature_dim))
    chunk = 1 << 22

    def edge_chunks():
        for lo in range(0, len(keys), chunk):
            block = keys[lo : lo + chunk]
            yield block // num_nodes, block % num_nodes, None

    node_chunk = max(1, (1 << 24) // (4 * feature_dim))

    def feature_chunks():
        for k, lo in enumerate(range(0, num_nodes, node_chunk)):
            noise = np.random.default_rng([seed, k]).standard_normal((min(node_chunk, num_nodes - lo), feature_dim), dtype=np.float32)
            yield noise + centroids[classes[lo : lo + node_chunk]].astype(np.float32)

    options.setdefault("split_fractions", (0.6, 0.2, 0.2))
    return build_dataset(
        out_dir,
        EdgeSource("synthetic edges", edge_chunks, len(keys), weighted=False),
        num_nodes=num_nodes,
        features=Source("synthetic features", feature_chunks, num_nodes),
        labels=Source.from_array("synthetic labels", classes),
        options=BuildOptions(undirected=True, num_classes=num_classes, seed=seed, **options),
        provenance={"importer": "synth", "model": "degree-corrected SBM", "num_nodes": num_nodes, "num_edges": num_edges,
                    "feature_dim": feature_dim, "num_classes": num_classes, "seed": seed, "p_intra": P_INTRA},
    )
