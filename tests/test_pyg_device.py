"""The PyG loaders' ``device=``: the same batches as without it, already on the device (GPU checks: ``gpu`` marker)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data, HeteroData

import sparsetrain.pyg as stp
from sparsetrain.errors import SettingError


def small_graph(seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, 300, (2, 3000), generator=g)
    return Data(x=torch.randn(300, 8, generator=g), y=torch.randint(0, 4, (300,), generator=g),
                edge_attr=torch.randn(3000, 2, generator=g), edge_index=edge_index, num_nodes=300)


def small_hetero(seed: int = 0) -> HeteroData:
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(200, 6, generator=g)
    data["paper"].y = torch.randint(0, 3, (200,), generator=g)
    data["author"].x = torch.randn(100, 4, generator=g)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, 200, (2, 1500), generator=g)
    data["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 100, (800,), generator=g),
                                                                 torch.randint(0, 200, (800,), generator=g)])
    return data


def batches(loader) -> list:
    return [batch for batch in loader]


def assert_same(ours, ref) -> None:
    for key in ("n_id", "e_id", "x", "y", "edge_index", "edge_attr", "input_id"):
        if key in ref:
            assert torch.equal(ours[key].cpu(), ref[key]), key


def test_device_cpu_gives_the_same_batches():
    data = small_graph()
    kw = dict(num_neighbors=[5, 3], batch_size=64, seed=3)
    for ours, ref in zip(batches(stp.NeighborLoader(data, device="cpu", **kw)), batches(stp.NeighborLoader(data, **kw)),
                         strict=True):
        assert_same(ours, ref)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_device_cuda_without_a_gpu_is_one_line():
    with pytest.raises(SettingError, match="no CUDA device is visible"):
        stp.NeighborLoader(small_graph(), num_neighbors=[2], device="cuda")


def test_device_takes_data_not_stores(tmp_path):
    from sparsetrain.datasets import from_pyg

    ds = from_pyg(small_graph(), tmp_path / "ds", quiet=True)
    with pytest.raises(SettingError, match="device= places a Data or HeteroData"):
        stp.NeighborLoader(ds, num_neighbors=[2], device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("features_fit", [True, False])
def test_device_cuda_batches_equal_the_cpu_batches(monkeypatch, features_fit):
    from sparsetrain.storage import residency

    if not features_fit:  # x stays in pinned host memory, read zero-copy
        monkeypatch.setattr(residency, "GPU_RESIDENT_FRACTION", 0.0)
    data = small_graph()
    kw = dict(num_neighbors=[5, 3], batch_size=64, seed=3)
    loader = stp.NeighborLoader(data, device="cuda", **kw)
    assert loader.placement.features if not features_fit else not loader.placement.features
    assert data.x.device.type == "cpu" and "x" in data  # the caller's data is left alone
    for ours, ref in zip(batches(loader), batches(stp.NeighborLoader(data, **kw)), strict=True):
        assert ours.x.is_cuda and ours.edge_index.is_cuda and ours.n_id.is_cuda
        assert_same(ours, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("features_fit", [True, False])
def test_device_cuda_hetero_batches_equal_the_cpu_batches(monkeypatch, features_fit):
    from sparsetrain.storage import residency

    if not features_fit:
        monkeypatch.setattr(residency, "GPU_RESIDENT_FRACTION", 0.0)
    data = small_hetero()
    kw = dict(num_neighbors=[4, 2], batch_size=32, input_nodes="paper", seed=1)
    for ours, ref in zip(batches(stp.NeighborLoader(data, device="cuda", **kw)),
                         batches(stp.NeighborLoader(data, **kw)), strict=True):
        for node_type in ("paper", "author"):
            assert ours[node_type].x.is_cuda
            assert torch.equal(ours[node_type].n_id.cpu(), ref[node_type].n_id)
            assert torch.equal(ours[node_type].x.cpu(), ref[node_type].x)
        for edge_type in ref.edge_types:
            assert torch.equal(ours[edge_type].edge_index.cpu(), ref[edge_type].edge_index)


@pytest.mark.gpu
def test_device_cuda_link_batches_equal_the_cpu_batches():
    data = small_graph(1)
    kw = dict(num_neighbors=[4, 2], batch_size=100, edge_label_index=data.edge_index[:, :500], neg_sampling="binary",
              seed=2)
    for ours, ref in zip(batches(stp.LinkNeighborLoader(data, device="cuda", **kw)),
                         batches(stp.LinkNeighborLoader(data, **kw)), strict=True):
        assert ours.edge_label_index.is_cuda
        assert_same(ours, ref)
        assert torch.equal(ours.edge_label_index.cpu(), ref.edge_label_index)
        assert torch.equal(ours.edge_label.cpu(), ref.edge_label)


def _no_query(device):
    raise AssertionError(f"asked {device}'s free memory for data that need not move")


@pytest.mark.parametrize("device, where, data_bytes, free, want", [
    (None, "cpu", 10, None, (None, "host")),  # PyG's own behaviour
    ("cpu", "cpu", 10, None, ("cpu", "host")),
    ("cuda", "cpu", 40, 100, ("cuda", "device")),  # fits in GPU_RESIDENT_FRACTION of the free memory: moved
    ("cuda", "cpu", 41, 100, ("cuda", "pinned")),  # does not: x read zero-copy from pinned host memory
    (None, "cuda:0", 41, None, ("cuda:0", "device")),  # already on the GPU: sampled there, nothing moves
    ("cuda", "cuda:0", 10**12, None, ("cuda", "device")),
    ("cuda:1", "cuda:0", 41, 100, ("cuda:1", "pinned")),
])
def test_one_placement_rule_wherever_the_data_lives(device, where, data_bytes, free, want):
    from sparsetrain.pyg.device import placement_plan

    plan = placement_plan(device, torch.device(where), data_bytes, _no_query if free is None else lambda _: free)
    assert (None if plan.device is None else str(plan.device), plan.features) == want


def test_a_gpu_data_is_placed_as_device_cuda_places_a_host_data():
    from sparsetrain.pyg.device import placement_plan

    fits = placement_plan(None, torch.device("cuda:0"), 10, _no_query)
    moved = placement_plan("cuda", torch.device("cpu"), 10, lambda _: 100)
    assert (fits.device.type, fits.features) == (moved.device.type, moved.features) == ("cuda", "device")


def test_loader_device_follows_the_data_unless_given(tmp_path):
    from sparsetrain.datasets import from_pyg
    from sparsetrain.pyg.device import data_device, loader_device

    data = small_graph()
    assert data_device(data) == torch.device("cpu") and loader_device(data, None) is None
    assert loader_device(data, "cpu") == torch.device("cpu")
    assert loader_device(from_pyg(data, tmp_path / "ds", quiet=True), None) is None


@pytest.mark.parametrize("make", [small_graph, small_hetero], ids=["Data", "HeteroData"])
def test_placement_moves_a_copy_not_the_callers_data(make):
    from sparsetrain.pyg.device import Placement

    data = make()
    placed = Placement(data, "meta")  # any device a CPU machine has: the move is what is checked
    assert all(v.device.type == "cpu" for store in data.stores for v in store.values() if torch.is_tensor(v))
    assert all(v.device.type == "meta" for store in placed.data.stores for v in store.values() if torch.is_tensor(v))


@pytest.mark.gpu
def test_a_data_moved_to_the_gpu_samples_there_as_device_cuda():
    data = small_graph()
    kw = dict(num_neighbors=[5, 3], batch_size=64, seed=3)
    ref = batches(stp.NeighborLoader(data, **kw))
    on_gpu = data.clone().to("cuda")
    loader = stp.NeighborLoader(on_gpu, **kw)
    assert loader.placement is not None and loader.placement.plan.features == "device"
    assert loader.neighbor_sampler.fused.graph.device.type == "cuda"  # sampled on the GPU, not on the host
    for ours, want in zip(batches(loader), ref, strict=True):
        assert ours.x.is_cuda and ours.edge_index.is_cuda and ours.n_id.is_cuda
        assert_same(ours, want)


@pytest.mark.gpu
def test_gpu_input_nodes_are_indexed_on_the_host():
    """PyG cuts each batch's seeds with a host index: GPU input_nodes would make that a blocking copy a batch."""
    data = small_graph()
    train = torch.arange(0, data.num_nodes, 2)
    kw = dict(num_neighbors=[5, 3], batch_size=64, seed=3)
    ref = batches(stp.NeighborLoader(data, input_nodes=train, **kw))
    loader = stp.NeighborLoader(data.clone().to("cuda"), input_nodes=train.to("cuda"), **kw)
    assert loader.input_data.node.device.type == "cpu"
    for ours, want in zip(batches(loader), ref, strict=True):
        assert ours.n_id.is_cuda
        assert_same(ours, want)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["host Data, device='cuda'", "Data on the GPU"])
def test_a_gpu_batch_is_cut_without_a_pageable_copy(where):
    """A copy from pageable host memory waits for the GPU's queue (a host sync a batch): the batch's host tensors
    (``input_id``, a CPU sampler's output) reach the GPU through pinned memory."""
    from torch.profiler import ProfilerActivity, profile

    from sparsetrain.pyg.keys import batch_key

    data = small_graph()
    kw = dict(num_neighbors=[5, 3], batch_size=64, seed=3)
    loader = (stp.NeighborLoader(data, device="cuda", **kw) if where.startswith("host")
              else stp.NeighborLoader(data.clone().to("cuda"), **kw))
    ref = batches(stp.NeighborLoader(data, **kw))[1]
    with batch_key(1):  # batch 1 of the first epoch
        out = loader.node_sampler.sample_from_nodes(loader.input_data[torch.arange(64, 128)])
    assert out.metadata[0].device.type == "cpu"  # input_id: PyG's host index of the batch
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        batch = loader.filter_fn(out)
        torch.cuda.synchronize()
    pageable = [e.name for e in prof.events() if "Pageable" in e.name]
    assert pageable == [] and batch.input_id.is_cuda
    assert_same(batch, ref)


def test_pin_memory_is_left_to_batches_cut_on_the_host():
    """A batch cut on a GPU holds GPU tensors, which torch's pin_memory cannot pin; one cut on the host is pinned."""
    from sparsetrain.pyg.loader import unpinned_on_gpu

    asked = {"pin_memory": True, "num_workers": 2}
    assert unpinned_on_gpu(asked, torch.device("cuda")) == {"pin_memory": False, "num_workers": 2}
    assert unpinned_on_gpu(asked, torch.device("cuda", 1))["pin_memory"] is False
    assert unpinned_on_gpu(asked, None) == unpinned_on_gpu(asked, torch.device("cpu")) == asked


@pytest.mark.gpu
@pytest.mark.parametrize("workers", [0, 2])
def test_pin_memory_with_device_cuda_gives_the_cpu_batches(workers):
    data = small_graph()
    kw = dict(num_neighbors=[5, 3], batch_size=64, seed=3)
    loader = stp.NeighborLoader(data, device="cuda", pin_memory=True, num_workers=workers, **kw)
    for ours, ref in zip(batches(loader), batches(stp.NeighborLoader(data, **kw)), strict=True):
        assert ours.x.is_cuda and ours.input_id.is_cuda
        assert_same(ours, ref)


def test_a_batch_is_finished_on_the_device_as_data_to_moves_it():
    """Every attribute Data.to moves (a SparseTensor too) reaches the device; plain values stay as they are."""
    SparseTensor = pytest.importorskip("torch_sparse").SparseTensor  # not on PyPI for every torch

    from sparsetrain.pyg.device import Placement

    placement = Placement(small_graph(), "meta")  # any device a CPU machine has: the move is what is checked
    adj_t = SparseTensor(row=torch.tensor([0, 1, 1]), col=torch.tensor([1, 0, 2]), sparse_sizes=(3, 3))
    batch = placement.finish(Data(x=torch.randn(3, 2), adj_t=adj_t, input_id=torch.arange(3), batch_size=3))
    assert (batch.x.device.type, batch.input_id.device.type, batch.adj_t.device().type) == ("meta",) * 3
    assert batch.batch_size == 3 and batch.adj_t.sparse_sizes() == (3, 3)
