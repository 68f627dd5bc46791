"""PyG's sampler options in the fused sampler, against plain-Python references written from their definitions.

disjoint (one subgraph per seed), temporal (node or edge time, "uniform" / "last"), induced and bidirectional
subgraphs, the reversed graph (backward sampling), typed seeds of several types and typed link sampling.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from sparsetrain.errors import SparsetrainError
from sparsetrain.sampling import CSCGraph, EdgeSamplerInput, LinkNeighborSampler, NeighborSampler, SamplerInput


def random_edges(n=60, e=400, seed=0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, n, (2, e)))


def in_edges(edge_index: torch.Tensor) -> dict[int, list[int]]:
    """Node -> the edge ids into it."""
    into: dict[int, list[int]] = {}
    for e, v in enumerate(edge_index[1].tolist()):
        into.setdefault(v, []).append(e)
    return into


def reference_tree(edge_index, seed: int, hops: int, eligible=lambda e: True) -> tuple[set[int], Counter]:
    """PyG's hops from one seed with every (eligible) in-edge: (its nodes, its edges as (src, dst, id))."""
    into = in_edges(edge_index)
    seen, frontier, edges = {seed}, [seed], Counter()
    for _ in range(hops):
        new = []
        for v in frontier:
            for e in into.get(v, []):
                if not eligible(e):
                    continue
                u = int(edge_index[0, e])
                edges[(u, v, e)] += 1
                if u not in seen:
                    seen.add(u)
                    new.append(u)
        frontier = new
    return seen, edges


def batch_trees(mb) -> dict[int, tuple[set[int], Counter]]:
    """Per seed index, the nodes and (global src, global dst, id) edges of its subgraph in a disjoint batch."""
    trees: dict[int, tuple[set[int], Counter]] = {}
    for i in mb.batch.unique().tolist():
        trees[i] = ({int(v) for v in mb.input_nodes[mb.batch == i]}, Counter())
    for block in mb.blocks:
        src, dst = block.edge_index
        assert torch.equal(mb.batch[src], mb.batch[dst]), "an edge crosses two seeds' subgraphs"
        for s, d, e in zip(src.tolist(), dst.tolist(), block.edge_ids.tolist()):
            trees[int(mb.batch[d])][1][(int(mb.input_nodes[s]), int(mb.input_nodes[d]), e)] += 1
    return trees


# ---------- disjoint ----------
def test_disjoint_batches_are_one_full_tree_per_seed():
    ei = random_edges()
    graph = CSCGraph.from_edge_index(ei, 60)
    seeds = torch.tensor([3, 7, 3, 11])  # a repeated seed is its own subgraph
    mb = NeighborSampler(graph, [-1, -1], hop_nodes="new", disjoint=True, seed=1).sample(SamplerInput(seeds, key=0))
    assert torch.equal(mb.input_nodes[:4], seeds) and mb.batch[:4].tolist() == [0, 1, 2, 3]
    for i, (nodes, edges) in batch_trees(mb).items():
        assert (nodes, edges) == reference_tree(ei, int(seeds[i]), 2)


def test_disjoint_fanouts_cap_each_tree_and_draw_per_tree():
    ei = random_edges(40, 800, seed=2)
    graph = CSCGraph.from_edge_index(ei, 40)
    seeds = torch.tensor([5] * 6)
    sampler = NeighborSampler(graph, [3, 2], hop_nodes="new", disjoint=True, seed=3)
    mb = sampler.sample(SamplerInput(seeds, key=0))
    degree = torch.bincount(ei[1], minlength=40)
    first_hop = mb.blocks[-1]
    per_tree = Counter(int(mb.batch[d]) for d in first_hop.edge_index[1])
    assert all(per_tree[i] == min(3, int(degree[5])) for i in range(6))
    draws = {tuple(sorted(e[2] for e in edges)) for _, edges in batch_trees(mb).values()}
    assert len(draws) > 1  # the same seed in two subgraphs draws independently
    again = NeighborSampler(graph, [3, 2], hop_nodes="new", disjoint=True, seed=3).sample(SamplerInput(seeds, key=0))
    assert torch.equal(mb.input_nodes, again.input_nodes) and torch.equal(mb.batch, again.batch)


# ---------- temporal ----------
@pytest.mark.parametrize("given_time", [False, True])
def test_node_time_keeps_every_neighbor_no_later_than_the_seed(given_time):
    ei = random_edges(50, 500, seed=4)
    graph = CSCGraph.from_edge_index(ei, 50)
    node_time = torch.from_numpy(np.random.default_rng(5).integers(0, 20, 50))
    seeds = torch.tensor([1, 2, 30, 44])
    seed_time = torch.tensor([5, 19, 0, 10]) if given_time else node_time[seeds]
    sampler = NeighborSampler(graph, [-1, -1], hop_nodes="new", node_time=node_time, seed=0)
    mb = sampler.sample(SamplerInput(seeds, key=0, seed_time=seed_time if given_time else None))
    assert sampler.disjoint
    for i, (nodes, edges) in batch_trees(mb).items():
        t = int(seed_time[i])
        assert (nodes, edges) == reference_tree(ei, int(seeds[i]), 2, lambda e, t=t: int(node_time[ei[0, e]]) <= t)


def test_edge_time_last_takes_the_latest_eligible_edges():
    ei = random_edges(30, 600, seed=6)
    graph = CSCGraph.from_edge_index(ei, 30)
    edge_time = torch.from_numpy(np.random.default_rng(7).integers(0, 50, 600))
    seeds, seed_time = torch.tensor([0, 9, 17]), torch.tensor([25, 49, 10])
    mb = NeighborSampler(graph, [4], hop_nodes="new", edge_time=edge_time, temporal_strategy="last", seed=0).sample(
        SamplerInput(seeds, key=0, seed_time=seed_time))
    into = in_edges(ei)
    for i, (_, edges) in batch_trees(mb).items():
        eligible = [e for e in into.get(int(seeds[i]), []) if int(edge_time[e]) <= int(seed_time[i])]
        latest = sorted(eligible, key=lambda e: (int(edge_time[e]), int(ei[0, e]), e))[-4:]
        assert sorted(e for _, _, e in edges) == sorted(latest)


def test_edge_time_uniform_draws_only_eligible_edges_and_sorts_the_graph_once():
    ei = random_edges(30, 600, seed=8)
    graph = CSCGraph.from_edge_index(ei, 30)
    edge_time = torch.from_numpy(np.random.default_rng(9).integers(0, 50, 600))
    sampler = NeighborSampler(graph, [3, 3], hop_nodes="new", edge_time=edge_time, seed=0)
    assert sampler.graph is not graph and torch.equal(torch.sort(sampler.graph.edge_perm).values, torch.arange(600))
    seeds, seed_time = torch.arange(10), torch.full((10,), 20)
    mb = sampler.sample(SamplerInput(seeds, key=1, seed_time=seed_time))
    for block in mb.blocks:
        assert bool((edge_time[block.edge_ids] <= 20).all())
        assert torch.equal(ei[:, block.edge_ids], mb.input_nodes[block.edge_index])
    with pytest.raises(SparsetrainError, match="seed_time"):
        sampler.sample(seeds)  # edge-level time: the seeds' times must be given


def test_typed_temporal_sampling_filters_by_the_source_types_time():
    a_b = torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]])  # a -> b
    b_b = torch.tensor([[0, 1], [1, 0]])
    graph = CSCGraph.from_edge_index_dict({("a", "to", "b"): a_b, ("b", "to", "b"): b_b}, {"a": 4, "b": 2})
    node_time = {"a": torch.tensor([1, 5, 2, 8])}  # "b" has no time: b -> b edges are not filtered
    sampler = NeighborSampler(graph, [-1, -1], hop_nodes="new", node_time=node_time, seed_type="b")
    mb = sampler.sample(SamplerInput(torch.tensor([0, 1]), seed_time=torch.tensor([3, 3])))
    got = {(int(mb.input_nodes["a"][s]), int(mb.input_nodes["b"][d]), int(mb.batch["b"][d]))
           for b in mb.blocks for s, d in zip(*b.edge_index[("a", "to", "b")].tolist())}
    # seed 0 (b0): a0 (t1) yes, a1 (t5) no; via b1 (hop 2): a2 (t2) yes, a3 (t8) no; seed 1 (b1) alike
    assert got == {(0, 0, 0), (2, 1, 0), (2, 1, 1), (0, 0, 1)}
    with pytest.raises(SparsetrainError, match="no node_time"):
        sampler.sample(torch.tensor([0]))


# ---------- subgraph types ----------
@pytest.mark.parametrize("typed", [False, True])
def test_induced_subgraph_holds_every_edge_between_sampled_nodes(typed):
    ei = random_edges(40, 300, seed=10)
    if typed:
        graph = CSCGraph.from_edge_index_dict({("n", "r", "n"): ei}, {"n": 40})
    else:
        graph = CSCGraph.from_edge_index(ei, 40)
    sampler = NeighborSampler(graph, [2, 2], hop_nodes="new", subgraph_type="induced", seed_type="n" if typed else None,
                              seed=0)
    mb = sampler.sample(torch.tensor([1, 2, 3]))
    nodes = mb.input_nodes["n"] if typed else mb.input_nodes
    flat_index = mb.subgraph.edge_index[("n", "r", "n")] if typed else mb.subgraph.edge_index
    flat_ids = mb.subgraph.edge_ids[("n", "r", "n")] if typed else mb.subgraph.edge_ids
    inside = set(nodes.tolist())
    expected = sorted(e for e in range(ei.shape[1]) if int(ei[0, e]) in inside and int(ei[1, e]) in inside)
    assert sorted(flat_ids.tolist()) == expected
    assert torch.equal(ei[:, flat_ids], nodes[flat_index])
    # blocks: the subgraph, then (the last) its edges into the seeds
    last = mb.blocks[-1]
    last_index = last.edge_index[("n", "r", "n")] if typed else last.edge_index
    assert (last.num_dst["n"] if typed else last.num_dst) == 3 and bool((last_index[1] < 3).all())
    assert int((flat_index[1] < 3).sum()) == last_index.shape[1]


def test_bidirectional_subgraph_is_the_sampled_edges_and_their_reverses():
    ei = random_edges(40, 300, seed=11)
    graph = CSCGraph.from_edge_index(ei, 40)
    seeds = SamplerInput(torch.tensor([0, 5]), key=0)
    directional = NeighborSampler(graph, [3, 2], hop_nodes="new", seed=4).sample(seeds)
    both = NeighborSampler(graph, [3, 2], hop_nodes="new", seed=4, subgraph_type="bidirectional").sample(seeds)
    assert torch.equal(directional.input_nodes, both.input_nodes)  # the same draws
    pairs = {(int(s), int(d)) for b in directional.blocks for s, d in zip(*b.edge_index.tolist())}
    expected = sorted(pairs | {(d, s) for s, d in pairs}, key=lambda p: (p[1], p[0]))
    assert list(zip(*both.subgraph.edge_index.tolist())) == expected


def test_induced_with_disjoint_is_a_clear_error():
    graph = CSCGraph.from_edge_index(random_edges(), 60)
    with pytest.raises(SparsetrainError, match="induced"):
        NeighborSampler(graph, [2], subgraph_type="induced", disjoint=True)


# ---------- backward sampling: the reversed graph ----------
@pytest.mark.parametrize("typed", [False, True])
def test_reverse_is_the_graph_of_the_flipped_edges(typed):
    ei = random_edges(30, 200, seed=12)
    weights = torch.rand(200)
    if typed:
        src_dst = torch.stack([ei[0] % 10, ei[1]])  # a (10 nodes) -> b (30 nodes)
        sizes = {"a": 10, "b": 30}
        graph = CSCGraph.from_edge_index_dict({("a", "r", "b"): src_dst}, sizes, {("a", "r", "b"): weights})
        flipped = CSCGraph.from_edge_index_dict({("b", "r", "a"): src_dst.flip(0)}, sizes, {("b", "r", "a"): weights})
    else:
        graph, flipped = CSCGraph.from_edge_index(ei, 30, weights), CSCGraph.from_edge_index(ei.flip(0), 30, weights)
    reverse = graph.reverse()
    assert reverse.edge_types == flipped.edge_types and reverse.num_nodes == flipped.num_nodes
    assert torch.equal(reverse.indptr, flipped.indptr) and torch.equal(reverse.indices.long(), flipped.indices.long())
    assert torch.equal(reverse.edge_perm, flipped.edge_perm) and torch.equal(reverse.weights, flipped.weights)


# ---------- typed seeds and typed link sampling ----------
def typed_graph():
    rng = np.random.default_rng(13)
    writes = torch.from_numpy(np.stack([rng.integers(0, 30, 200), rng.integers(0, 20, 200)]))  # author -> paper
    cites = torch.from_numpy(rng.integers(0, 20, (2, 100)))
    edges = {("author", "writes", "paper"): writes, ("paper", "rev_writes", "author"): writes.flip(0),
             ("paper", "cites", "paper"): cites}
    return CSCGraph.from_edge_index_dict(edges, {"author": 30, "paper": 20}), writes


def test_seeds_of_two_types_in_one_batch():
    graph, _ = typed_graph()
    seeds = SamplerInput({"author": torch.tensor([4, 2]), "paper": torch.tensor([7])})
    mb = NeighborSampler(graph, [-1], hop_nodes="new", seed=0).sample(seeds)
    assert mb.seed_type is None and mb.input_nodes["author"][:2].tolist() == [4, 2]
    assert mb.input_nodes["paper"][:1].tolist() == [7]
    assert mb.blocks[-1].num_dst == {"author": 2, "paper": 1}
    writes = graph.relation(("author", "writes", "paper"))
    into_7 = writes.indices[int(writes.indptr[7]) : int(writes.indptr[8])].tolist()
    assert sorted(mb.input_nodes["author"][2:].tolist()) == sorted(set(into_7) - {4, 2})


@pytest.mark.parametrize("mode", [None, "binary", "triplet"])
@pytest.mark.parametrize("disjoint", [False, True])
def test_typed_link_sampling_labels_point_at_the_seed_edges(mode, disjoint):
    graph, writes = typed_graph()
    sampler = NeighborSampler(graph, [2, 2], hop_nodes="new", seed=1, disjoint=disjoint)
    link = LinkNeighborSampler(sampler, neg_sampling=mode, amount=2, edge_type=("author", "writes", "paper"))
    pick = torch.arange(0, 200, 17)
    mb = link.sample(EdgeSamplerInput(writes[0, pick], writes[1, pick], key=0, input_id=pick))
    authors, papers = mb.input_nodes["author"], mb.input_nodes["paper"]
    if mode == "triplet":
        assert torch.equal(authors[mb.src_index], writes[0, pick])
        assert torch.equal(papers[mb.dst_pos_index], writes[1, pick])
        assert mb.dst_neg_index.shape == (pick.numel(), 2) and int(mb.dst_neg_index.max()) < papers.numel()
    else:
        label = mb.edge_label_index
        positive = label[:, : pick.numel()]
        assert torch.equal(authors[positive[0]], writes[0, pick]) and torch.equal(papers[positive[1]], writes[1, pick])
        assert int(label[0].max()) < authors.numel() and int(label[1].max()) < papers.numel()
    if disjoint:
        assert int(mb.batch["author"].max()) < pick.numel() and int(mb.batch["paper"].max()) < pick.numel()


def test_typed_link_exclusion_removes_the_seed_edges_and_their_reverses():
    graph, writes = typed_graph()
    link = LinkNeighborSampler(NeighborSampler(graph, [-1, -1], hop_nodes="new", seed=0), neg_sampling=None,
                               edge_type=("author", "writes", "paper"), exclude="reverse")
    pick = torch.arange(0, 200, 9)
    mb = link.sample(EdgeSamplerInput(writes[0, pick], writes[1, pick], key=0))
    seed_pairs = set(zip(writes[0, pick].tolist(), writes[1, pick].tolist()))
    for block in mb.blocks:
        for et, flip in ((("author", "writes", "paper"), False), (("paper", "rev_writes", "author"), True)):
            s, d = block.edge_index[et]
            pairs = zip(mb.input_nodes[et[0]][s].tolist(), mb.input_nodes[et[2]][d].tolist())
            assert not seed_pairs & {(b, a) if flip else (a, b) for a, b in pairs}


def test_temporal_link_negatives_are_no_later_than_their_seed_edge():
    ei = random_edges(80, 400, seed=14)
    node_time = torch.arange(80)
    sampler = NeighborSampler(CSCGraph.from_edge_index(ei, 80), [-1], hop_nodes="new", node_time=node_time, seed=0)
    link = LinkNeighborSampler(sampler, neg_sampling="binary", amount=1.0)
    src, dst = torch.tensor([70, 60, 50]), torch.tensor([71, 65, 52])
    time = torch.tensor([75, 66, 55])
    mb = link.sample(EdgeSamplerInput(src, dst, key=0, time=time))
    negatives = mb.input_nodes[mb.edge_label_index[:, 3:]]
    assert bool((node_time[negatives] <= time).all())
    assert torch.equal(mb.seed_time, time.repeat(2))
    for i in range(6):  # each endpoint's subgraph stops at its edge's time
        assert bool((node_time[mb.input_nodes[mb.batch == i % 3]] <= time[i % 3]).all())


def test_the_engine_loader_takes_a_temporal_sampler():
    """The native options reach the engine's Loader unchanged: x of every node, y of every seed, the batch vector."""
    from sparsetrain.engine import Loader

    ei = random_edges(50, 400, seed=15)
    node_time = torch.arange(50)
    sampler = NeighborSampler(CSCGraph.from_edge_index(ei, 50), [3, 2], hop_nodes="new", node_time=node_time, seed=0)
    features, labels = torch.randn(50, 4), torch.arange(50) % 3
    seen = 0
    for mb in Loader(sampler, features, labels, torch.arange(10, 50), batch_size=16, shuffle=False, prefetch=0):
        assert torch.equal(mb.x, features[mb.input_nodes]) and torch.equal(mb.y, labels[mb.seeds])
        assert bool((node_time[mb.input_nodes] <= node_time[mb.seeds][mb.batch]).all())
        seen += mb.seeds.numel()
    assert seen == 40
