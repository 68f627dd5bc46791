"""The GPU sampler on a real device: the same batches as the CPU sampler (graph in device memory or pinned)."""

from __future__ import annotations

import pytest
import torch

from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput

pytestmark = pytest.mark.gpu


def graph(weighted: bool = False) -> CSCGraph:
    g = torch.Generator().manual_seed(0)
    ei = torch.unique(torch.randint(0, 5000, (2, 100_000), generator=g), dim=1)
    return CSCGraph.from_edge_index(ei, 5000, torch.rand(ei.shape[1], generator=g) if weighted else None)


@pytest.mark.parametrize("where", ["device", "pinned"])
@pytest.mark.parametrize("kw", [{}, {"replace": True}, {"weighted": True, "replace": True}])
def test_gpu_batches_equal_cpu_batches(where, kw):
    host = graph(weighted="weighted" in kw)
    on_gpu = host.to("cuda") if where == "device" else host.pin_memory()
    seeds = torch.arange(0, 5000, 11)
    cpu = NeighborSampler(host, [15, 10, 5], seed=3, **kw).sample(SamplerInput(seeds, key=4))
    gpu = NeighborSampler(on_gpu, [15, 10, 5], seed=3, **kw).sample(SamplerInput(seeds.cuda(), key=4))
    assert gpu.input_nodes.is_cuda and all(b.edge_index.is_cuda for b in gpu.blocks)
    assert torch.equal(gpu.input_nodes.cpu(), cpu.input_nodes)
    for a, b in zip(gpu.blocks, cpu.blocks):
        assert (a.num_src, a.num_dst) == (b.num_src, b.num_dst)
        assert torch.equal(a.edge_index.cpu(), b.edge_index)


def test_gpu_sampling_on_a_side_stream_equals_cpu_batches():
    """Kernels follow torch's current stream: sampling under a busy side stream still sees its own inputs in order."""
    host = graph()
    on_gpu = host.to("cuda")
    seeds = torch.arange(0, 5000, 7)
    cpu = NeighborSampler(host, [15, 10], seed=9).sample(SamplerInput(seeds, key=2))
    sampler = NeighborSampler(on_gpu, [15, 10], seed=9)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        busy = torch.randn(4096, 4096, device="cuda")
        for _ in range(8):  # queue work ahead of the sampler on the same stream
            busy = busy @ busy.T / 4096
        gpu = sampler.sample(SamplerInput(seeds.cuda(), key=2))
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(gpu.input_nodes.cpu(), cpu.input_nodes)
    for a, b in zip(gpu.blocks, cpu.blocks):
        assert torch.equal(a.edge_index.cpu(), b.edge_index)


@pytest.mark.parametrize("where", ["device", "pinned"])
@pytest.mark.parametrize("hop_nodes", ["all", "new"])
def test_typed_gpu_batches_equal_cpu_batches(where, hop_nodes):
    from tests.test_sampling_typed_digest import mag_like_graph

    host = mag_like_graph()
    on_gpu = host.to("cuda") if where == "device" else host.pin_memory()
    seeds = torch.arange(0, 900, 7)
    options = dict(seed=3, seed_type="paper", hop_nodes=hop_nodes)
    cpu = NeighborSampler(host, [10, 5], **options).sample(SamplerInput(seeds, key=4))
    gpu = NeighborSampler(on_gpu, [10, 5], **options).sample(SamplerInput(seeds.cuda(), key=4))
    assert gpu.is_typed and all(v.is_cuda for v in gpu.input_nodes.values())
    assert all(torch.equal(gpu.input_nodes[t].cpu(), cpu.input_nodes[t]) for t in cpu.input_nodes)
    for a, b in zip(gpu.blocks, cpu.blocks):
        assert (a.num_src, a.num_dst) == (b.num_src, b.num_dst) and list(a.edge_index) == list(b.edge_index)
        assert all(torch.equal(a.edge_index[et].cpu(), b.edge_index[et]) for et in b.edge_index)
        assert all(torch.equal(a.edge_ids[et].cpu(), b.edge_ids[et]) for et in b.edge_ids)


def test_gpu_node_sampling_waits_for_the_device_once_a_batch():
    """Counts stay on the device: the one synchronizing call of a batch is the read of its counts at the end."""
    import warnings

    sampler = NeighborSampler(graph().to("cuda"), [15, 10, 5], seed=3)
    seeds = torch.arange(0, 5000, 11, device="cuda")
    sampler.sample(SamplerInput(seeds, key=0))  # compiles the kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sampler.sample(SamplerInput(seeds, key=1))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = [f"{w.filename}:{w.lineno}" for w in caught if "called a synchronizing" in str(w.message)]
    assert len(syncs) == 1, syncs  # where each one was raised


def test_gpu_batch_counts_are_what_the_device_ran():
    """The driver's counts of a batch (the same as under the simulator, tests/cudasim_sampling.py) against the
    profiler's: every counted launch ran, and nothing else but the extra kernels of a scan (at most two a scan)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sampler = NeighborSampler(graph().to("cuda"), [15, 10, 5], seed=3)
    seeds = torch.arange(0, 5000, 11, device="cuda")
    sampler.sample(SamplerInput(seeds, key=0))  # compiles the kernels, fills the workspace
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sampler.sample(SamplerInput(seeds, key=1))
        torch.cuda.synchronize()
    counts = sampler.last_batch_counts
    hop = {"launches": 7, "kernels": 5, "torch_ops": 2, "copies": 0, "syncs": 0, "allocations": 0,
           "pinned_allocations": 0}
    assert all(counts.phases[f"hop {h}"].as_dict() == hop for h in range(3)), counts.table()
    total = counts.total
    assert (total.syncs, total.pinned_allocations, total.kernels) == (1, 0, 17), counts.table()
    ran = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    scans = 2 * 3
    assert total.launches <= len(ran) <= total.launches + scans, (counts.table(), sorted(e.name for e in ran))


def test_gpu_seeds_outside_the_graph_or_repeated_are_errors():
    from sparsetrain.errors import InputError

    sampler = NeighborSampler(graph().to("cuda"), [5, 5], seed=3)
    with pytest.raises(InputError, match=r"outside \[0, 5000\)"):
        sampler.sample(torch.tensor([1, 5000], device="cuda"))
    with pytest.raises(InputError, match="seed 7 appears more than once"):
        sampler.sample(torch.tensor([7, 3, 7], device="cuda"))


@pytest.mark.parametrize("seeds_on", ["cuda", "cpu"])
@pytest.mark.parametrize("neg_sampling, exclude", [("binary", "reverse"), ("triplet", "self")])
def test_link_gpu_batches_equal_cpu_batches(neg_sampling, exclude, seeds_on):
    """Seed edges on a GPU graph (given on the device or the host, as a loader hands them): negatives drawn as on the
    host, the same blocks, exclusion and label indices."""
    from sparsetrain.sampling import EdgeSamplerInput, LinkNeighborSampler

    host = graph()
    src, dst = host.to_edge_index()[:, :300]
    out = {}
    for where, g in (("cpu", host), ("cuda", host.to("cuda"))):
        sampler = LinkNeighborSampler(NeighborSampler(g, [10, 5], seed=2), neg_sampling=neg_sampling, amount=2,
                                      exclude=exclude)
        given = seeds_on if where == "cuda" else "cpu"
        out[where] = sampler.sample(EdgeSamplerInput(src.to(given), dst.to(given), key=3))
    cpu, gpu = out["cpu"], out["cuda"]
    assert gpu.input_nodes.is_cuda and torch.equal(gpu.input_nodes.cpu(), cpu.input_nodes)
    for a, b in zip(gpu.blocks, cpu.blocks):
        assert torch.equal(a.edge_index.cpu(), b.edge_index) and torch.equal(a.edge_ids.cpu(), b.edge_ids)
    for name in ("edge_label_index", "edge_label", "src_index", "dst_pos_index", "dst_neg_index"):
        want = getattr(cpu, name)
        assert (want is None) == (getattr(gpu, name) is None), name
        if want is not None:
            assert torch.equal(getattr(gpu, name).cpu(), want), name


def test_padded_gpu_batches_equal_eager_batches_without_a_host_wait():
    """A static step's batches (``sample_padded`` into buffers of its shapes): cut to their device sizes they are the
    eager batches of the same keys, and once the pinned ring is made a batch makes no synchronizing call."""
    import warnings

    from sparsetrain._late_reads import LateChecks
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.sampling.cuda.padded import PaddedOut

    g = graph().to("cuda")
    sampler = NeighborSampler(g, [15, 10, 5], seed=3)
    shapes = StepShapes.bound(455, [15, 10, 5], g.num_nodes, num_edges=g.num_edges)
    out = PaddedOut.allocate(shapes.nodes, shapes.edges, lambda s: torch.zeros(s, dtype=torch.int64, device="cuda"))
    batches = [torch.arange(0, 5000, 11, device="cuda"), torch.arange(3, 5000, 29, device="cuda")]
    for key in range(LateChecks.RING + 1):  # compiles the kernels, fills the workspace and the ring
        sampler.sample_padded(SamplerInput(batches[key % 2], key=key), out)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sampler.sample_padded(SamplerInput(batches[1], key=9), out)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert not [w for w in caught if "called a synchronizing" in str(w.message)], [str(w.message) for w in caught]
    assert sampler.last_batch_counts.total.syncs == 0
    sampler.check_padded()
    eager = sampler.sample(SamplerInput(batches[1], key=9))
    edges, levels = out.unpadded(out.sizes.tolist())
    assert torch.equal(levels[-1], eager.input_nodes)
    for hop, block in enumerate(reversed(eager.blocks)):
        assert torch.equal(edges[hop], block.edge_index) and len(levels[hop + 1]) == block.num_src


def test_padded_gpu_bad_seeds_raise_one_batch_late():
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.errors import InputError
    from sparsetrain.sampling.cuda.padded import PaddedOut

    g = graph().to("cuda")
    sampler = NeighborSampler(g, [5, 5], seed=3)
    shapes = StepShapes.bound(3, [5, 5], g.num_nodes, num_edges=g.num_edges)
    out = PaddedOut.allocate(shapes.nodes, shapes.edges, lambda s: torch.zeros(s, dtype=torch.int64, device="cuda"))
    sampler.sample_padded(torch.tensor([7, 3, 7], device="cuda"), out)  # queued, not yet checked
    with pytest.raises(InputError, match="seed 7 appears more than once"):
        sampler.check_padded()
