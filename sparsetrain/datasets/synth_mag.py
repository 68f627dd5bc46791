"""A synthetic ogbn-mag-shaped typed graph with learnable paper labels (``synthesize(typed=True)``, ``synth --typed``).

Node types and relations as ogbn-mag's (counts scaled by ``scale``; 1.0 gives ogbn-mag's 1.94M nodes and
21.1M edges, plus the reverse relations): papers (with features and a class each), authors, institutions
and fields of study (no features, a hidden class each). Every edge picks its source with a power-law skew and its
target, with probability ``P_SAME``, among the targets of its source's class, else among all; targets are
chosen with a power-law skew (rank ``floor(n * u ** SKEW)``), so degrees are heavy-tailed. Paper features
are the class centroid plus Gaussian noise: they predict the class moderately, and the class of cited
papers, co-authors' papers and topics predicts it well, so a typed GNN learns the labels.

Deterministic for a seed: every chunk of every relation draws from its own ``numpy`` generator seeded
by (seed, relation, chunk), and edges and features are streamed chunk by chunk into the writer.
"""

from __future__ import annotations

import numpy as np

from sparsetrain.datasets.sources import EdgeSource, GraphInput, Source
from sparsetrain.errors import DatasetError

MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740, "field_of_study": 59_965}
MAG_EDGES = {
    ("author", "affiliated_with", "institution"): 1_043_998,
    ("author", "writes", "paper"): 7_145_660,
    ("paper", "cites", "paper"): 5_416_271,
    ("paper", "has_topic", "field_of_study"): 7_505_078,
}
P_SAME = 0.8
SKEW = 2.0
SRC_SKEW = 1.5
_SCATTER = 2_654_435_761  # a prime: i -> i * _SCATTER mod n is a bijection for every n it does not divide
CENTROID_SCALE = 0.08  # features alone separate classes weakly; the neighbors' classes carry the signal
CHUNK = 1 << 20
MAG_SPLIT = (0.85, 0.09, 0.06)  # ogbn-mag's train/valid/test shares of the papers


def _classes(seed: int, salt: int, n: int, num_classes: int) -> np.ndarray:
    return np.random.default_rng([seed, 1000 + salt]).integers(0, num_classes, n)


class _ByClass:
    """Node ids grouped by class, for picking a node of a given class with a power-law skew."""

    def __init__(self, classes: np.ndarray, num_classes: int) -> None:
        self.order = np.argsort(classes, kind="stable")
        counts = np.bincount(classes, minlength=num_classes)
        self.start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.count = counts
        self.n = len(classes)

    def pick(self, rng: np.random.Generator, wanted: np.ndarray) -> np.ndarray:
        u = rng.random(len(wanted)) ** SKEW
        same = (rng.random(len(wanted)) < P_SAME) & (self.count[wanted] > 0)
        out = np.floor(u * self.n).astype(np.int64)  # skewed over all ids
        c = wanted[same]
        out[same] = self.order[self.start[c] + np.floor(u[same] * self.count[c]).astype(np.int64)]
        return out


def mag_graph(scale: float, num_classes: int, feature_dim: int, seed: int) -> GraphInput:
    """The ogbn-mag-shaped graph (see the module docstring) as the writer takes it; the reverse edge types, the
    split (``MAG_SPLIT``) and the class count are build options."""
    graph = typed_graph(MAG_NODES, MAG_EDGES, scale, num_classes, feature_dim, seed, "ogbn-mag's size")
    graph.provenance = {"generator": "synth-typed", "scale": scale, "classes": num_classes, "seed": seed}
    return graph


def typed_graph(nodes: dict[str, int], edge_counts: dict, scale: float, num_classes: int, feature_dim: int, seed: int,
                unit: str, featured: tuple[str, ...] = ("paper",)) -> GraphInput:
    """A typed graph of ``nodes`` and ``edge_counts`` (scaled by ``scale``; ``unit`` says what 1.0 is) drawn as the
    module docstring says; ``featured`` node types get features (centroid of their hidden class plus noise), papers
    a label."""
    if not scale > 0:
        raise DatasetError(f"scale={scale}; give a positive number (1.0 is {unit})")
    if num_classes < 2 or feature_dim < 1:
        raise DatasetError(f"classes={num_classes}, feature dim={feature_dim}; need at least 2 classes and 1 feature")
    counts = {t: max(2, round(n * scale)) for t, n in nodes.items()}
    salts = {t: k for k, t in enumerate(sorted(nodes))}
    classes = {t: _classes(seed, salts[t], n, num_classes) for t, n in counts.items()}
    by_class = {t: _ByClass(c, num_classes) for t, c in classes.items()}

    def edges(k: int, et, num_edges: int):
        src_t, _, dst_t = et

        def chunks():
            for i, lo in enumerate(range(0, num_edges, CHUNK)):
                rng = np.random.default_rng([seed, k, i])
                size = min(CHUNK, num_edges - lo)
                n = counts[src_t]
                # skewed sources too (heavy-tailed out-degrees), the hubs scattered over the ids by a multiplicative
                # hash
                src = (np.floor(rng.random(size) ** SRC_SKEW * n).astype(np.int64) * _SCATTER) % n
                yield src, by_class[dst_t].pick(rng, classes[src_t][src]), None

        return EdgeSource(f"synthetic {et}", chunks, num_edges)

    edge_types = {et: edges(k, et, max(1, round(n * scale))) for k, (et, n) in enumerate(edge_counts.items())}
    centroids = np.random.default_rng([seed, 7]).standard_normal((num_classes, feature_dim)).astype(np.float32)
    centroids *= CENTROID_SCALE

    def features(t: str):
        def chunks():
            for i, lo in enumerate(range(0, counts[t], CHUNK)):
                c = classes[t][lo : lo + CHUNK]
                stream = [seed, 8, i] if t == "paper" else [seed, 9 + salts[t], i]
                noise = np.random.default_rng(stream).standard_normal((len(c), feature_dim)).astype(np.float32)
                yield centroids[c] + noise

        return Source(f"synthetic {t} features", chunks, counts[t])

    return GraphInput(edge_types, counts, features={t: features(t) for t in featured},
                      labels={"paper": Source.from_array("synthetic paper labels", classes["paper"])},
                      target_type="paper")
