"""`Fanouts`, the one value for the per-hop neighbour counts: checked once, the same from the CLI, the library and PyG."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsetrain.sampling import CSCGraph, Fanouts, NeighborSampler, SamplingError
from sparsetrain.sampling.layout import normalize_fanouts

WRITES, CITES = ("author", "writes", "paper"), ("paper", "cites", "paper")


def homogeneous() -> CSCGraph:
    return CSCGraph(torch.tensor([0, 2, 3, 5]), torch.tensor([1, 2, 0, 0, 1], dtype=torch.int32))


def typed() -> CSCGraph:
    edges = {WRITES: torch.tensor([[0, 1, 1], [0, 0, 1]]), CITES: torch.tensor([[1, 0], [0, 1]])}
    return CSCGraph.from_edge_index_dict(edges, {"author": 2, "paper": 2})


def test_a_list_is_every_edge_types_counts_and_a_dict_fills_left_out_types_with_zero():
    fanouts = Fanouts([5, np.int64(-1), 0])
    assert fanouts.values == (5, -1, 0) and fanouts.num_hops == 3 and fanouts.as_list() == [5, -1, 0]
    assert fanouts.for_graph(homogeneous()) == [5, -1, 0] == fanouts.for_graph(typed())
    per_type = Fanouts({WRITES: [3, 2]})
    assert per_type.num_hops == 2
    assert per_type.for_graph(typed()) == {WRITES: [3, 2], CITES: [0, 0]}
    assert Fanouts([]).num_hops == 0 and Fanouts.of(fanouts) is fanouts and Fanouts(fanouts) == fanouts
    # a dict over the one edge type of a homogeneous graph is its list
    assert Fanouts({("_N", "_E", "_N"): [4]}).for_graph(homogeneous()) == [4]


@pytest.mark.parametrize(("bad", "match"), [
    ([5, -2], r"fanouts=\[5, -2\]; give a list of ints >= 0"),
    ([True], "give a list of ints"),
    ([1.5], "give a list of ints"),
    ("10,10", "give a list of ints"),
    (torch.tensor([5]), "give a list of ints"),
    ({WRITES: [1], CITES: [1, 1]}, r"different hop counts \[1, 2\]"),
    ({WRITES: [1, -3]}, r"\] for \(.author., .writes., .paper.\);"),
])
def test_bad_counts_are_one_sampling_error(bad, match):
    with pytest.raises(SamplingError, match=match):
        Fanouts(bad)


def test_an_edge_type_the_graph_lacks_is_refused_by_the_graph():
    with pytest.raises(SamplingError, match="which the graph does not have"):
        Fanouts({("paper", "likes", "paper"): [1]}).for_graph(typed())


def test_the_command_lines_spelling_is_stricter_no_zero_and_no_empty_list():
    assert Fanouts.parse("15,10,5") == Fanouts([15, 10, 5]) and Fanouts.parse("-1").as_list() == [-1]
    for text, match in (("a,b", "expected comma-separated integers"), ("5,0", "positive number or -1"),
                        ("-2", "positive number or -1")):
        with pytest.raises(SamplingError, match=match):
            Fanouts.parse(text)


def test_the_sampler_reads_a_fanouts_as_it_reads_the_list():
    graph = homogeneous()
    seeds = torch.tensor([0, 2])
    a = NeighborSampler(graph, Fanouts([1, 2]), seed=3).sample(seeds)
    b = NeighborSampler(graph, [1, 2], seed=3).sample(seeds)
    assert torch.equal(a.input_nodes, b.input_nodes)
    assert all(torch.equal(x.to_pyg()[0], y.to_pyg()[0]) for x, y in zip(a.blocks, b.blocks))
    assert normalize_fanouts(typed(), {WRITES: [2]}) == {WRITES: [2], CITES: [0]}
