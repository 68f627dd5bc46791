"""Edge ids of sampled blocks and PyG's hop semantics (``hop_nodes="new"``), against the edge list and torch-sparse."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling import Block, CSCGraph, MiniBatch, NeighborSampler, SamplerInput
from sparsetrain.sampling.graph import EDGE_TYPE
from tests.pyg_backend import needs_torch_sparse

# sha256 of the default-settings batches below, computed on the tree before edge ids and ``hop_nodes`` were added
# (commit 0eb69c6): those changes must leave every default batch byte-identical.
DEFAULT_BATCHES_SHA256 = "9923da9c8c77b0fb71ec9f7d67c1436d30bd16a222c48bfdcee24cff092b4ba6"


def multigraph(num_nodes: int, num_edges: int, seed: int) -> tuple[torch.Tensor, CSCGraph]:
    """A directed graph with repeated edges and self-loops, in random edge order, and its CSCGraph."""
    rng = np.random.default_rng(seed)
    edge_index = torch.from_numpy(rng.integers(0, num_nodes, (2, num_edges)))
    return edge_index, CSCGraph.from_edge_index(edge_index, num_nodes)


def test_default_batches_are_byte_identical_to_before_edge_ids():
    rng = np.random.default_rng(17)
    n, e = 3000, 40000
    ei = torch.from_numpy(rng.integers(0, n, (2, e)))
    w = torch.from_numpy(rng.random(e).astype(np.float32))
    g = CSCGraph.from_edge_index(ei, n, w)
    digest = hashlib.sha256()
    for fanouts, kw in [
        ([5, 3, 2], {}),
        ([-1, -1], {}),
        ([15, 10, 5], {"replace": True}),
        ([4, 4], {"weighted": True}),
        ([40, 2], {}),
    ]:
        sampler = NeighborSampler(g, fanouts, seed=3, **kw)
        for key in range(4):
            seeds = torch.from_numpy(np.random.default_rng(key).permutation(n)[:64])
            mb = sampler.sample(SamplerInput(seeds, key=key))
            digest.update(mb.input_nodes.numpy().tobytes())
            for b in mb.blocks:
                digest.update(np.array([b.num_src, b.num_dst], np.int64).tobytes())
                digest.update(b.edge_index.contiguous().numpy().tobytes())
    assert digest.hexdigest() == DEFAULT_BATCHES_SHA256


@pytest.mark.parametrize("hop_nodes", ["all", "new"])
@pytest.mark.parametrize("kw", [{}, {"replace": True}])
def test_edge_ids_name_the_sampled_edges_in_the_callers_order(hop_nodes, kw):
    edge_index, graph = multigraph(400, 5000, seed=1)
    assert graph.edge_perm is not None
    mb = NeighborSampler(graph, [4, 3, -1], seed=2, hop_nodes=hop_nodes, **kw).sample(torch.tensor([0, 5, 77, 123]))
    for block in mb.blocks:
        assert block.edge_ids.dtype == torch.int64 and block.edge_ids.shape == (block.num_edges,)
        assert torch.equal(edge_index[:, block.edge_ids], mb.input_nodes[block.edge_index])
    if not kw:  # without replacement a hop never draws one edge twice
        assert all(b.edge_ids.unique().numel() == b.num_edges for b in mb.blocks)


def test_without_edge_perm_edge_ids_are_csc_positions():
    _, graph = multigraph(300, 3000, seed=3)
    plain = CSCGraph(graph.indptr, graph.indices)
    mb = NeighborSampler(plain, [5, 5], seed=0).sample(torch.arange(10))
    csc_edges = plain.to_edge_index()
    for block in mb.blocks:
        assert torch.equal(csc_edges[:, block.edge_ids], mb.input_nodes[block.edge_index])


def test_edge_perm_moves_with_the_graph_and_is_checked():
    _, graph = multigraph(50, 200, seed=4)
    assert torch.equal(graph.in_memory().edge_perm, graph.edge_perm)
    with pytest.raises(ValueError, match="edge_perm"):
        CSCGraph(graph.indptr, graph.indices, edge_perm=graph.edge_perm[:-1])
    with pytest.raises(ValueError, match="edge_perm"):
        CSCGraph(graph.indptr, graph.indices, edge_perm=graph.edge_perm.int())


def test_block_and_minibatch_to_move_edge_ids():
    block = Block({EDGE_TYPE: torch.tensor([[1, 2], [0, 0]])}, {"_N": 3}, {"_N": 1}, {EDGE_TYPE: torch.tensor([7, 4])})
    mb = MiniBatch({"_N": torch.tensor([5])}, {"_N": torch.tensor([5, 6, 7])}, [block], seed_type="_N")
    moved = mb.to("meta")
    assert moved.blocks[0].edge_ids.device.type == "meta" and moved.blocks[0].edge_index.device.type == "meta"
    assert moved.seeds.device.type == "meta" and moved.input_nodes.device.type == "meta"  # the one-type view
    assert Block({EDGE_TYPE: torch.zeros(2, 0, dtype=torch.int64)}, {"_N": 1}, {"_N": 1}).to("meta").edge_ids is None


def torch_sparse_sample(graph: CSCGraph, seeds: torch.Tensor, fanouts: list[int]):
    """PyG's reference sampler (torch-sparse, as NeighborLoader calls it): (node, row, col, edge) per the CSC graph."""
    import torch_sparse  # noqa: F401

    return torch.ops.torch_sparse.neighbor_sample(graph.indptr, graph.indices.long(), seeds, fanouts, False, True)


@needs_torch_sparse
@pytest.mark.parametrize("fanouts", [[-1, -1], [-1, -1, -1]])
def test_new_hop_nodes_with_all_neighbors_match_torch_sparse(fanouts):
    edge_index, graph = multigraph(500, 2500, seed=5)
    plain = CSCGraph(graph.indptr, graph.indices)  # torch-sparse reports CSC positions
    seeds = torch.tensor([3, 40, 41, 200, 499])
    mb = NeighborSampler(plain, fanouts, seed=0, hop_nodes="new").sample(seeds)
    node, row, col, edge = torch_sparse_sample(plain, seeds, fanouts)
    assert torch.equal(mb.input_nodes, node)  # same nodes in the same order: seeds, then first appearances hop by hop
    ours = torch.cat([b.edge_ids for b in reversed(mb.blocks)])
    assert sorted(ours.tolist()) == sorted(edge.tolist())
    mine = {(int(e), int(s), int(d)) for b in mb.blocks for e, s, d in zip(b.edge_ids, *b.edge_index)}
    assert mine == {(int(e), int(s), int(d)) for e, s, d in zip(edge, row, col)}


def test_new_hop_nodes_sample_only_for_the_newest_nodes():
    _, graph = multigraph(2000, 30000, seed=6)
    seeds = torch.tensor([1, 2, 3, 4])
    new = NeighborSampler(graph, [5, 4, 3], seed=9, hop_nodes="new").sample(SamplerInput(seeds, key=3))
    every = NeighborSampler(graph, [5, 4, 3], seed=9).sample(SamplerInput(seeds, key=3))
    first = 0
    for block in reversed(new.blocks):
        assert bool((block.edge_index[1] >= first).all())
        first = block.num_dst
    for outer, inner in zip(new.blocks, new.blocks[1:]):
        assert outer.num_dst == inner.num_src
    # the seeds' hop is the same draw either way; later hops draw the same edges for the nodes both sample for
    assert torch.equal(new.blocks[-1].edge_ids, every.blocks[-1].edge_ids)
    assert new.num_sampled_edges < every.num_sampled_edges


def test_hop_nodes_is_checked():
    _, graph = multigraph(20, 50, seed=7)
    with pytest.raises(InputError, match="hop_nodes"):
        NeighborSampler(graph, [2], hop_nodes="fresh")


def test_a_pickled_sampler_draws_the_same_batches():
    import pickle

    _, graph = multigraph(300, 3000, seed=8)
    sampler = NeighborSampler(graph, [4, 4], seed=6, hop_nodes="new")
    sampler.sample(torch.tensor([1, 2]))  # scratch and counters in use
    copy = pickle.loads(pickle.dumps(sampler))
    for key in range(3):
        a = sampler.sample(SamplerInput(torch.tensor([5, 9, 12]), key=key))
        b = copy.sample(SamplerInput(torch.tensor([5, 9, 12]), key=key))
        assert torch.equal(a.input_nodes, b.input_nodes) and all(
            torch.equal(x.edge_ids, y.edge_ids) for x, y in zip(a.blocks, b.blocks)
        )
