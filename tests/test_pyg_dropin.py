"""sparsetrain.pyg against PyG itself: NeighborLoader batches, model outputs, the (FeatureStore, GraphStore) adapters.

The reference is PyG's own NeighborLoader (torch-sparse backend here) on the same Data and seeds, on graphs
sparsetrain did not generate: FakeDataset (directed), Karate club and Cora through PyG's Planetoid (undirected).
"""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader as PygNeighborLoader
from torch_geometric.nn.models import GraphSAGE

import sparsetrain.pyg as stp
from sparsetrain.datasets import from_pyg
from sparsetrain.datasets.builtin import planetoid_raw_dir
from tests.pyg_backend import needs_pyg_sampler


def with_edge_attr(data: Data, dim: int = 3, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    data.edge_attr = torch.randn(data.num_edges, dim, generator=g)
    return data


def fake_directed() -> Data:
    from torch_geometric.datasets import FakeDataset

    torch.manual_seed(0)
    data = FakeDataset(
        num_graphs=1, avg_num_nodes=400, avg_degree=6, num_channels=8, edge_dim=4, num_classes=5, is_undirected=False
    )[0]
    assert not data.is_undirected() and data.edge_attr is not None
    return data


def karate(tmp_path_factory) -> Data:
    from torch_geometric.datasets import KarateClub

    data = KarateClub()[0]
    assert data.is_undirected()
    return with_edge_attr(data, 2, seed=1)


@pytest.fixture(scope="module")
def cora_pyg(tmp_path_factory):
    """Cora read by PyG's Planetoid from the raw files shipped in sparsetrain (copied to <root>/Cora/raw/)."""
    from torch_geometric.datasets import Planetoid

    root = tmp_path_factory.mktemp("planetoid")
    shutil.copytree(planetoid_raw_dir("cora"), root / "Cora" / "raw")
    data = Planetoid(str(root), "Cora")[0]
    return with_edge_attr(data, 5, seed=2)


@pytest.fixture(scope="module", params=["fake_directed", "karate", "cora"])
def graph(request, tmp_path_factory, cora_pyg) -> Data:
    if request.param == "cora":
        return cora_pyg
    return fake_directed() if request.param == "fake_directed" else karate(tmp_path_factory)


def edge_triples(batch) -> list[tuple[int, int, int]]:
    """Every sampled edge as (global source, global destination, edge id)."""
    src, dst = batch.n_id[batch.edge_index]
    return sorted(zip(src.tolist(), dst.tolist(), batch.e_id.tolist()))


def assert_same_batch(ours, ref, data: Data) -> None:
    assert ours.batch_size == ref.batch_size and torch.equal(ours.input_id, ref.input_id)
    assert torch.equal(ours.n_id[: ours.batch_size], ref.n_id[: ref.batch_size])  # the seeds, first, in order
    assert sorted(ours.n_id.tolist()) == sorted(ref.n_id.tolist())
    assert edge_triples(ours) == edge_triples(ref)
    for batch in (ours, ref):  # every field is the rows of its ids
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
        assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])


def loaders(data: Data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG warns that torch-sparse sampling is deprecated without pyg-lib
        ref = PygNeighborLoader(data, **kw)
    return stp.NeighborLoader(data, seed=0, **kw), ref


@needs_pyg_sampler
@pytest.mark.parametrize("input_nodes", [None, "mask"])
def test_full_neighborhood_batches_equal_pyg(graph, input_nodes):
    seeds = None
    if input_nodes == "mask":
        seeds = torch.zeros(graph.num_nodes, dtype=torch.bool)
        seeds[torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(3))[: graph.num_nodes // 3]] = (
            True
        )
    batch_size = 16 if graph.num_nodes <= 500 else 128  # Cora: 22 batches of whole 2-hop neighborhoods, not 170
    ours, ref = loaders(graph, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=batch_size, shuffle=False)
    count = 0
    for a, b in zip(ours, ref, strict=True):
        assert_same_batch(a, b, graph)
        assert a.num_sampled_nodes[0] == a.batch_size and sum(a.num_sampled_nodes) == a.num_nodes
        assert sum(a.num_sampled_edges) == a.num_edges
        count += 1
    assert count == len(ref)


@needs_pyg_sampler
def test_graphsage_seed_outputs_equal_pyg_with_and_without_trim(graph):
    torch.manual_seed(0)
    model = GraphSAGE(graph.num_features, 16, num_layers=2, out_channels=3).eval()
    seeds = None if graph.num_nodes <= 500 else torch.arange(0, graph.num_nodes, 7)  # on Cora: 387 seeds, 20 batches
    ours, ref = loaders(graph, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=20, shuffle=False)
    with torch.no_grad():
        full = model(graph.x, graph.edge_index)
        for a, b in zip(ours, ref, strict=True):
            expected = model(b.x, b.edge_index)[: b.batch_size]
            plain = model(a.x, a.edge_index)[: a.batch_size]
            trimmed = model(a.x, a.edge_index, num_sampled_nodes_per_hop=a.num_sampled_nodes,
                            num_sampled_edges_per_hop=a.num_sampled_edges)[: a.batch_size]
            torch.testing.assert_close(plain, expected, rtol=0, atol=1e-5)
            torch.testing.assert_close(trimmed, expected, rtol=0, atol=1e-5)
            torch.testing.assert_close(trimmed, full[a.n_id[: a.batch_size]], rtol=0, atol=1e-5)


def test_finite_fanouts_are_valid_pyg_batches(cora_pyg):
    loader = stp.NeighborLoader(cora_pyg, num_neighbors=[5, 3], batch_size=64, shuffle=True, seed=1)
    degrees = torch.bincount(cora_pyg.edge_index[1], minlength=cora_pyg.num_nodes)
    for batch in loader:
        assert torch.equal(cora_pyg.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        assert batch.e_id.unique().numel() == batch.e_id.numel()
        seeds_hop = batch.edge_index[:, : batch.num_sampled_edges[0]]
        assert bool((seeds_hop[1] < batch.batch_size).all())  # hop 1 goes into the seeds only
        per_seed = torch.bincount(seeds_hop[1], minlength=batch.batch_size)
        assert torch.equal(per_seed, degrees[batch.n_id[: batch.batch_size]].clamp(max=5))


def test_same_seed_same_batches_and_torch_seed_fixes_the_default(cora_pyg):
    def epoch(**kw):
        torch.manual_seed(5)
        return [
            (b.n_id, b.e_id)
            for b in stp.NeighborLoader(cora_pyg, num_neighbors=[4, 4], batch_size=128, shuffle=True, **kw)
        ]

    for a, b in zip(epoch(seed=11), epoch(seed=11), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert all(torch.equal(a[1], b[1]) for a, b in zip(epoch(), epoch(), strict=True))


# ---------- the (FeatureStore, GraphStore) adapters ----------
@pytest.fixture(scope="module")
def cora_dataset(cora_pyg, tmp_path_factory):
    return from_pyg(cora_pyg, tmp_path_factory.mktemp("ds") / "cora", quiet=True)


def pair_triples(batch) -> list[tuple[int, int]]:
    src, dst = batch.n_id[batch.edge_index]
    return sorted(zip(src.tolist(), dst.tolist()))


@needs_pyg_sampler
def test_pyg_own_loader_over_the_adapters_equals_over_data(cora_pyg, cora_dataset):
    fs, gs = stp.DatasetFeatureStore(cora_dataset), stp.DatasetGraphStore(cora_dataset)
    seeds = cora_dataset.split["train"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        over_stores = PygNeighborLoader((fs, gs), num_neighbors=[-1, -1], input_nodes=seeds, batch_size=32)
        over_data = PygNeighborLoader(cora_pyg, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=32)
    for a, b in zip(over_stores, over_data, strict=True):
        assert torch.equal(a.n_id[: a.batch_size], b.n_id[: b.batch_size])
        assert sorted(a.n_id.tolist()) == sorted(b.n_id.tolist())
        assert pair_triples(a) == pair_triples(b)
        order_a, order_b = a.n_id.argsort(), b.n_id.argsort()
        assert torch.equal(a.x[order_a], b.x[order_b]) and torch.equal(a.y[order_a], b.y[order_b])
        src, dst = cora_dataset.graph.to_edge_index()[:, a.e_id]  # e_id: CSC positions of the dataset
        assert torch.equal(torch.stack([src, dst]), a.n_id[a.edge_index])


@needs_pyg_sampler
def test_our_loader_over_a_dataset_folder_equals_pyg_over_data(cora_pyg, cora_dataset):
    ours = stp.NeighborLoader(
        str(cora_dataset.path), num_neighbors=[-1, -1], input_nodes="train", batch_size=32, seed=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = PygNeighborLoader(cora_pyg, num_neighbors=[-1, -1], input_nodes=cora_pyg.train_mask, batch_size=32)
    for a, b in zip(ours, ref, strict=True):
        assert sorted(a.n_id.tolist()) == sorted(b.n_id.tolist()) and pair_triples(a) == pair_triples(b)
        assert torch.equal(a.x, cora_pyg.x[a.n_id]) and torch.equal(a.y, cora_pyg.y[a.n_id])
        assert torch.equal(a.edge_attr, cora_dataset.edge_features.gather(a.e_id))
        src, dst = a.n_id[a.edge_index]
        theirs = {(s, d): tuple(e) for s, d, e in zip(*cora_pyg.edge_index.tolist(), cora_pyg.edge_attr.tolist())}
        assert all(theirs[(s, d)] == tuple(e) for s, d, e in zip(src.tolist(), dst.tolist(), a.edge_attr.tolist()))


def test_feature_store_serves_rows_and_sizes(cora_dataset):
    from torch_geometric.data.feature_store import TensorAttr

    fs = stp.DatasetFeatureStore(cora_dataset)
    ids = torch.tensor([5, 0, 5, 2707])
    assert torch.equal(fs[TensorAttr(None, "x", ids)], cora_dataset.features.gather(ids))
    assert torch.equal(fs.get_tensor(TensorAttr(None, "y", ids)), cora_dataset.labels[ids])
    assert fs.get_tensor_size(TensorAttr(None, "x")) == (2708, 1433)
    assert {a.attr_name for a in fs.get_all_tensor_attrs()} == {"x", "y"}
    gs = stp.DatasetGraphStore(cora_dataset)
    row, colptr, perm = gs.csc()
    assert torch.equal(colptr, cora_dataset.graph.indptr) and colptr.data_ptr() == cora_dataset.graph.indptr.data_ptr()
    assert torch.equal(row, cora_dataset.graph.indices.long()) and perm is None


# ---------- PyG's options ----------
def global_edges(batch) -> list[tuple[int, int]]:
    return sorted(zip(*batch.n_id[batch.edge_index].tolist()))


@needs_pyg_sampler
@pytest.mark.parametrize("subgraph_type", ["induced", "bidirectional"])
def test_induced_and_bidirectional_subgraphs_equal_pyg(graph, subgraph_type):
    """With every neighbor the sampled nodes are fixed, so PyG's subgraph (torch-sparse's induced one, its own
    to_bidirectional) is the reference, edge for edge."""
    ours, ref = loaders(graph, num_neighbors=[-1, -1], batch_size=16, shuffle=False, subgraph_type=subgraph_type)
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(a.n_id[: a.batch_size], b.n_id[: b.batch_size])
        assert sorted(a.n_id.tolist()) == sorted(b.n_id.tolist())
        assert global_edges(a) == global_edges(b)
        assert torch.equal(data_edges(graph, a), a.n_id[a.edge_index]) if subgraph_type == "induced" else True
        assert "num_sampled_nodes" not in a and "num_sampled_nodes" not in b  # a flat subgraph has no hops


def data_edges(data: Data, batch) -> torch.Tensor:
    return data.edge_index[:, batch.e_id]


@pytest.mark.parametrize(
    ("kw", "error", "named"),
    [
        ({"subgraph_type": "induced", "disjoint": True}, stp.SettingError, "induced"),
        ({"sample_direction": "sideways"}, stp.SettingError, "sample_direction"),
        ({"sample_direction": "backward", "time_attr": "time"}, NotImplementedError, "backward"),
        ({"time_attr": "no_such_attr"}, stp.SettingError, "no_such_attr"),
    ],
)
def test_unsupported_option_combinations_raise_pygs_exception_classes(cora_pyg, kw, error, named):
    data = Data(edge_index=cora_pyg.edge_index, num_nodes=cora_pyg.num_nodes, time=torch.arange(cora_pyg.num_nodes))
    with pytest.raises(error, match=named):
        stp.PyGNeighborSampler(data, [2], **kw)


def test_negative_weights_and_edge_times_in_link_sampling(cora_pyg):
    from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

    sampler = stp.PyGNeighborSampler(cora_pyg, [2])
    inputs = EdgeSamplerInput(None, torch.tensor([0, 5, 9]), torch.tensor([1, 6, 7]))
    only = torch.zeros(cora_pyg.num_nodes)
    only[42] = 1.0  # every negative source is node 42, every destination node 7 (PyG's multinomial draws, one-hot)
    dst = torch.zeros(cora_pyg.num_nodes)
    dst[7] = 2.0
    out = sampler.sample_from_edges(inputs, NegativeSampling("binary", src_weight=only, dst_weight=dst))
    label_index, label = out.metadata[1], out.metadata[2]
    negatives = out.node[label_index[:, label == 0]]
    assert negatives[0].tolist() == [42] * 3 and negatives[1].tolist() == [7] * 3
    with pytest.raises(ValueError, match="not temporal"):
        sampler.sample_from_edges(EdgeSamplerInput(None, torch.tensor([0]), torch.tensor([1]), time=torch.tensor([1])))


def test_public_names_resolve():
    import sparsetrain as st

    assert st.pyg is stp and all(getattr(stp, name) is not None for name in stp.__all__)
    assert issubclass(stp.NeighborLoader, PygNeighborLoader)


# ---------- training: an unmodified PyG-style script ----------
@pytest.mark.slow
def test_pyg_style_graphsage_with_trim_to_layer_learns_cora(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "pyg_sage_cora.py"
    done = subprocess.run([sys.executable, str(script), "--root", str(tmp_path), "--seeds", "0", "1", "2"],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    accs = [float(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("seed ")]
    assert len(accs) == 3 and sum(accs) / 3 >= 0.79, done.stdout


@pytest.mark.slow
def test_worker_processes_give_the_batches_of_the_main_process(cora_pyg):
    def epochs(workers: int):
        processes = {"multiprocessing_context": "forkserver"} if workers else {}
        loader = stp.NeighborLoader(cora_pyg, num_neighbors=[5, 5], batch_size=256, shuffle=False, seed=4,
                                    num_workers=workers, **processes)
        return [[(b.n_id, b.e_id) for b in loader] for _ in range(2)]  # epoch 2: new workers, the keys after epoch 1's

    # processes when asked for (threads otherwise: tests/test_pyg_workers.py)
    for main, workers in zip(epochs(0), epochs(2)):
        assert len(main) == len(workers) and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                                 for a, b in zip(main, workers))
