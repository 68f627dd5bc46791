"""Loader, block-by-block models and checkpoints against independent references."""

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import sparsetrain as st
from sparsetrain.engine.checkpoint import list_checkpoints, load_latest_checkpoint, save_checkpoint
from sparsetrain.engine.host_memory import retain_freed_host_memory
from sparsetrain.engine.inference import infer_layers
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.stages import Producer
from sparsetrain.engine.stages.device import map_tensors
from sparsetrain.errors import CheckpointError, LoaderError
from sparsetrain.nn.models import GAT, GCN, GraphSAGE, block_adj_t, sources_and_targets
from sparsetrain.sampling import Block, NeighborSampler, SamplerInput
from sparsetrain.sampling.clusters import BatchClusters, ClusteredMiniBatch
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE


@pytest.fixture(scope="module")
def cora(cora_data, tmp_path_factory):
    return st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("cora") / "cora", quiet=True)


def full_edge_index(graph):
    col = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degrees())
    return torch.stack([graph.indices.long(), col])


def test_loader_attaches_the_right_rows_and_covers_every_seed_once(cora):
    sampler = NeighborSampler(cora.graph, [5, 5], seed=1)
    loader = Loader(sampler, cora.features, cora.labels, cora.split["test"], batch_size=128, seed=3)
    seen = []
    for mb in loader:
        assert torch.equal(mb.x, cora.features[mb.input_nodes])
        assert torch.equal(mb.y, cora.labels[mb.seeds])
        seen.append(mb.seeds)
    seen = torch.cat(seen)
    assert len(loader) == 8
    assert torch.equal(seen.sort().values, cora.split["test"].sort().values)
    assert 0 <= loader.last_epoch_stats.stall_fraction <= 1 and loader.last_epoch_stats.seeds == 1000


def test_loader_over_a_plain_tensor_gives_its_rows(cora):
    table = cora.features.tensor().clone()
    loader = Loader(NeighborSampler(cora.graph, [3, 3], seed=0), table, cora.labels, cora.split["val"], batch_size=100)
    for mb in loader:
        assert torch.equal(mb.x, table[mb.input_nodes])
    assert retain_freed_host_memory() is retain_freed_host_memory()  # applied once per process


def test_loader_over_learnable_features_passes_gradients(cora):
    embedding = torch.nn.Embedding(cora.num_nodes, 8)
    loader = Loader(
        NeighborSampler(cora.graph, [2], seed=0),
        embedding.weight,
        None,
        cora.split["val"][:64],
        batch_size=64,
        prefetch=0,
    )
    (mb,) = list(loader)
    mb.x.sum().backward()
    touched = embedding.weight.grad.abs().sum(1) > 0
    assert torch.equal(touched.nonzero().view(-1), mb.input_nodes.sort().values)


def test_sources_and_targets_gradient_equals_a_slice():
    x = torch.randn(40, 6, dtype=torch.float64, requires_grad=True)
    upstream_all, upstream_dst = torch.randn(40, 6, dtype=torch.float64), torch.randn(15, 6, dtype=torch.float64)

    def grad(pair):
        x_all, x_dst = pair(x)
        return torch.autograd.grad((x_all.sin() * upstream_all).sum() + (x_dst * upstream_dst).sum(), x)[0]

    assert torch.allclose(grad(lambda x: sources_and_targets(x, 15)), grad(lambda x: (x, x[:15])))
    (only_dst,) = torch.autograd.grad((sources_and_targets(x, 15)[1] * upstream_dst).sum(), x)
    assert torch.equal(only_dst[:15], upstream_dst) and not only_dst[15:].any()


def test_loader_is_a_pure_function_of_seed_epoch_and_position(cora):
    def run(epoch, start=0, prefetch=2):
        sampler = NeighborSampler(cora.graph, [4, 3], seed=11)
        loader = Loader(
            sampler, cora.features, cora.labels, cora.split["val"], batch_size=64, seed=5, prefetch=prefetch
        )
        return [(mb.seeds, mb.input_nodes) for mb in loader.epoch(epoch, start)]

    a, b = run(2), run(2, prefetch=0)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))
    resumed = run(2, start=3)
    assert all(torch.equal(x[1], y[1]) for x, y in zip(a[3:], resumed))
    other = run(3)
    assert not torch.equal(a[0][0], other[0][0])


def test_loader_ranks_split_the_seeds(cora):
    sampler = NeighborSampler(cora.graph, [2], seed=0)
    shares = [
        torch.cat(
            [
                mb.seeds
                for mb in Loader(
                    sampler, cora.features, cora.labels, cora.split["test"], batch_size=100, rank=r, world_size=3
                ).epoch(0)
            ]
        )
        for r in range(3)
    ]
    assert all(len(s) == 333 for s in shares)
    assert torch.cat(shares).unique().numel() == 999


def test_loader_raises_the_producer_error(cora):
    class Broken:
        shape = cora.features.shape

        def gather(self, ids):
            raise RuntimeError("disk on fire")

    loader = Loader(NeighborSampler(cora.graph, [2], seed=0), Broken(), cora.labels, cora.split["val"], batch_size=50)
    with pytest.raises(RuntimeError, match="disk on fire"):
        list(loader)


def test_loader_calls_a_stuck_or_dead_producer_an_error(cora):
    release = threading.Event()

    class Stuck:  # a gather that never returns, like one waiting on a stopped peer rank
        shape = cora.features.shape

        def gather(self, ids):
            release.wait(30)
            return torch.zeros(len(ids), 4)

    loader = Loader(
        NeighborSampler(cora.graph, [2], seed=0), Stuck(), cora.labels, cora.split["val"], batch_size=50, timeout=0.5
    )
    started = time.monotonic()
    try:
        with pytest.raises(LoaderError, match="no batch for 0.5 s; it is stuck"):
            list(loader)
        assert time.monotonic() - started < 10
    finally:
        release.set()


def test_loader_notices_a_producer_thread_that_ended_without_a_word(cora, monkeypatch):
    monkeypatch.setattr(Producer, "_run", lambda self: None)
    loader = Loader(
        NeighborSampler(cora.graph, [2], seed=0), cora.features, cora.labels, cora.split["val"], batch_size=50
    )
    with pytest.raises(LoaderError, match="ended without"):
        list(loader)


def test_loader_checks_the_sampler_returns_a_minibatch(cora):
    class Pairs:
        def sample(self, inp):
            return inp.seeds, inp.key

    with pytest.raises(LoaderError, match="Pairs.sample returned a tuple"):
        list(Loader(Pairs(), cora.features, cora.labels, cora.split["val"], batch_size=50, prefetch=0))


def test_loader_hands_samplers_keyed_inputs_matching_seed_batches(cora):
    seen = []

    class Recording:
        def __init__(self):
            self.inner = NeighborSampler(cora.graph, [2], seed=0)

        def sample(self, inp):
            seen.append(inp)
            return self.inner.sample(inp)

    seeds = cora.split["test"]
    list(Loader(Recording(), cora.features, cora.labels, seeds, batch_size=100, seed=4, rank=1, world_size=2).epoch(3))
    share = seeds[torch.randperm(len(seeds), generator=torch.Generator().manual_seed(4 * 1_000_003 + 3))][500:1000]
    assert all(isinstance(inp, SamplerInput) for inp in seen)
    assert torch.equal(torch.cat([inp.seeds for inp in seen]), share)
    assert [inp.key for inp in seen] == [(3 * 10 + i) * 2 + 1 for i in range(5)]  # sampling/batch_keys.py


def test_map_tensors_reaches_every_tensor_of_a_batch():
    groups = BatchClusters(torch.tensor([0, 0, 1]), torch.tensor([0, 0, 0]))
    block = Block({EDGE_TYPE: torch.tensor([[1, 2], [0, 0]])}, {NODE_TYPE: 3}, {NODE_TYPE: 1})
    mb = ClusteredMiniBatch({NODE_TYPE: torch.tensor([5])}, {NODE_TYPE: torch.tensor([5, 7, 9])}, [block],
                            {NODE_TYPE: torch.ones(3, 2)}, torch.tensor([4]), seed_type=NODE_TYPE, groups=groups)
    doubled = map_tensors(mb, lambda t: t * 2)
    assert isinstance(doubled, ClusteredMiniBatch) and doubled.blocks[0].num_src == 3
    assert torch.equal(doubled.input_nodes, torch.tensor([10, 14, 18])) and torch.equal(doubled.y, torch.tensor([8]))
    assert torch.equal(doubled.blocks[0].edge_index, torch.tensor([[2, 4], [0, 0]])) and torch.equal(
        doubled.x, torch.full((3, 2), 2.0)
    )
    assert torch.equal(doubled.groups.clusters, torch.tensor([0, 0, 2])) and torch.equal(mb.x, torch.ones(3, 2))


_ALLOCATOR_PROBE = r"""
import ctypes, ctypes.util, json, os, sys
import torch
from sparsetrain.engine import Loader, Trainer, host_memory
from sparsetrain.nn import GraphSAGE
from sparsetrain.sampling import CSCGraph, NeighborSampler

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

def big_block_is_mmapped():  # glibc's default serves 64 MiB with its own mmap; the tuned heap does not
    before = libc.mallinfo2().hblks
    block = libc.malloc(64 << 20)
    mapped = libc.mallinfo2().hblks > before
    libc.free(block)
    return mapped

g = torch.Generator().manual_seed(0)
graph = CSCGraph.from_edge_index(torch.randint(0, 200, (2, 2000), generator=g), 200)
loader = Loader(NeighborSampler(graph, [3], seed=0), torch.randn(200, 8, generator=g),
                torch.randint(0, 3, (200,), generator=g), torch.arange(200), batch_size=50)
seen = {"fresh": big_block_is_mmapped()}
list(loader)
seen["after_loader"] = big_block_is_mmapped()
model = GraphSAGE(8, 8, 3, num_layers=1)
os.environ["SPARSETRAIN_KEEP_MALLOC"] = "1"  # the opt-out: the Trainer leaves the allocator alone
Trainer(model, loader, torch.optim.Adam(model.parameters()), epochs=1)
seen["after_trainer_kept"] = big_block_is_mmapped()
del os.environ["SPARSETRAIN_KEEP_MALLOC"]
host_memory._applied = None  # decided once per process; as if this were a fresh one
Trainer(model, loader, torch.optim.Adam(model.parameters()), epochs=1)
seen["after_trainer"] = big_block_is_mmapped()
json.dump(seen, sys.stdout)
"""


@pytest.mark.skipif(
    not hasattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallinfo2"), reason="needs glibc >= 2.33"
)
def test_a_plain_loader_leaves_the_allocator_alone_and_the_trainer_tunes_it():
    """One process: a plain loader, a Trainer under SPARSETRAIN_KEEP_MALLOC=1, then one without it."""
    env = {k: v for k, v in os.environ.items() if k != "SPARSETRAIN_KEEP_MALLOC"}
    run = subprocess.run([sys.executable, "-c", _ALLOCATOR_PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen == {"fresh": True, "after_loader": True, "after_trainer_kept": True, "after_trainer": False}


@pytest.mark.parametrize("make", [GraphSAGE, GAT, GCN])
def test_block_forward_with_all_neighbors_equals_the_full_graph_model(cora, make):
    torch.manual_seed(0)
    model = make(cora.num_features, 32, cora.num_classes, num_layers=2).eval()
    ei = full_edge_index(cora.graph)
    n = cora.num_nodes
    spmm, model.spmm = model.spmm, False  # the reference aggregates with PyG's scatter on the whole graph
    reference = model(cora.features.tensor(), [(ei, (n, n))] * 2)
    model.spmm = spmm
    assert torch.allclose(
        infer_layers(model, cora.features, cora.graph, 300, torch.device("cpu"), None, None), reference, atol=1e-5
    )
    if make is GCN:
        return  # GCN normalizes by block degrees: a sampled block is not the full graph
    seeds = torch.tensor([0, 5, 17, 2000, 2707])
    mb = NeighborSampler(cora.graph, [-1, -1], seed=0).sample(seeds)
    out = model(cora.features[mb.input_nodes], mb.to_pyg())
    assert torch.allclose(out, reference[seeds], atol=1e-5)


def test_sparse_adjacency_path_equals_edge_index_path(cora):
    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 16, cora.num_classes, 2, spmm=False).eval()
    mb = NeighborSampler(cora.graph, [5, 5], seed=2).sample(torch.arange(0, 300, 7))
    shuffled = []
    for ei, size in mb.to_pyg():  # also when the edges do not come grouped by dst
        perm = torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(0))
        shuffled.append((block_adj_t(ei[:, perm], *size), size))
    x = cora.features[mb.input_nodes]
    expected = model(x, mb.to_pyg())
    assert torch.allclose(model(x, shuffled), expected, atol=1e-5)
    model.spmm = True
    assert torch.allclose(model(x, mb.to_pyg()), expected, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # adjacency values follow the features' precision
        for blocks in (mb.to_pyg(), shuffled):
            assert torch.allclose(model(x, blocks).float(), expected, atol=0.1, rtol=0.05)


def test_checkpoints_keep_the_newest_and_fall_back_on_damage(tmp_path):
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, {"w": torch.full((3,), float(step)), "step": step}, keep=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step-0000000004.pt",
        "step-0000000003.pt",
        "step-0000000002.pt",
    ]
    assert load_latest_checkpoint(tmp_path)["step"] == 4
    newest = list_checkpoints(tmp_path)[0]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="falling back"):
        assert load_latest_checkpoint(tmp_path)["step"] == 3
    for p in tmp_path.glob("*.sha256"):
        p.write_text("0" * 64)
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="none of the 3"):
        load_latest_checkpoint(tmp_path)


def test_checkpoints_never_unpickle_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    save_checkpoint(tmp_path, 1, {"ok": torch.zeros(1)})
    import hashlib

    path = tmp_path / "step-0000000002.pt"
    torch.save({"evil": Evil()}, path)
    (tmp_path / "step-0000000002.pt.sha256").write_text(hashlib.sha256(path.read_bytes()).hexdigest() + "  x\n")
    with pytest.warns(UserWarning, match="cannot be loaded safely"):
        state = load_latest_checkpoint(tmp_path)
    assert set(state) == {"ok"}
