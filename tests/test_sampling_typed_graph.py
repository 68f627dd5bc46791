"""One graph class: a typed CSCGraph (flat columns per (edge type, dst node)) against the edge lists it was built
from."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling import CSCGraph, Fanouts
from sparsetrain.sampling.graph import TypeLayout

NUM_NODES = {"paper": 7, "author": 5, "topic": 3}


def edge_lists(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {
        ("author", "writes", "paper"): 20,
        ("paper", "cites", "paper"): 15,
        ("paper", "has", "topic"): 9,
        ("topic", "of", "paper"): 0,
    }
    return {et: torch.from_numpy(np.stack([rng.integers(0, NUM_NODES[et[0]], e), rng.integers(0, NUM_NODES[et[2]], e)]))
            for et, e in shapes.items()}


def csc_of(ei: torch.Tensor, n_dst: int, weights: torch.Tensor) -> CSCGraph:
    """A bipartite relation's CSC by NumPy: sorted by (dst, src), with a random edge_perm and the weights in CSC
    order."""
    src, dst = ei.numpy()
    order = np.lexsort((src, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n_dst))])
    perm = torch.from_numpy(np.random.default_rng(len(src)).permutation(len(src)))
    return CSCGraph(torch.from_numpy(indptr), torch.from_numpy(src[order].astype(np.int32)), weights[order], perm)


def pairs(csc: CSCGraph) -> list[tuple[int, int]]:
    dst = np.repeat(np.arange(csc.indptr.numel() - 1), np.diff(csc.indptr.numpy()))
    return list(zip(csc.indices.numpy().tolist(), dst.tolist()))


def test_from_edge_index_dict_holds_every_edge_type_with_its_edge_ids():
    edges = edge_lists()
    g = CSCGraph.from_edge_index_dict(edges, NUM_NODES)
    assert g.is_typed and g.node_types == list(NUM_NODES) and g.edge_types == list(edges)
    assert g.num_nodes == NUM_NODES and g.num_edges == 44
    assert g.num_edges_per_type == {et: ei.shape[1] for et, ei in edges.items()}
    assert g.indptr.numel() == 7 + 7 + 3 + 7 + 1  # one column per (edge type, dst node)
    assert list(g.edges) == list(edges) and len(g.edges) == 4
    for et, ei in edges.items():
        rel = g.edges[et]
        assert not rel.is_typed and rel.num_nodes == NUM_NODES[et[2]]
        assert sorted(pairs(rel)) == sorted(zip(ei[0].tolist(), ei[1].tolist()))
        # edge_perm: each CSC position's column in that edge type's edge_index
        assert pairs(rel) == list(zip(ei[0, rel.edge_perm].tolist(), ei[1, rel.edge_perm].tolist()))
    with pytest.raises(InputError, match="not in the graph"):
        g.relation(("paper", "nope", "paper"))
    with pytest.raises(KeyError):
        g.edges[("paper", "nope", "paper")]


def test_relations_are_views_and_from_relations_round_trips_weights_and_edge_ids():
    edges = edge_lists(1)
    rels = {}
    for et, ei in edges.items():
        w = torch.rand(ei.shape[1])
        rels[et] = csc_of(ei, NUM_NODES[et[2]], w)
    g = CSCGraph.from_relations(NUM_NODES, rels)
    for et, rel in rels.items():
        back = g.relation(et)
        for name in ("indptr", "indices", "weights", "edge_perm"):
            assert torch.equal(getattr(back, name).long() if name == "indices" else getattr(back, name),
                               getattr(rel, name).long() if name == "indices" else getattr(rel, name)), (et, name)
        if back.num_edges:  # zero-copy slices of the flat arrays
            assert back.indices.untyped_storage().data_ptr() == g.indices.untyped_storage().data_ptr()
    unweighted = dict(rels)
    unweighted[("paper", "cites", "paper")] = CSCGraph(
        rels[("paper", "cites", "paper")].indptr, rels[("paper", "cites", "paper")].indices
    )
    with pytest.raises(InputError, match="no edge weights but others do"):
        CSCGraph.from_relations(NUM_NODES, unweighted)
    with pytest.raises(InputError, match="columns but node type 'topic' has 3"):
        CSCGraph.from_relations(NUM_NODES, {("paper", "has", "topic"): rels[("paper", "cites", "paper")]})


def test_typed_wraps_flat_arrays_and_checks_their_shape():
    g = CSCGraph.from_edge_index_dict(edge_lists(2), NUM_NODES)
    wrapped = CSCGraph.typed(NUM_NODES, g.edge_types, g.indptr, g.indices, edge_perm=g.edge_perm)
    assert wrapped.indices.data_ptr() == g.indices.data_ptr() and wrapped.num_edges_per_type == g.num_edges_per_type
    with pytest.raises(InputError, match="needs 25"):
        CSCGraph.typed(NUM_NODES, g.edge_types, g.indptr[:-1], g.indices)
    with pytest.raises(InputError, match="names node type 'venue'"):
        CSCGraph.typed(NUM_NODES, [("venue", "r", "paper")], torch.zeros(8, dtype=torch.int64), g.indices[:0])
    with pytest.raises(InputError, match="one edge type.s edges.*relation"):
        g.out_degrees()
    moved = g.in_memory()
    assert moved.is_typed and moved.num_nodes == NUM_NODES and torch.equal(moved.indices, g.indices)
    assert "edge_types=4" in repr(g)


def test_a_homogeneous_graph_is_the_one_type_case():
    ei = edge_lists()[("paper", "cites", "paper")]
    g = CSCGraph.from_edge_index(ei, 7)
    assert not g.is_typed and g.num_nodes == 7 and g.node_types == ["_N"] and g.edge_types == [("_N", "_E", "_N")]
    assert g.num_edges_per_type == {("_N", "_E", "_N"): 15}
    assert g.types == TypeLayout({"_N": 7}, (("_N", "_E", "_N"),)) and g.type_layout is g.types
    rel = g.relation(("_N", "_E", "_N"))  # the one relation holds the graph's own arrays (no copy)
    assert not rel.is_typed and list(g.edges) == [("_N", "_E", "_N")] and rel.types == g.types
    assert all(getattr(rel, f).data_ptr() == getattr(g, f).data_ptr() for f in ("indptr", "indices", "edge_perm"))
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    sampler = NeighborSampler(g, {("_N", "_E", "_N"): [2]}, seed=0)
    assert sampler.fanouts == Fanouts([2])
    assert sampler.sample(SamplerInput(torch.tensor([1]), node_type="_N")).seeds.tolist() == [1]
    with pytest.raises(InputError, match=r"node type 'paper' of the seeds is not a node type of the graph \(\['_N'"):
        sampler.sample(SamplerInput(torch.tensor([1]), node_type="paper"))


def test_typed_sampling_has_every_option_of_the_homogeneous_one():
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    # paper 0 has four 'author' in-edges of weights 1, 2, 0, 5 and two 'paper' in-edges of weights 1, 1
    edges = {
        ("author", "writes", "paper"): torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0]]),
        ("paper", "cites", "paper"): torch.tensor([[1, 2], [0, 0]]),
    }
    weights = torch.tensor([1.0, 2.0, 0.0, 5.0, 1.0, 1.0])  # CSC order: per edge type, by (dst, src)
    g = CSCGraph.from_edge_index_dict(edges, {"paper": 3, "author": 4})
    g = CSCGraph.typed(g.num_nodes, g.edge_types, g.indptr, g.indices, weights=weights, edge_perm=g.edge_perm)
    writes = ("author", "writes", "paper")
    counts = np.zeros(4)
    sampler = NeighborSampler(g, [3], replace=True, weighted=True, seed_type="paper", seed=0)
    for key in range(2000):
        block = sampler.sample(SamplerInput(torch.tensor([0]), key=key)).blocks[0]
        assert block.edge_index[writes].shape[1] == 3 and block.edge_index[("paper", "cites", "paper")].shape[1] == 3
        np.add.at(counts, block.edge_ids[writes].numpy(), 1)  # edge ids: columns of the edge_index above = author ids
    np.testing.assert_allclose(counts / counts.sum(), [1 / 8, 2 / 8, 0, 5 / 8], atol=0.02)
    without = NeighborSampler(g, [3], weighted=True, seed_type="paper", seed=0)
    for key in range(50):
        ids = without.sample(SamplerInput(torch.tensor([0]), key=key)).blocks[0].edge_ids[writes]
        assert sorted(ids.tolist()) == [0, 1, 3]  # the three positive-weight edges, each once
    uniform = NeighborSampler(g, {writes: [2]}, replace=True, seed_type="paper", seed=0, hop_nodes="new")
    block = uniform.sample(SamplerInput(torch.tensor([0, 1]), key=0)).blocks[0]
    assert list(block.edge_index) == [writes] and block.edge_index[writes].shape[1] == 2  # paper 1 has no in-edges
    with pytest.raises(InputError, match="no edge weights"):
        NeighborSampler(CSCGraph.from_edge_index_dict(edges, {"paper": 3, "author": 4}), [1], weighted=True)


def test_one_relation_methods_read_a_one_edge_type_graph_and_reverse_keeps_the_dtype():
    """A graph of one edge type, typed or not, answers ``out_degrees`` / ``to_edge_index`` / ``columns`` (NumPy's
    counts of the same edges); ``reverse`` flips every edge (NumPy's sort) and keeps ``indices``' dtype;
    ``num_sources`` sets the reversed graph's columns; one edge type's CSCGraph (typed included) is a relation
    ``from_relations`` takes."""
    ei = edge_lists(3)[("author", "writes", "paper")]
    src, dst = ei.numpy()
    one = CSCGraph.from_edge_index_dict({("author", "writes", "paper"): ei}, {"author": 5, "paper": 7})
    assert one.is_typed and one.num_nodes == {"author": 5, "paper": 7}
    assert one.out_degrees().tolist() == np.bincount(src, minlength=5).tolist()
    got = one.to_edge_index().numpy()
    assert sorted(zip(got[0].tolist(), got[1].tolist())) == sorted(zip(src.tolist(), dst.tolist()))
    counts, neighbors = one.columns(0, 7)
    assert counts.tolist() == np.bincount(dst, minlength=7).tolist() and int(neighbors.max()) < 5
    both = CSCGraph.from_relations({"author": 5, "paper": 7}, {("author", "writes", "paper"): one})
    assert torch.equal(both.indices, one.indices) and torch.equal(both.indptr, one.indptr)

    homo = CSCGraph(one.indptr, one.indices.to(torch.int64))
    flipped = homo.reverse(num_sources=5)
    assert not flipped.is_typed and flipped.num_nodes == 5 and flipped.indices.dtype == torch.int64
    f_src, f_dst = flipped.to_edge_index().numpy()
    want = sorted(zip(dst.tolist(), src.tolist()))
    assert sorted(zip(f_src.tolist(), f_dst.tolist())) == want
    assert flipped.indptr.tolist() == np.concatenate([[0], np.cumsum(np.bincount(src, minlength=5))]).tolist()
    typed = CSCGraph.from_edge_index_dict(edge_lists(3), NUM_NODES)
    with pytest.raises(InputError, match="one edge type's edges and the graph has 4"):
        typed.reverse(num_sources=3)


def test_type_named_names_a_type_and_nothing_for_the_one_type():
    from sparsetrain.sampling.graph import type_named

    assert type_named("_N") == "" and type_named(("_N", "_E", "_N"), unnamed="the graph") == "the graph"
    assert type_named("paper") == "node type 'paper': " and type_named(("a", "r", "b"), end=" ") == \
        "edge type ('a', 'r', 'b') "


def test_seeds_outside_their_type_name_the_type_and_nothing_on_a_homogeneous_graph():
    from sparsetrain.sampling import NeighborSampler

    typed = CSCGraph.from_edge_index_dict(edge_lists(), NUM_NODES)
    with pytest.raises(InputError, match=r"^node type 'topic': seeds has ids outside \[0, 3\); seeds must be node"):
        NeighborSampler(typed, [2], seed_type="topic").sample(torch.tensor([5]))
    homo = CSCGraph.from_edge_index(edge_lists()[("paper", "cites", "paper")], 7)
    with pytest.raises(InputError, match=r"^seeds has ids outside \[0, 7\); seeds must be node ids of this graph$"):
        NeighborSampler(homo, [2]).sample(torch.tensor([9]))
