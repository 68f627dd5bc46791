"""Edge-seed sampling: label indices, negatives in the same pass, and leakage-free blocks checked against full-graph PyG
runs."""

import pytest
import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import to_undirected

from sparsetrain.engine import Loader
from sparsetrain.errors import InputError
from sparsetrain.sampling import (
    CSCGraph,
    EdgeSamplerInput,
    EdgeSeeds,
    LinkNeighborSampler,
    NegativeSampler,
    NeighborSampler,
)

N = 120


def _graph(seed=0, undirected=True):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, 700), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    ei = to_undirected(ei, num_nodes=N) if undirected else torch.unique(ei, dim=1)
    return CSCGraph.from_edge_index(ei, N), ei


def _global(mb, block):
    return mb.input_nodes[block.edge_index[0]], mb.input_nodes[block.edge_index[1]]


class PygSage(torch.nn.Module):
    def __init__(self, d_in=8, d_hid=16):
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(d_in, d_hid), SAGEConv(d_hid, d_hid)])

    def full(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            x = x.relu() if i == 0 else x
        return x

    def blocks(self, x, blocks):
        for i, (conv, (ei, (_, num_dst))) in enumerate(zip(self.convs, blocks)):
            x = conv((x, x[:num_dst]), ei)
            x = x.relu() if i == 0 else x
        return x


@pytest.mark.parametrize("exclude", ["self", "reverse"])
@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_all_neighbors_with_exclusion_equal_full_graph_without_seed_edges(exclude, mode):
    graph, ei = _graph()
    torch.manual_seed(0)
    model = PygSage().eval()
    x = torch.randn(N, 8)
    sampler = LinkNeighborSampler(
        NeighborSampler(graph, [-1, -1], seed=1), neg_sampling=mode, amount=2, exclude=exclude
    )
    pick = torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(2))[:25]
    src, dst = ei[0, pick], ei[1, pick]
    mb = sampler.sample(EdgeSamplerInput(src, dst, key=3))
    # the full graph without the seed edges (and their reverses in "reverse" mode)
    drop = set((src * N + dst).tolist()) | (set((dst * N + src).tolist()) if exclude == "reverse" else set())
    keep = torch.tensor([k not in drop for k in (ei[0] * N + ei[1]).tolist()])
    with torch.no_grad():
        full = model.full(x, ei[:, keep])
        h = model.blocks(x[mb.input_nodes], mb.to_pyg())
    if mode == "binary":
        u, v = mb.edge_label_index
    else:
        u = mb.src_index.repeat(2)
        v = torch.cat([mb.dst_pos_index, mb.dst_neg_index[:, 0]])
    score = (h[u] * h[v]).sum(-1)
    ref = (full[mb.seeds[u]] * full[mb.seeds[v]]).sum(-1)
    torch.testing.assert_close(score, ref, atol=1e-5, rtol=1e-5)
    for block in mb.blocks:  # no block holds a seed edge (or its reverse in that mode)
        gs, gd = _global(mb, block)
        assert not (set((gs * N + gd).tolist()) & drop)
    if exclude == "self":  # the reverses stay: the exclusion is exactly what was asked
        rev = set((dst * N + src).tolist())
        assert any(set((lambda g: (g[0] * N + g[1]).tolist())(_global(mb, b))) & rev for b in mb.blocks)


def test_binary_labels_and_negatives():
    graph, ei = _graph()
    sampler = LinkNeighborSampler(NeighborSampler(graph, [5, 5], seed=0), neg_sampling="binary", amount=1.5)
    src, dst = ei[:, :10]
    label = torch.arange(10) % 3 + 1
    mb = sampler.sample(EdgeSamplerInput(src, dst, label, key=0))
    assert mb.edge_label_index.shape == (2, 25)
    assert torch.equal(mb.seeds[mb.edge_label_index[:, :10]], torch.stack([src, dst]))
    assert torch.equal(mb.edge_label, torch.cat([label, torch.zeros(15, dtype=label.dtype)])) and mb.y is mb.edge_label
    assert torch.equal(mb.seeds, torch.unique(mb.seeds)) and torch.equal(mb.input_nodes[: len(mb.seeds)], mb.seeds)
    assert mb.blocks[-1].num_dst == len(mb.seeds)
    again = sampler.sample(EdgeSamplerInput(src, dst, label, key=0))
    assert torch.equal(again.edge_label_index, mb.edge_label_index) and torch.equal(again.input_nodes, mb.input_nodes)
    other = sampler.sample(EdgeSamplerInput(src, dst, label, key=1))
    assert not torch.equal(other.seeds[other.edge_label_index[:, 10:]], mb.seeds[mb.edge_label_index[:, 10:]])


def test_triplet_indices_and_strict_negatives():
    graph, ei = _graph()
    edges = set((ei[0] * N + ei[1]).tolist())
    strict = NegativeSampler(graph, strict=True, seed=4)
    sampler = LinkNeighborSampler(
        NeighborSampler(graph, [3], seed=0), neg_sampling="triplet", amount=3, negatives=strict
    )
    src, dst = ei[:, :12]
    mb = sampler.sample(EdgeSamplerInput(src, dst, key=5))
    assert torch.equal(mb.seeds[mb.src_index], src) and torch.equal(mb.seeds[mb.dst_pos_index], dst)
    assert mb.dst_neg_index.shape == (12, 3)
    neg = mb.seeds[mb.dst_neg_index]
    assert not (set((src[:, None] * N + neg).view(-1).tolist()) & edges)
    one = LinkNeighborSampler(NeighborSampler(graph, [3], seed=0), neg_sampling="triplet", amount=1).sample(
        EdgeSamplerInput(src, dst)
    )
    assert one.dst_neg_index.shape == (12,)


def test_loader_over_edge_seeds_runs_the_same_stages():
    graph, ei = _graph()
    x = torch.randn(N, 4)
    sampler = LinkNeighborSampler(NeighborSampler(graph, [4, 4], seed=0), exclude="reverse")
    seeds = EdgeSeeds.from_edge_index(ei[:, ::2])
    loader = Loader(sampler, x, None, seeds, batch_size=64, seed=3, prefetch=1)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-len(seeds) // 64)
    ids = torch.cat([mb.input_id for mb in batches])
    assert torch.equal(ids.sort().values, torch.arange(len(seeds)))  # every edge once, shuffled
    for mb in batches:
        assert torch.equal(mb.x, x[mb.input_nodes]) and mb.y is not None and mb.y.numel() == 2 * len(mb.input_id)
        pos = mb.seeds[mb.edge_label_index[:, : len(mb.input_id)]]
        assert torch.equal(pos, ei[:, ::2][:, mb.input_id])
    inline = list(Loader(sampler, x, None, seeds, batch_size=64, seed=3, prefetch=0))
    assert all(
        torch.equal(a.input_nodes, b.input_nodes) and torch.equal(a.edge_label_index, b.edge_label_index)
        for a, b in zip(batches, inline)
    )


def test_bad_input():
    graph, _ = _graph()
    base = NeighborSampler(graph, [2])
    with pytest.raises(InputError, match="exclude"):
        LinkNeighborSampler(base, exclude="both")
    with pytest.raises(InputError, match="whole number"):
        LinkNeighborSampler(base, neg_sampling="triplet", amount=1.5)
    with pytest.raises(InputError, match="outside"):
        LinkNeighborSampler(base).sample(EdgeSamplerInput(torch.tensor([0]), torch.tensor([N])))
    with pytest.raises(InputError, match="destinations"):
        EdgeSamplerInput(torch.tensor([0, 1]), torch.tensor([1]))
    with pytest.raises(InputError, match="integer"):
        EdgeSeeds(torch.tensor([0.5]), torch.tensor([1.0]))


def test_exclusion_scan_equals_the_device_agnostic_torch_path():
    from sparsetrain.sampling.edge_seeds import _kept

    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 40, (2, 5000), generator=g)
    keys = torch.unique(torch.randint(0, 20 * 20, (30,), generator=g))
    cpu, dev = _kept(edge_index, keys, 20, numba_scan=True), _kept(edge_index, keys, 20, numba_scan=False)
    assert cpu is not None and torch.equal(cpu, dev)
    s, d = edge_index[:, cpu]
    assert not bool(((s < 20) & (d < 20) & torch.isin(s * 20 + d, keys)).any())
    assert cpu.numel() == 5000 - int(
        ((edge_index[0] < 20) & (edge_index[1] < 20) & torch.isin(edge_index[0] * 20 + edge_index[1], keys)).sum()
    )
