"""The fused typed sampler against PyG: same typed node and edge sets as PyG's NeighborLoader, exact model outputs."""

import random

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

import sparsetrain.pyg as stp
from sparsetrain.errors import SparsetrainError
from sparsetrain.pyg.graph import graph_of
from sparsetrain.sampling import NeighborSampler, SamplerInput
from tests.pyg_backend import needs_pyg_sampler


def fake_graph(seed=0, nodes=120):
    import torch_geometric.transforms as T
    from torch_geometric.datasets import FakeHeteroDataset

    random.seed(seed)  # FakeHeteroDataset picks edge types and sizes with Python's random
    torch.manual_seed(seed)
    data = FakeHeteroDataset(
        num_graphs=1, num_node_types=3, num_edge_types=5, avg_num_nodes=nodes, num_classes=3, task="node"
    )[0]
    return T.ToUndirected()(data)  # every node type then has in-edges, as a to_hetero model needs


def global_edges(node, row, col, et):
    return sorted(zip(node[et[0]][row].tolist(), node[et[2]][col].tolist()))


@needs_pyg_sampler
def test_same_typed_node_and_edge_sets_as_pygs_neighbor_loader():
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.loader.utils import filter_hetero_data

    data = fake_graph()
    seeds = torch.arange(0, data["v0"].num_nodes, 3)
    fanouts = {et: [-1, -1] for et in data.edge_types}
    theirs = NeighborLoader(data, num_neighbors=fanouts, input_nodes=("v0", seeds), batch_size=16, shuffle=False)
    sampler = stp.PyGNeighborSampler(data, fanouts, seed=0)
    for batch in theirs:
        ids = batch["v0"].input_id
        out = sampler.sample_from_nodes(NodeSamplerInput(ids, seeds[ids], input_type="v0"))
        assert torch.equal(out.node["v0"][: batch["v0"].batch_size], batch["v0"].n_id[: batch["v0"].batch_size])
        for t in data.node_types:
            assert sorted(out.node[t].tolist()) == sorted(batch[t].n_id.tolist()), t
            assert sum(out.num_sampled_nodes[t]) == batch[t].num_nodes
        for et in data.edge_types:
            ours = global_edges(out.node, out.row[et], out.col[et], et)
            ei = batch[et].edge_index
            assert ours == global_edges({k: batch[k].n_id for k in data.node_types}, ei[0], ei[1], et), et
            assert sorted(out.edge[et].tolist()) == sorted(batch[et].e_id.tolist())
            # edge ids are columns of the HeteroData's edge_index
            full = data[et].edge_index[:, out.edge[et]]
            assert torch.equal(full[0], out.node[et[0]][out.row[et]]) and torch.equal(
                full[1], out.node[et[2]][out.col[et]]
            )
        mine = filter_hetero_data(data, dict(out.node), dict(out.row), dict(out.col), dict(out.edge))
        assert mine["v0"].x.shape == batch["v0"].x.shape


@needs_pyg_sampler
def test_sparsetrain_pyg_neighbor_loader_yields_pygs_hetero_batches():
    from torch_geometric.loader import NeighborLoader as PygLoader

    from sparsetrain.pyg import NeighborLoader

    data = fake_graph(seed=5)
    seeds = torch.arange(0, data["v0"].num_nodes, 2)
    for num_neighbors in ([-1, -1], {et: [-1, -1] for et in data.edge_types}):
        ours = NeighborLoader(
            data, num_neighbors=num_neighbors, input_nodes=("v0", seeds), batch_size=20, shuffle=False
        )
        theirs = PygLoader(data, num_neighbors=num_neighbors, input_nodes=("v0", seeds), batch_size=20, shuffle=False)
        for a, b in zip(ours, theirs, strict=True):
            assert a["v0"].batch_size == b["v0"].batch_size and torch.equal(a["v0"].input_id, b["v0"].input_id)
            assert torch.equal(a["v0"].n_id[: a["v0"].batch_size], b["v0"].n_id[: b["v0"].batch_size])
            for t in data.node_types:
                assert sorted(a[t].n_id.tolist()) == sorted(b[t].n_id.tolist())
                assert torch.equal(a[t].x, data[t].x[a[t].n_id])
            for et in data.edge_types:
                assert global_edges({k: a[k].n_id for k in data.node_types}, *a[et].edge_index, et) == \
                    global_edges({k: b[k].n_id for k in data.node_types}, *b[et].edge_index, et)
                assert sorted(a[et].e_id.tolist()) == sorted(b[et].e_id.tolist())


def test_pyg_hetero_model_on_sparsetrain_batches_equals_full_graph():
    from torch_geometric.nn import SAGEConv, to_hetero

    from sparsetrain.pyg import NeighborLoader

    data = fake_graph(seed=1)

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 16)
            self.conv2 = SAGEConv((-1, -1), 7)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    model = to_hetero(GNN(), data.metadata(), aggr="sum")
    with torch.no_grad():
        full = model(data.x_dict, data.edge_index_dict)["v0"]
        seeds = torch.randperm(data["v0"].num_nodes)[:40]
        for batch in NeighborLoader(
            data, num_neighbors=[-1, -1], input_nodes=("v0", seeds), batch_size=13, shuffle=False
        ):
            n = batch["v0"].batch_size
            got = model(batch.x_dict, batch.edge_index_dict)["v0"][:n]
            torch.testing.assert_close(got, full[batch["v0"].n_id[:n]], atol=1e-5, rtol=1e-5)


def test_dgl_semantics_blocks_and_fanout_caps_and_determinism():
    data = fake_graph(seed=2, nodes=300)
    graph = graph_of(data).graph
    fanouts = {et: [2, 3] for et in data.edge_types}
    fanouts[data.edge_types[0]] = [0, 1]
    sampler = NeighborSampler(graph, fanouts, seed_type="v0", seed=5)
    seeds = torch.arange(20)
    mb = sampler.sample(SamplerInput(seeds, key=4))
    again = NeighborSampler(graph, fanouts, seed_type="v0", seed=5).sample(SamplerInput(seeds, key=4))
    other = sampler.sample(SamplerInput(seeds, key=5))
    assert all(torch.equal(mb.input_nodes[t], again.input_nodes[t]) for t in data.node_types)
    assert any(not torch.equal(mb.input_nodes[t], other.input_nodes[t]) for t in data.node_types)
    assert torch.equal(mb.input_nodes["v0"][:20], seeds)
    for h, block in enumerate(reversed(mb.blocks)):  # hop h + 1 samples for every node found so far (DGL)
        for et, ei in block.edge_index.items():
            src, dst = ei
            assert bool((dst < block.num_dst[et[2]]).all()) and bool((src < block.num_src[et[0]]).all())
            per_dst = torch.bincount(dst, minlength=block.num_dst[et[2]])
            deg = graph.edges[et].in_degrees()[mb.input_nodes[et[2]][: block.num_dst[et[2]]]]
            assert torch.equal(per_dst, torch.minimum(deg, torch.tensor(fanouts[et][h])))
            # every sampled edge is the HeteroData edge its id names (a column of that edge type's edge_index)
            full = data[et].edge_index[:, block.edge_ids[et]]
            assert torch.equal(full[0], mb.input_nodes[et[0]][src]) and torch.equal(full[1], mb.input_nodes[et[2]][dst])
        if h + 1 < len(mb.blocks):
            assert block.num_src == list(reversed(mb.blocks))[h + 1].num_dst


def test_bad_typed_sampler_input_is_a_clear_error():
    data = fake_graph()
    graph = graph_of(data).graph
    with pytest.raises(SparsetrainError, match="edge type .* which the graph does not have"):
        NeighborSampler(graph, {("v0", "nope", "v1"): [1]})
    sampler = NeighborSampler(graph, [2], seed_type="v0")
    with pytest.raises(SparsetrainError, match="outside"):
        sampler.sample(torch.tensor([10**6]))
    with pytest.raises(SparsetrainError, match="more than once"):
        sampler.sample(torch.tensor([1, 1]))
    with pytest.raises(SparsetrainError, match="not a node type"):
        sampler.sample(SamplerInput(torch.tensor([1]), node_type="zz"))
    assert sampler.sample(torch.tensor([1, 2])).seeds.tolist() == [1, 2]  # the table was left clean


def test_rgcn_block_by_block_equals_full_graph_heteroconv():
    from sparsetrain.nn import RGCN

    data = fake_graph(seed=4)
    graph = graph_of(data).graph
    torch.manual_seed(0)
    model = RGCN(
        data.node_types,
        data.edge_types,
        {"v0": data["v0"].num_features, "v1": data["v1"].num_features},
        16,
        5,
        2,
        "v0",
        num_nodes={t: data[t].num_nodes for t in data.node_types},
        dropout=0.0,
    ).eval()
    featureless = [t for t in data.node_types if t not in ("v0", "v1")]
    with torch.no_grad():
        # reference: PyG's HeteroConv on the full HeteroData, layer by layer
        x = {t: data[t].x for t in ("v0", "v1")} | {t: torch.arange(data[t].num_nodes) for t in featureless}
        h = model.inputs(x)
        for layer, (conv, roots) in enumerate(zip(model.convs, model.roots)):
            out = conv(h, data.edge_index_dict)
            h = {t: roots[t](h[t]) + out[t] if t in out else roots[t](h[t]) for t in roots}
            if layer == 0:
                h = {t: v.relu() for t, v in h.items()}
        full = h["v0"]
        sampler = NeighborSampler(graph, [-1, -1], seed_type="v0", seed=1)
        seeds = torch.arange(0, data["v0"].num_nodes, 4)
        mb = sampler.sample(seeds)
        x = {t: data[t].x[mb.input_nodes[t]] for t in ("v0", "v1")} | {t: mb.input_nodes[t] for t in featureless}
        torch.testing.assert_close(model(x, mb.to_pyg()), full[seeds], atol=1e-5, rtol=1e-5)


def test_a_damaged_typed_graph_is_an_error_not_a_wild_read():
    from sparsetrain.sampling import CSCGraph

    indptr = torch.tensor([0, 2, 3, 5])
    good = CSCGraph.from_relations(
        {"a": 4, "b": 3},
        {
            ("a", "r", "b"): CSCGraph(indptr, torch.tensor([0, 3, 1, 2, 0], dtype=torch.int32)),
            ("b", "s", "a"): CSCGraph(torch.tensor([0, 1, 2, 2, 3]), torch.tensor([0, 2, 1], dtype=torch.int32)),
        },
    )
    bad = CSCGraph.from_relations(
        {"a": 4, "b": 3},
        {
            ("a", "r", "b"): CSCGraph(indptr, torch.tensor([0, 3, 1, 99, 0], dtype=torch.int32)),
            ("b", "s", "a"): good.edges[("b", "s", "a")],
        },
    )
    sampler = NeighborSampler(bad, [-1, -1], seed_type="b", seed=0)
    with pytest.raises(SparsetrainError, match=r"edge type \('a', 'r', 'b'\): entry 3 is 99, which must be in \[0, 4"):
        sampler.sample(torch.tensor([2]))
    ok = sampler.sample(torch.tensor([0]))  # column 0 is intact, and the failed batch left the node maps clean
    ref = NeighborSampler(good, [-1, -1], seed_type="b", seed=0).sample(torch.tensor([0]))
    assert all(torch.equal(ok.input_nodes[t], ref.input_nodes[t]) for t in ("a", "b"))
