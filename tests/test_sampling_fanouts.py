"""`Fanouts`, the one value for the per-hop neighbour counts: checked once, the same from the CLI, the library and
PyG."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling import CSCGraph, Fanouts, NeighborSampler
from sparsetrain.sampling.fanouts import MAX_COUNT

WRITES, CITES = ("author", "writes", "paper"), ("paper", "cites", "paper")


def homogeneous() -> CSCGraph:
    return CSCGraph(torch.tensor([0, 2, 3, 5]), torch.tensor([1, 2, 0, 0, 1], dtype=torch.int32))


def typed() -> CSCGraph:
    edges = {WRITES: torch.tensor([[0, 1, 1], [0, 0, 1]]), CITES: torch.tensor([[1, 0], [0, 1]])}
    return CSCGraph.from_edge_index_dict(edges, {"author": 2, "paper": 2})


def test_a_list_is_every_edge_types_counts_and_a_dict_fills_left_out_types_with_zero():
    fanouts = Fanouts([5, np.int64(-1), 0])
    assert fanouts.values == (5, -1, 0) and fanouts.num_hops == 3 and fanouts.as_list() == [5, -1, 0]
    assert fanouts.for_graph(homogeneous()) is fanouts and fanouts.for_graph(typed()) is fanouts
    per_type = Fanouts({WRITES: [3, 2]})
    assert per_type.num_hops == 2
    assert per_type.for_graph(typed()) == Fanouts({WRITES: [3, 2], CITES: [0, 0]})
    assert Fanouts([]).num_hops == 0 and Fanouts.of(fanouts) is fanouts and Fanouts(fanouts) == fanouts
    # a dict over the one edge type of a homogeneous graph is its list
    assert Fanouts({("_N", "_E", "_N"): [4]}).for_graph(homogeneous()) == Fanouts([4])


def test_the_kernels_array_is_hops_by_edge_types_in_the_graphs_order():
    graph = typed()
    assert graph.edge_types == [WRITES, CITES] or graph.edge_types == [CITES, WRITES]
    column = {et: k for k, et in enumerate(graph.edge_types)}
    array = Fanouts({WRITES: [3, 2]}).kernel_array(graph)
    assert array.dtype == np.int64 and array.shape == (2, 2)
    assert array[:, column[WRITES]].tolist() == [3, 2] and array[:, column[CITES]].tolist() == [0, 0]
    assert Fanouts([5, -1]).kernel_array(graph).tolist() == [[5, 5], [-1, -1]]
    assert Fanouts([5, -1]).kernel_array(homogeneous()).tolist() == [[5], [-1]]
    assert Fanouts([]).kernel_array(graph).shape == (0, 2)


@pytest.mark.parametrize(("bad", "match"), [
    ([5, -2], r"fanouts=\[5, -2\]; give a list of ints >= 0"),
    ([True], "give a list of ints"),
    ([1.5], "give a list of ints"),
    ("10,10", "give a list of ints"),
    (torch.tensor([5]), "give a list of ints"),
    ({WRITES: [1], CITES: [1, 1]}, r"different hop counts \[1, 2\]"),
    ({WRITES: [1, -3]}, r"\] for \(.author., .writes., .paper.\);"),
    ({}, "names no edge type"),
])
def test_bad_counts_are_one_sampling_error(bad, match):
    with pytest.raises(InputError, match=match):
        Fanouts(bad)


def test_an_edge_type_the_graph_lacks_is_refused_by_the_graph():
    with pytest.raises(InputError, match="which the graph does not have"):
        Fanouts({("paper", "likes", "paper"): [1]}).for_graph(typed())


def test_the_command_lines_spelling_accepts_what_the_constructor_accepts():
    assert Fanouts.parse("15,10,5") == Fanouts([15, 10, 5]) and Fanouts.parse("-1").as_list() == [-1]
    assert Fanouts.parse("5,0") == Fanouts([5, 0])  # 0: the hop adds no neighbours, as PyG's num_neighbors
    for text, match in (("a,b", "expected comma-separated integers"), ("", "expected comma-separated integers"),
                        ("-2", r"fanouts=\[-2\]; give a list of ints >= 0")):
        with pytest.raises(InputError, match=match):
            Fanouts.parse(text)


@pytest.mark.parametrize("count", [MAX_COUNT + 1, 2**63, np.uint64(2**63), 2**64])
def test_a_count_beyond_the_kernels_arithmetic_is_refused(count):
    assert Fanouts([MAX_COUNT]).values == (2**31 - 1,)
    with pytest.raises(InputError, match=rf"<= {MAX_COUNT} \(one per hop\)"):
        Fanouts([2, count])
    with pytest.raises(InputError, match=rf"<= {MAX_COUNT}"):
        Fanouts.parse(f"2,{int(count)}")


def test_a_zero_count_samples_no_neighbours_at_that_hop():
    seeds = torch.tensor([0, 2])  # in-neighbours: 0 <- {1, 2}, 2 <- {0, 1}
    pyg = NeighborSampler(homogeneous(), Fanouts.parse("0,2"), hop_nodes="new", seed=0).sample(seeds)
    assert [b.edge_index.shape[1] for b in pyg.blocks] == [0, 0] and pyg.input_nodes.tolist() == [0, 2]  # as PyG
    dgl = NeighborSampler(homogeneous(), [0, 2], seed=0).sample(seeds)  # hop 1 samples for every node found so far
    assert [b.edge_index.shape[1] for b in dgl.blocks] == [4, 0]
    mb = NeighborSampler(homogeneous(), [2, 0], seed=0).sample(torch.tensor([2]))
    assert mb.blocks[-1].edge_index.shape[1] == 2 and mb.blocks[0].edge_index.shape[1] == 0


def test_the_sampler_reads_a_fanouts_as_it_reads_the_list():
    graph = homogeneous()
    seeds = torch.tensor([0, 2])
    a = NeighborSampler(graph, Fanouts([1, 2]), seed=3).sample(seeds)
    b = NeighborSampler(graph, [1, 2], seed=3).sample(seeds)
    assert torch.equal(a.input_nodes, b.input_nodes)
    assert all(torch.equal(x.to_pyg()[0], y.to_pyg()[0]) for x, y in zip(a.blocks, b.blocks))
    sampler = NeighborSampler(typed(), {WRITES: [2]}, seed_type="paper")
    assert sampler.fanouts == Fanouts({WRITES: [2], CITES: [0]}) and sampler.num_hops == 1


def test_a_fanout_too_large_for_the_kernels_is_one_line_from_the_command_line(capsys):
    from sparsetrain.cli import main

    assert main(["train", "cora", "--fanout", "10,9223372036854775808"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: sparsetrain train: argument --fanout: fanouts=[10, 9223372036854775808]; give a list of "
                   f"ints >= 0 and <= {MAX_COUNT} (one per hop), or -1 for all neighbors"]
