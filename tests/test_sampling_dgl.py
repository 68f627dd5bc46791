"""DGL views of our blocks, against DGL itself (run with .ci/venv-dgl/bin/python -m pytest -m dgl; .ci/run builds that
environment)."""

from __future__ import annotations

import pytest
import torch

from sparsetrain.sampling import CSCGraph, NeighborSampler

pytestmark = pytest.mark.dgl
dgl = pytest.importorskip("dgl")


@pytest.fixture(scope="module")
def cora(cora_data):
    graph = CSCGraph.from_edge_index(cora_data.edge_index, cora_data.num_nodes)
    src, dst = cora_data.edge_index
    g = dgl.graph((src, dst), num_nodes=cora_data.num_nodes)
    return cora_data, graph, g


def test_to_dgl_blocks_mirror_our_blocks(cora):
    _, graph, _ = cora
    seeds = torch.tensor([1, 2, 300])
    mb = NeighborSampler(graph, [5, 3], seed=0).sample(seeds)
    blocks = mb.to_dgl()
    assert len(blocks) == len(mb.blocks)
    for ours, theirs in zip(mb.blocks, blocks):
        assert (theirs.num_src_nodes(), theirs.num_dst_nodes(), theirs.num_edges()) == (
            ours.num_src,
            ours.num_dst,
            ours.num_edges,
        )
        src, dst = theirs.edges()
        assert torch.equal(torch.stack([src, dst]), ours.edge_index)
        assert torch.equal(theirs.srcdata[dgl.NID], mb.input_nodes[: ours.num_src])
        assert torch.equal(theirs.dstdata[dgl.NID], mb.input_nodes[: ours.num_dst])


def test_full_fanout_input_nodes_match_dgl_sampler(cora):
    _, graph, g = cora
    seeds = torch.tensor([0, 7, 2000])
    mb = NeighborSampler(graph, [-1, -1, -1], seed=0).sample(seeds)
    input_nodes, output_nodes, blocks = dgl.dataloading.NeighborSampler([-1, -1, -1]).sample_blocks(g, seeds)
    assert set(mb.input_nodes.tolist()) == set(input_nodes.tolist())
    assert [(b.num_src_nodes(), b.num_dst_nodes(), b.num_edges()) for b in blocks] == [
        (b.num_src, b.num_dst, b.num_edges) for b in mb.blocks
    ]


def test_dgl_sageconv_on_blocks_equals_full_graph(cora):
    from dgl.nn import SAGEConv

    data, graph, g = cora
    torch.manual_seed(0)
    convs = [SAGEConv(data.num_features, 16, "mean"), SAGEConv(16, 7, "mean")]
    seeds = torch.tensor([3, 30, 300, 2700])
    mb = NeighborSampler(graph, [-1, -1], seed=0).sample(seeds)
    with torch.no_grad():
        full = convs[1](g, convs[0](g, data.x).relu())
        h = data.x[mb.input_nodes]
        for i, (conv, block) in enumerate(zip(convs, mb.to_dgl())):
            h = conv(block, (h, h[: block.num_dst_nodes()]))
            h = h.relu() if i == 0 else h
    torch.testing.assert_close(h, full[seeds], rtol=1e-4, atol=1e-5)


def train_sage(data, make_blocks, epochs: int = 20) -> float:
    """Train a 2-layer DGL GraphSAGE on Cora's training nodes; test accuracy."""
    from dgl.nn import SAGEConv

    torch.manual_seed(0)
    convs = torch.nn.ModuleList([SAGEConv(data.num_features, 32, "mean"), SAGEConv(32, 7, "mean")])
    opt = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)

    def forward(seeds):
        input_nodes, blocks = make_blocks(seeds)
        h = data.x[input_nodes]
        for i, (conv, block) in enumerate(zip(convs, blocks)):
            h = conv(block, (h, h[: block.num_dst_nodes()]))
            h = h.relu() if i == 0 else h
        return h

    train = data.train_mask.nonzero().view(-1)
    for _ in range(epochs):
        for batch in train[torch.randperm(len(train))].split(70):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(forward(batch), data.y[batch]).backward()
            opt.step()
    test = data.test_mask.nonzero().view(-1)
    with torch.no_grad():
        return float((forward(test).argmax(-1) == data.y[test]).float().mean())


def test_train_dgl_sageconv_on_our_blocks_like_dgl_sampler(cora):
    data, graph, g = cora
    ours = NeighborSampler(graph, [10, 10], seed=0)

    def our_blocks(seeds):
        mb = ours.sample(seeds)
        return mb.input_nodes, mb.to_dgl()

    theirs = dgl.dataloading.NeighborSampler([10, 10])

    def dgl_blocks(seeds):
        input_nodes, _, blocks = theirs.sample_blocks(g, seeds)
        return input_nodes, blocks

    acc_ours, acc_dgl = train_sage(data, our_blocks), train_sage(data, dgl_blocks)
    print(f"test accuracy: ours {acc_ours:.3f}, DGL sampler {acc_dgl:.3f}")
    assert acc_ours > 0.7, acc_ours
    assert abs(acc_ours - acc_dgl) < 0.05, (acc_ours, acc_dgl)
