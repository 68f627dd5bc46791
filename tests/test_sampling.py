"""NeighborSampler on the CPU against independent references (PyG k_hop_subgraph, the edge list, scipy)."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
from scipy import stats

from sparsetrain.errors import BackendError, InputError
from sparsetrain.sampling import CSCGraph, MiniBatch, NeighborSampler, SamplerInput


def random_graph(num_nodes: int = 300, num_edges: int = 3000, seed: int = 0, weighted: bool = False) -> CSCGraph:
    """A directed graph without duplicate edges."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, num_nodes, (2, num_edges), generator=g), dim=1)
    w = torch.rand(ei.shape[1], generator=g) if weighted else None
    return CSCGraph.from_edge_index(ei, num_nodes, w)


def star(degree: int, weights: list[float] | None = None) -> CSCGraph:
    """Node 0 with in-neighbors 1..degree."""
    ei = torch.stack([torch.arange(1, degree + 1), torch.zeros(degree, dtype=torch.int64)])
    return CSCGraph.from_edge_index(
        ei, degree + 1, None if weights is None else torch.tensor(weights, dtype=torch.float32)
    )


def edge_set(graph: CSCGraph) -> set[tuple[int, int]]:
    src, dst = graph.to_edge_index().tolist()
    return set(zip(src, dst))


def global_edges(mb: MiniBatch, block) -> list[tuple[int, int]]:
    src, dst = mb.input_nodes[block.edge_index].tolist()
    return list(zip(src, dst))


def check_structure(mb: MiniBatch, seeds: torch.Tensor) -> None:
    assert torch.equal(mb.seeds, seeds)
    assert torch.equal(mb.input_nodes[: len(seeds)], seeds)
    assert mb.input_nodes.unique().numel() == mb.input_nodes.numel()
    assert mb.blocks[0].num_src == mb.input_nodes.numel()
    assert mb.blocks[-1].num_dst == seeds.numel()
    for outer, inner in zip(mb.blocks, mb.blocks[1:]):
        assert outer.num_dst == inner.num_src
    for block in mb.blocks:
        assert block.edge_index.dtype == torch.int64 and block.edge_index.shape == (2, block.num_edges)
        if block.num_edges:
            assert int(block.edge_index[0].max()) < block.num_src and int(block.edge_index[1].max()) < block.num_dst


@pytest.fixture(scope="module")
def cora_graph(cora_data) -> CSCGraph:
    return CSCGraph.from_edge_index(cora_data.edge_index, cora_data.num_nodes)


# ---------- fanout -1: exactly the k-hop neighborhood ----------
@pytest.mark.parametrize("hops", [1, 2, 3])
def test_full_fanout_input_nodes_match_pyg_k_hop_cora(cora_data, cora_graph, hops):
    from torch_geometric.utils import k_hop_subgraph

    seeds = torch.tensor([0, 17, 633, 1701, 2707])
    mb = NeighborSampler(cora_graph, [-1] * hops, seed=0).sample(seeds)
    subset, *_ = k_hop_subgraph(seeds, hops, cora_data.edge_index, num_nodes=cora_data.num_nodes)
    assert set(mb.input_nodes.tolist()) == set(subset.tolist())
    check_structure(mb, seeds)


@pytest.mark.parametrize("indices_dtype", [torch.int32, torch.int64])
def test_full_fanout_matches_pyg_k_hop_random_directed(indices_dtype):
    from torch_geometric.utils import k_hop_subgraph

    graph = random_graph(400, 1600, seed=3)
    graph = CSCGraph(graph.indptr, graph.indices.to(indices_dtype))
    seeds = torch.tensor([5, 6, 7, 300])
    mb = NeighborSampler(graph, [-1, -1, -1], seed=0).sample(seeds)
    subset, *_ = k_hop_subgraph(seeds, 3, graph.to_edge_index(), num_nodes=graph.num_nodes, flow="source_to_target")
    assert set(mb.input_nodes.tolist()) == set(subset.tolist())
    check_structure(mb, seeds)


@pytest.mark.parametrize("indices_dtype", [torch.int32, torch.int64])
def test_out_degrees_match_pyg_degree_of_the_edge_sources(indices_dtype):
    from torch_geometric.utils import degree

    graph = random_graph(400, 1600, seed=4)
    graph = CSCGraph(graph.indptr, graph.indices.to(indices_dtype))
    src, dst = graph.to_edge_index()
    assert torch.equal(graph.out_degrees(), degree(src, graph.num_nodes, dtype=torch.int64))
    assert torch.equal(graph.in_degrees(), degree(dst, graph.num_nodes, dtype=torch.int64))


def test_full_fanout_blocks_are_exactly_the_in_edges_of_dst_nodes(cora_graph):
    seeds = torch.tensor([3, 99, 1500])
    mb = NeighborSampler(cora_graph, [-1, -1], seed=0).sample(seeds)
    src_all, dst_all = cora_graph.to_edge_index()
    for block in mb.blocks:
        dst_nodes = mb.input_nodes[: block.num_dst]
        wanted = torch.isin(dst_all, dst_nodes)
        expected = sorted(zip(src_all[wanted].tolist(), dst_all[wanted].tolist()))
        assert sorted(global_edges(mb, block)) == expected


def test_dataset_graph_from_pyg_import(cora_data, tmp_path):
    from torch_geometric.utils import k_hop_subgraph

    from sparsetrain.datasets import from_pyg, load

    from_pyg(cora_data, tmp_path / "cora", quiet=True)
    graph = load(tmp_path / "cora").graph
    seeds = torch.tensor([1, 2, 3])
    mb = NeighborSampler(graph, [-1, -1], seed=0).sample(seeds)
    subset, *_ = k_hop_subgraph(seeds, 2, graph.to_edge_index(), num_nodes=graph.num_nodes)
    assert set(mb.input_nodes.tolist()) == set(subset.tolist())


# ---------- finite fanouts ----------
@pytest.mark.parametrize("fanouts", [[3, 2], [5, 5, 5], [40, 1]])  # 40 > Floyd's limit: selection sampling
@pytest.mark.parametrize("weighted", [False, True])
def test_finite_fanout_without_replacement(fanouts, weighted):
    graph = random_graph(300, 9000, seed=1, weighted=True)
    graph.weights[::7] = 0.0  # some edges can never be drawn when weighted
    edges = edge_set(graph)
    src_all, dst_all = graph.to_edge_index()
    positive = torch.bincount(dst_all[graph.weights > 0], minlength=graph.num_nodes)
    degree = positive if weighted else graph.in_degrees()
    zero_weight = set(zip(src_all[graph.weights == 0].tolist(), dst_all[graph.weights == 0].tolist()))
    seeds = torch.tensor([0, 10, 20, 30, 299])
    mb = NeighborSampler(graph, fanouts, weighted=weighted, seed=2).sample(seeds)
    check_structure(mb, seeds)
    for block, fanout in zip(mb.blocks, reversed(fanouts)):
        sampled = global_edges(mb, block)
        assert set(sampled) <= edges
        assert len(set(sampled)) == len(sampled)
        if weighted:
            assert not set(sampled) & zero_weight
        per_dst = torch.bincount(block.edge_index[1], minlength=block.num_dst)
        dst_nodes = mb.input_nodes[: block.num_dst]
        assert torch.equal(per_dst, torch.clamp(degree[dst_nodes], max=fanout))


@pytest.mark.parametrize("weighted", [False, True])
def test_finite_fanout_with_replacement(weighted):
    graph = random_graph(200, 3000, seed=4, weighted=True)
    edges = edge_set(graph)
    seeds = torch.arange(0, 200, 9)
    mb = NeighborSampler(graph, [7, 4], replace=True, weighted=weighted, seed=0).sample(seeds)
    check_structure(mb, seeds)
    for block, fanout in zip(mb.blocks, [4, 7]):
        assert set(global_edges(mb, block)) <= edges
        per_dst = torch.bincount(block.edge_index[1], minlength=block.num_dst)
        has_edges = graph.in_degrees()[mb.input_nodes[: block.num_dst]] > 0
        assert torch.equal(per_dst, torch.where(has_edges, fanout, 0))


def draw_counts(graph: CSCGraph, fanout: int, trials: int, **kw) -> np.ndarray:
    """How often each in-neighbor of node 0 is drawn over ``trials`` batches."""
    sampler = NeighborSampler(graph, [fanout], seed=11, **kw)
    counts = np.zeros(graph.num_nodes, np.int64)
    for b in range(trials):
        mb = sampler.sample(SamplerInput(torch.tensor([0]), key=b))
        np.add.at(counts, mb.input_nodes[mb.blocks[0].edge_index[0]].numpy(), 1)
    return counts[1:]


@pytest.mark.parametrize("fanout,replace", [(10, False), (40, False), (10, True)])
def test_uniform_chi_square_degree_50(fanout, replace):
    counts = draw_counts(star(50), fanout, 2000, replace=replace)
    assert counts.sum() == 2000 * fanout
    assert stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize("replace", [True, False])
def test_weighted_single_draw_follows_weights(replace):
    weights = [1.0, 2.0, 3.0, 4.0, 0.0, 10.0]
    counts = draw_counts(star(6, weights), 1, 4000, replace=replace, weighted=True)
    assert counts[4] == 0
    w = np.array(weights)[[0, 1, 2, 3, 5]]
    assert stats.chisquare(counts[[0, 1, 2, 3, 5]], w / w.sum() * 4000).pvalue > 1e-3


def test_weighted_without_replacement_inclusion_probabilities():
    """Two draws without replacement = successive draws proportional to weight (exact inclusion probabilities)."""
    w = np.array([1.0, 2.0, 3.0, 6.0])
    trials = 4000
    counts = draw_counts(star(4, list(w)), 2, trials, weighted=True)
    total = w.sum()
    p = np.array(
        [w[i] / total + sum(w[j] / total * w[i] / (total - w[j]) for j in range(4) if j != i) for i in range(4)]
    )
    assert counts.sum() == 2 * trials
    assert np.all(np.abs(counts - trials * p) < 5 * np.sqrt(trials * p * (1 - p)))


def test_weighted_with_replacement_frequencies_follow_weights():
    weights = [5.0, 1.0, 1.0, 3.0]
    counts = draw_counts(star(4, weights), 8, 1000, replace=True, weighted=True)
    assert stats.chisquare(counts, np.array(weights) / 10 * 8000).pvalue > 1e-3


# ---------- determinism ----------
def same(a: MiniBatch, b: MiniBatch) -> bool:
    return torch.equal(a.input_nodes, b.input_nodes) and all(
        torch.equal(x.edge_index, y.edge_index) and (x.num_src, x.num_dst) == (y.num_src, y.num_dst)
        for x, y in zip(a.blocks, b.blocks)
    )


@pytest.mark.parametrize("kw", [{}, {"replace": True}, {"weighted": True}])
def test_deterministic_for_a_seed_whatever_the_thread_count(kw, monkeypatch):
    from sparsetrain.sampling import neighbor

    monkeypatch.setattr(neighbor, "PARALLEL_MIN_WORK", 0)  # every hop on the thread pool, however small
    graph = random_graph(2000, 40000, seed=5, weighted=True)
    seeds = torch.arange(0, 2000, 7)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = NeighborSampler(graph, [8, 4, 2], seed=123, **kw).sample(seeds)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = NeighborSampler(graph, [8, 4, 2], seed=123, **kw).sample(seeds)
    finally:
        numba.set_num_threads(before)
    assert same(one, many)
    other = NeighborSampler(graph, [8, 4, 2], seed=124, **kw).sample(seeds)
    assert not same(one, other)


def test_batch_counter_and_explicit_batch_key():
    graph = random_graph(500, 5000, seed=6)
    seeds = torch.tensor([1, 2, 3, 4])
    a = NeighborSampler(graph, [3, 3], seed=9)
    first, second = a.sample(seeds), a.sample(seeds)
    assert not same(first, second)  # a new batch draws afresh
    b = NeighborSampler(graph, [3, 3], seed=9)
    assert same(b.sample(SamplerInput(seeds, key=1)), second)
    assert same(b.sample(SamplerInput(seeds, key=0)), first)
    # no key: the sampler's own counter, which explicit keys leave alone
    assert same(b.sample(SamplerInput(seeds)), first)
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="key="):
            SamplerInput(seeds, key=bad)


def test_node_map_is_clean_after_an_error_and_between_batches():
    graph = random_graph(200, 2000, seed=7)
    sampler = NeighborSampler(graph, [4, 4], seed=1)
    with pytest.raises(InputError, match="more than once"):
        sampler.sample(torch.tensor([5, 6, 5]))
    for b in range(3):
        inp = SamplerInput(torch.tensor([5, 6]), key=b)
        assert same(sampler.sample(inp), NeighborSampler(graph, [4, 4], seed=1).sample(inp))


# ---------- PyG views: a model on the blocks equals the full-graph model ----------
@pytest.mark.parametrize("conv_name", ["SAGEConv", "GATConv"])
def test_pyg_conv_on_blocks_equals_full_graph(cora_data, cora_graph, conv_name):
    import torch_geometric.nn as pyg_nn

    torch.manual_seed(0)
    conv_cls = getattr(pyg_nn, conv_name)
    convs = [conv_cls(cora_data.num_features, 16), conv_cls(16, 7)]
    seeds = torch.tensor([0, 5, 42, 1000, 2000])
    mb = NeighborSampler(cora_graph, [-1, -1], seed=0).sample(seeds)
    with torch.no_grad():
        full = cora_data.x
        for i, conv in enumerate(convs):
            full = conv(full, cora_data.edge_index)
            full = full.relu() if i == 0 else full
        h = cora_data.x[mb.input_nodes]
        for i, (conv, (edge_index, size)) in enumerate(zip(convs, mb.to_pyg())):
            h = conv((h, h[: size[1]]), edge_index)
            h = h.relu() if i == 0 else h
    assert h.shape == (len(seeds), 7)
    torch.testing.assert_close(h, full[seeds], rtol=1e-4, atol=1e-5)


def test_minibatch_to_moves_every_tensor_and_keeps_loader_fields():
    graph = random_graph(100, 800, seed=8)
    mb = NeighborSampler(graph, [2, 2], seed=0).sample(torch.tensor([1, 2]))
    assert mb.x is None and mb.y is None
    mb.x = torch.ones(mb.input_nodes.numel(), 3)
    moved = mb.to("cpu")
    assert torch.equal(moved.x, mb.x) and moved.num_sampled_edges == mb.num_sampled_edges
    assert [b.to_pyg()[1] for b in moved.blocks] == [(b.num_src, b.num_dst) for b in mb.blocks]


# ---------- errors ----------
def test_errors_name_the_problem():
    graph = random_graph(50, 200, seed=9)
    seeds_only = NeighborSampler(graph, []).sample(torch.tensor([3, 1]))  # no hop (PyG's num_neighbors=[]): seeds alone
    assert seeds_only.blocks == [] and seeds_only.input_nodes.tolist() == [3, 1]
    with pytest.raises(InputError, match="fanouts"):
        NeighborSampler(graph, [5, -2])
    with pytest.raises(InputError, match="no edge weights"):
        NeighborSampler(graph, [5], weighted=True)
    bad = CSCGraph(graph.indptr, graph.indices, -torch.ones(graph.num_edges))
    with pytest.raises(InputError, match="negative"):
        NeighborSampler(bad, [5], weighted=True)
    sampler = NeighborSampler(graph, [2])
    with pytest.raises(InputError, match="outside"):
        sampler.sample(torch.tensor([0, 50]))
    with pytest.raises(InputError, match="1-D integer"):
        sampler.sample(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError):  # InputError is a ValueError
        sampler.sample(torch.tensor([1.5]))


def test_to_dgl_without_dgl_is_a_clear_error():
    try:
        import dgl  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("dgl is importable here; the DGL views are tested in test_sampling_dgl.py")
    mb = NeighborSampler(random_graph(30, 100), [2], seed=0).sample(torch.tensor([1]))
    with pytest.raises(BackendError, match="DGL") as raised:
        mb.to_dgl()
    said = str(raised.value)  # how to get it, not where a CI script keeps it
    assert "pip install torch==2.2.1 dgl==2.1.0" in said and ".ci" not in said and "\n" not in said


def test_csc_graph_from_edge_index_matches_pyg_csc():
    from torch_geometric.utils import to_torch_csc_tensor

    ei = torch.randint(0, 40, (2, 300), generator=torch.Generator().manual_seed(1))
    ei = torch.unique(ei, dim=1)
    graph = CSCGraph.from_edge_index(ei, 40)
    csc = to_torch_csc_tensor(ei, size=(40, 40))
    assert torch.equal(graph.indptr, csc.ccol_indices()) and torch.equal(graph.indices.long(), csc.row_indices())
    src, dst = graph.to_edge_index()
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(zip(*ei.tolist()))
    indptr, indices, weights = graph.numpy()
    assert np.shares_memory(indptr, graph.indptr.numpy()) and weights is None
    assert graph.to("cpu") is graph
    copy = graph.in_memory()
    assert torch.equal(copy.indices, graph.indices) and copy.indices.data_ptr() != graph.indices.data_ptr()


def test_concurrent_calls_from_threads_give_the_batches_of_their_keys():
    from concurrent.futures import ThreadPoolExecutor

    graph = random_graph(3000, 60000, seed=12)
    sampler = NeighborSampler(graph, [10, 5], seed=4)
    batches = [torch.arange(i, 3000, 37) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda ib: sampler.sample(SamplerInput(ib[1], key=ib[0])), enumerate(batches)))
    alone = NeighborSampler(graph, [10, 5], seed=4)
    assert all(same(mb, alone.sample(SamplerInput(b, key=i))) for i, (mb, b) in enumerate(zip(together, batches)))
