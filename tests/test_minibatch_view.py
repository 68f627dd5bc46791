"""`MiniBatch` / `Block` hold their fields by type; the unsuffixed attributes are the user's one-type view."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from sparsetrain.errors import BackendError
from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE


def graph(n: int = 60, e: int = 400, seed: int = 0) -> tuple[CSCGraph, np.ndarray]:
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, n, (2, e))
    return CSCGraph.from_edge_index(torch.from_numpy(ei), n), ei


def test_a_homogeneous_batch_is_held_by_type_and_viewed_as_tensors():
    g, ei = graph()
    mb = NeighborSampler(g, [4, 3], seed=1).sample(SamplerInput(torch.tensor([3, 7, 11]), key=0))
    assert list(mb.input_nodes_by_type) == [NODE_TYPE] and mb.input_nodes is mb.input_nodes_by_type[NODE_TYPE]
    assert mb.seeds is mb.seeds_by_type[NODE_TYPE] and mb.seeds.tolist() == [3, 7, 11]
    assert mb.seed_type == NODE_TYPE and not mb.is_typed and mb.edge_types == [EDGE_TYPE]
    edges = {(int(s), int(d)) for s, d in ei.T}
    for block in mb.blocks:
        assert block.edge_index is block.edge_index_by_type[EDGE_TYPE] and block.edge_index.shape[0] == 2
        assert block.num_src == block.num_src_by_type[NODE_TYPE] and isinstance(block.num_dst, int)
        src, dst = mb.input_nodes[block.edge_index[0]], mb.input_nodes[block.edge_index[1]]
        assert all((int(s), int(d)) in edges for s, d in zip(src, dst))  # every sampled edge is a graph edge
        assert torch.equal(block.edge_index[1], block.edge_index[1].sort().values)  # dst_sorted, as it says
        assert block.to_pyg()[1].dst_sorted and tuple(block.to_pyg()[1]) == (block.num_src, block.num_dst)
    # the nodes first reached at each hop: the seeds, then the sources of the hop's edges not reached before
    reached, want = set(mb.seeds.tolist()), [3]
    for block in mb.blocks[::-1]:
        now = reached | set(mb.input_nodes[block.edge_index[0]].tolist())
        want.append(len(now) - len(reached))
        reached = now
    assert mb.nodes_per_hop == {NODE_TYPE: want}
    assert mb.edges_per_hop == {EDGE_TYPE: [b.edge_index.shape[1] for b in mb.blocks[::-1]]}
    copy = pickle.loads(pickle.dumps(mb))  # the counts travel as plain dicts (a loader's worker process)
    assert type(copy.nodes_per_hop) is dict and copy.nodes_per_hop == {NODE_TYPE: want}


def test_setters_take_either_shape_and_store_by_type():
    g, _ = graph()
    mb = NeighborSampler(g, [2], seed=0).sample(torch.tensor([1, 2]))
    x = torch.arange(mb.input_nodes.numel() * 2.0).view(-1, 2)
    mb.x = x
    assert mb.x_by_type == {NODE_TYPE: x} and mb.x is x
    mb.x = {NODE_TYPE: x + 1}
    assert torch.equal(mb.x, x + 1)
    mb.edge_attr = [torch.ones(b.num_edges, 3) for b in mb.blocks]
    assert list(mb.edge_attr_by_type[0]) == [EDGE_TYPE] and mb.edge_attr[0].shape == (mb.blocks[0].num_edges, 3)
    mb.x = None
    assert mb.x is None and mb.x_by_type is None


def test_a_hop_of_fanout_zero_views_as_no_edges_and_dict_seeds_of_the_one_type_are_the_same_batch():
    g, _ = graph()
    mb = NeighborSampler(g, [0, 3], seed=2).sample(SamplerInput(torch.tensor([5, 9]), key=4))
    empty = mb.blocks[-1]  # the seeds' hop, fanout 0
    assert EDGE_TYPE not in empty.edge_index_by_type
    assert empty.edge_index.shape == (2, 0) and empty.edge_ids.shape == (0,) and empty.num_src == 2
    sampler = NeighborSampler(g, [3, 2], seed=2)
    plain = sampler.sample(SamplerInput(torch.tensor([5, 9]), key=4))
    by_type = sampler.sample(SamplerInput({NODE_TYPE: torch.tensor([5, 9])}, key=4))
    assert by_type.seed_type is None and list(by_type.seeds) == [NODE_TYPE]  # the seeds keep the shape they came in
    assert torch.equal(plain.input_nodes, by_type.input_nodes)
    assert all(torch.equal(a.edge_index, b.edge_index) for a, b in zip(plain.blocks, by_type.blocks))


def test_a_typed_batch_views_as_dicts_and_padded_batches_refuse_it_once():
    sizes = {"a": 20, "b": 10}
    rng = np.random.default_rng(5)
    edges = {("a", "to", "b"): torch.from_numpy(np.stack([rng.integers(0, 20, 80), rng.integers(0, 10, 80)])),
             ("b", "to", "a"): torch.from_numpy(np.stack([rng.integers(0, 10, 80), rng.integers(0, 20, 80)]))}
    g = CSCGraph.from_edge_index_dict(edges, sizes)
    sampler = NeighborSampler(g, [3, 2], seed=0, seed_type="b")
    mb = sampler.sample(torch.tensor([1, 4]))
    assert mb.is_typed and mb.input_nodes is mb.input_nodes_by_type and set(mb.input_nodes) == {"a", "b"}
    assert mb.seeds.tolist() == [1, 4] and mb.seed_type == "b"
    assert isinstance(mb.blocks[-1].edge_index, dict) and mb.blocks[-1].num_dst == {"a": 0, "b": 2}
    for block in mb.blocks:  # dst_sorted holds per edge type, as a typed block's size says
        assert block.to_pyg()[1].dst_sorted
        assert all(torch.equal(ei[1], ei[1].sort().values) for ei in block.edge_index_by_type.values())
    assert sampler.padded_refusal() == "the graph has node types ['a', 'b']"
    with pytest.raises(BackendError, match="padded batches need the one-type graph, and the graph has node types"):
        sampler.sample_padded(torch.tensor([1]), out=None)
    assert NeighborSampler(graph()[0], [2]).padded_refusal() is None
