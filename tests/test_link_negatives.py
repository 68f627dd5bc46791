"""Negative sampling: uniform draws pass a chi-square test, degree^0.75 draws follow their weights, strict ones are
never edges."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from sparsetrain.errors import InputError
from sparsetrain.sampling import CSCGraph
from sparsetrain.sampling.negatives import NegativeSampler


def _graph(n=50, e=600, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, n, (2, e), generator=g), dim=1)
    return CSCGraph.from_edge_index(ei, n), ei


def test_uniform_passes_chi_square():
    graph, _ = _graph()
    draws = NegativeSampler(graph, seed=1).destinations(torch.zeros(1000, dtype=torch.long), 50, key=0)
    counts = np.bincount(draws.numpy(), minlength=50)
    assert chisquare(counts).pvalue > 1e-3


def test_degree_distribution_follows_weights():
    graph, _ = _graph()
    draws = NegativeSampler(graph, distribution="degree", seed=2).destinations(torch.arange(50).repeat(400), 5, key=3)
    weights = graph.in_degrees().double().numpy() ** 0.75
    expected = weights / weights.sum() * len(draws)
    counts = np.bincount(draws.numpy(), minlength=50)
    keep = expected > 0
    assert counts[~keep].sum() == 0
    assert chisquare(counts[keep], expected[keep]).pvalue > 1e-3


@pytest.mark.parametrize("distribution", ["uniform", "degree"])
def test_strict_negatives_are_never_edges(distribution):
    graph, ei = _graph(e=1000)
    edges = set((ei[0] * 50 + ei[1]).tolist())
    src = torch.arange(50).repeat(20)
    dst = NegativeSampler(graph, distribution=distribution, strict=True, seed=0).destinations(src, 4, key=7)
    pairs = src.repeat_interleave(4) * 50 + dst
    assert not (set(pairs.tolist()) & edges) and bool((src.repeat_interleave(4) != dst).all())
    s, d = NegativeSampler(graph, strict=True, seed=0).pairs(500, key=1)
    assert not (set((s * 50 + d).tolist()) & edges)
    loose = NegativeSampler(graph, seed=0).destinations(src, 4, key=7)
    assert set((src.repeat_interleave(4) * 50 + loose).tolist()) & edges  # the check is not vacuous


def test_same_seed_same_negatives():
    graph, _ = _graph()
    src = torch.arange(50)
    a = NegativeSampler(graph, seed=5).destinations(src, 3, key=2)
    assert torch.equal(a, NegativeSampler(graph, seed=5).destinations(src, 3, key=2))
    assert not torch.equal(a, NegativeSampler(graph, seed=5).destinations(src, 3, key=3))
    assert not torch.equal(a, NegativeSampler(graph, seed=6).destinations(src, 3, key=2))


def test_bad_input():
    graph, _ = _graph()
    with pytest.raises(InputError, match="outside"):
        NegativeSampler(graph).destinations(torch.tensor([0, 50]))
    with pytest.raises(InputError, match="integer"):
        NegativeSampler(graph).destinations(torch.tensor([0.5]))
    with pytest.raises(InputError, match="distribution"):
        NegativeSampler(graph, distribution="zipf")
    full = CSCGraph.from_edge_index(torch.tensor([[1, 0], [0, 1]]), 2)  # every other node is a neighbor
    with pytest.raises(InputError, match="no strict negative"):
        NegativeSampler(full, strict=True).destinations(torch.tensor([0]), 1)
