"""A padded batch's sampling captured once and replayed (sampling/cuda/capture.py) on a GPU. Under the CUDA simulator
(its record of every device operation stands for the CUDA graph) the captured checks of cudasim_sampling.py run with
the other sampling checks, in tests/test_sampling_cuda.py."""

from __future__ import annotations

import pytest
import torch


def _gpu_sampler(fanouts, batch_size: int):
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.sampling import CSCGraph, NeighborSampler
    from sparsetrain.sampling.cuda.padded import PaddedOut

    gen = torch.Generator().manual_seed(0)
    g = CSCGraph.from_edge_index(torch.randint(0, 5000, (2, 60000), generator=gen), 5000).to("cuda")
    shapes = StepShapes.bound(batch_size, fanouts, g.num_nodes, num_edges=g.num_edges)
    out = PaddedOut.allocate(shapes.nodes, shapes.edges, lambda s: torch.zeros(s, dtype=torch.int64, device="cuda"))
    return NeighborSampler(g, fanouts, seed=3), NeighborSampler(g, fanouts, seed=3), out  # (the second: eager)


@pytest.mark.gpu
def test_captured_gpu_batches_equal_eager_batches():
    """capture=True on a GPU: each batch (eager, captured, replayed, a smaller one eager) is the eager sampler's batch
    of its seeds and key; a replay is one graph launch and one copy, with no synchronizing call."""
    from sparsetrain._late_reads import LateChecks
    from sparsetrain.sampling import SamplerInput

    sampler, reference, out = _gpu_sampler([15, 10, 5], 455)
    gen = torch.Generator().manual_seed(1)
    ring = LateChecks.RING
    for key in range(3 * ring):
        smaller = key == 2 * ring + 1
        seeds = torch.randperm(5000, generator=gen)[: 300 if smaller else 455].cuda()
        if key == 3 * ring - 1:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        try:
            sampler.sample_padded(SamplerInput(seeds, key=key), out, capture=True)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        graphs = sampler.last_batch_counts.total.graphs
        assert graphs == (key >= ring and not smaller), (key, sampler.last_batch_counts.as_dict())
        sampler.check_padded()
        eager = reference.sample(SamplerInput(seeds, key=key))
        edges, levels = out.unpadded(out.sizes.tolist())
        assert torch.equal(levels[-1], eager.input_nodes), key
        for hop, block in enumerate(reversed(eager.blocks)):
            assert torch.equal(edges[hop], block.edge_index), (key, hop)
    assert sampler.last_batch_counts.total.launches == 2


@pytest.mark.gpu
def test_captured_batches_stay_right_when_the_host_runs_ahead():
    """The race test: the device sleeps before each batch, so the host queues batch after batch ahead of it and the
    ring of pinned uploads fills (the host waits when it is ``RING`` batches ahead: counted). Each batch's buffers are
    copied on the device after it (no host read), and every batch, eager, captured and replayed, is compared at the
    end with the eager sampler's batch of its seeds and key."""
    from sparsetrain._late_reads import LateChecks
    from sparsetrain.sampling import SamplerInput
    from sparsetrain.sampling.cuda.padded import PaddedOut

    sampler, reference, out = _gpu_sampler([15, 10, 5], 455)
    gen = torch.Generator().manual_seed(2)
    kept, waits = [], 0
    for key in range(4 * LateChecks.RING):
        seeds = torch.randperm(5000, generator=gen)[:455].cuda()
        torch.cuda._sleep(5_000_000)  # a few ms of device time before each batch: the host runs ahead
        sampler.sample_padded(SamplerInput(seeds, key=key), out, capture=True)
        waits += sampler.last_batch_counts.total.syncs
        kept.append((seeds, PaddedOut(out.nodes, out.edges, out.node_ids.clone(), [e.clone() for e in out.edge_index],
                                      out.sizes.clone())))
    sampler.check_padded()
    torch.cuda.synchronize()
    assert waits > 0, "the host never ran a ring ahead: no race was tried"
    for key, (seeds, batch) in enumerate(kept):
        eager = reference.sample(SamplerInput(seeds, key=key))
        edges, levels = batch.unpadded(batch.sizes.tolist())
        assert torch.equal(levels[-1], eager.input_nodes), key
        for hop, block in enumerate(reversed(eager.blocks)):
            assert torch.equal(edges[hop], block.edge_index), (key, hop)


@pytest.mark.gpu
def test_captured_gpu_bad_seeds_raise_late():
    from sparsetrain._late_reads import LateChecks
    from sparsetrain.errors import InputError
    from sparsetrain.sampling import SamplerInput

    sampler, _, out = _gpu_sampler([5, 5], 3)
    for key in range(2 * LateChecks.RING):  # every ring slot eager, then captured
        sampler.sample_padded(SamplerInput(torch.tensor([1, 2, 3], device="cuda"), key=key), out, capture=True)
    sampler.sample_padded(torch.tensor([7, 3, 7], device="cuda"), out, capture=True)  # replayed, not yet checked
    assert sampler.last_batch_counts.total.graphs == 1
    with pytest.raises(InputError, match="seed 7 appears more than once"):
        sampler.check_padded()


@pytest.mark.gpu
def test_captured_sampling_feeds_the_captured_step_as_eager_sampling_does():
    """``SampledLoader(capture=True)`` before a static step replayed as a CUDA graph (two graphs a step): the same
    losses as the eager padded sampling into the same step."""
    import copy

    from sparsetrain.engine.loader import Loader
    from sparsetrain.engine.static.sampled_loader import SampledLoader
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.engine.static.step import StaticStep
    from sparsetrain.nn.models import GraphSAGE

    sampler, twin, _ = _gpu_sampler([5, 5], 64)
    gen = torch.Generator().manual_seed(2)
    features, labels = torch.randn(5000, 16, generator=gen).cuda(), torch.randint(0, 4, (5000,), generator=gen).cuda()
    torch.manual_seed(0)
    model = GraphSAGE(16, 32, 4, num_layers=2, dropout=0.0).cuda()
    shapes = StepShapes.bound(64, [5, 5], 5000, num_edges=sampler.graph.num_edges)
    losses = []
    for s, m, capture in [(sampler, model, False), (twin, copy.deepcopy(model), True)]:
        step = StaticStep(m, torch.optim.Adam(m.parameters(), lr=0.01, capturable=True), shapes, 16, device="cuda",
                          mode="graph")
        loader = Loader(s, features, labels, torch.arange(0, 1600), batch_size=64, prefetch=0, seed=4, device="cuda")
        sampled = SampledLoader(loader, step, features, labels, capture=capture)
        losses.append(torch.stack([step.step(batch) for batch in sampled.epoch(0)]).cpu())  # 25 full batches
    assert twin.last_batch_counts.total.graphs == 1 and sampler.last_batch_counts.total.graphs == 0
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)


def _gpu_fused(fanouts, batch_size: int, width: int = 16):
    """A fused sampler on a random graph on the GPU, its twin, a static batch of its shapes and a feature table."""
    from sparsetrain.engine.static.padded_batch import StaticBatch
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.sampling import CSCGraph, NeighborSampler

    gen = torch.Generator().manual_seed(0)
    g = CSCGraph.from_edge_index(torch.randint(0, 5000, (2, 60000), generator=gen), 5000).to("cuda")
    shapes = StepShapes.bound(batch_size, fanouts, g.num_nodes, num_edges=g.num_edges, fuse_last_hop=True)
    features = torch.randn(5000, width, generator=gen).cuda()
    samplers = [NeighborSampler(g, fanouts, seed=3, fuse_last_hop=True) for _ in range(2)]
    return *samplers, StaticBatch(shapes, width, "cuda"), features


@pytest.mark.gpu
def test_captured_fused_gpu_batches_equal_eager_fused_batches():
    """A fused sampler's padded batches on a GPU (eager, captured, replayed, a smaller one eager): the eager fused
    sampler's blocks and mean, the rows past the last level zero; a replay makes no synchronizing call."""
    from sparsetrain._late_reads import LateChecks
    from sparsetrain.sampling import SamplerInput

    sampler, reference, batch, features = _gpu_fused([15, 10, 5], 455)
    gen = torch.Generator().manual_seed(1)
    ring = LateChecks.RING
    if True:  # (a failed capture raises BackendError)
        for key in range(3 * ring):
            smaller = key == 2 * ring + 1
            seeds = torch.randperm(5000, generator=gen)[: 300 if smaller else 455].cuda()
            if key == 3 * ring - 1:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                sampler.sample_padded(SamplerInput(seeds, key=key), batch.padded, capture=True, features=features)
            finally:
                torch.cuda.set_sync_debug_mode(0)
            assert sampler.last_batch_counts.total.graphs == (key >= ring and not smaller), key
            sampler.check_padded()
            eager = reference.sample(SamplerInput(seeds, key=key))
            sizes = batch.sizes.tolist()
            edges, levels = batch.padded.unpadded(sizes)
            n = eager.input_nodes.numel()
            assert torch.equal(levels[-1], eager.input_nodes), key
            for hop, block in enumerate(reversed(eager.blocks)):
                assert torch.equal(edges[hop], block.edge_index), (key, hop)
            assert torch.equal(batch.neighbor_mean[:n], eager.last_hop.mean(features)), key
            assert not batch.neighbor_mean[n:].any(), key
    assert sampler.last_batch_counts.total.launches == 2


@pytest.mark.gpu
def test_captured_fused_sampling_feeds_the_captured_step_as_the_loader_does():
    """--step static --fuse-last-hop on a GPU: SampledLoader(capture=True) over a fused sampler trains as the captured
    step on the Loader's fused batches (the mean drawn at fetch): the same losses."""
    import copy

    from sparsetrain.engine.loader import Loader
    from sparsetrain.engine.static.sampled_loader import SampledLoader
    from sparsetrain.engine.static.step import StaticStep
    from sparsetrain.nn.models import GraphSAGE

    sampler, twin, batch, features = _gpu_fused([5, 5, 5], 64)
    labels = torch.randint(0, 4, (5000,), generator=torch.Generator().manual_seed(2)).cuda()
    torch.manual_seed(0)
    model = GraphSAGE(16, 32, 4, num_layers=3, dropout=0.0).cuda()
    losses = []
    for s, m, sampled in [(sampler, model, False), (twin, copy.deepcopy(model), True)]:
        step = StaticStep(m, torch.optim.Adam(m.parameters(), lr=0.01, capturable=True), batch.shapes, 16,
                          device="cuda", mode="graph")
        loader = Loader(s, features, labels, torch.arange(0, 1600), batch_size=64, prefetch=0, seed=4, device="cuda")
        batches = SampledLoader(loader, step, features, labels, capture=True).epoch(0) if sampled else loader.epoch(0)
        losses.append(torch.stack([step.step(mb) for mb in batches]).cpu())  # 25 full batches
    assert twin.last_batch_counts.total.graphs == 1
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)
