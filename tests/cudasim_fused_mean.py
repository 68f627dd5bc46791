"""The fused last hop's CUDA kernels under the Numba CUDA simulator, checked against the unfused CPU sampler's
outermost block (a scatter mean of its gathered rows).

Run by tests/test_fused_last_hop.py with NUMBA_ENABLE_CUDASIM=1 (set before numba.cuda is imported). Prints one JSON
object: check name -> "ok" or the failure.
"""

from __future__ import annotations

import os

import numpy as np
import torch

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "run with NUMBA_ENABLE_CUDASIM=1"

from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput  # noqa: E402
from sparsetrain.sampling.cuda.arrays import NumpyArrays  # noqa: E402
from sparsetrain.sampling.cuda.fused_mean import fused_mean_arrays  # noqa: E402
from sparsetrain.sampling.gpu_backend import GpuBackend  # noqa: E402

NUM_NODES, WIDTH = 50, 3


def graph(seed=0) -> CSCGraph:
    g = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, NUM_NODES, (2, 400), generator=g), dim=1)
    weights = torch.rand(ei.shape[1], generator=g)
    weights[::5] = 0
    return CSCGraph.from_edge_index(ei, NUM_NODES, weights)


def gpu_mean(g: CSCGraph, fused, x: np.ndarray):
    """The simulated kernels' mean rows for a fused batch, and the damage check's answer."""
    hop = fused.last_hop
    indptr, indices, weights = g.numpy()
    weights = weights if hop.weighted else np.empty(1, np.float32)
    out = np.full((hop.num_dst, x.shape[1]), np.nan, np.float32)
    with np.errstate(all="ignore"):  # uint64 products wrap on purpose
        bad = fused_mean_arrays(NumpyArrays(), indptr, indices, weights, hop.nodes.numpy(), hop.first, hop.fanout,
                                hop.key, hop.replace, hop.weighted, NUM_NODES, x, out)
    return out, bad


def assert_same_as_unfused(fanouts, key=3, width=WIDTH, **kw):
    g = graph()
    x = np.random.default_rng(0).standard_normal((NUM_NODES, width)).astype(np.float32)
    inp = SamplerInput(torch.tensor([2, 7, 30]), key=key)
    full = NeighborSampler(g, fanouts, seed=9, **kw).sample(inp)
    fused = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw).sample(inp)
    outer = full.blocks[0]
    src, dst = outer.edge_index
    rows = torch.from_numpy(x)[full.input_nodes][src]
    reference = torch.zeros(outer.num_dst, width).scatter_reduce_(0, dst[:, None].expand(-1, width), rows, "mean",
                                                                  include_self=False)
    out, bad = gpu_mean(g, fused, x)
    assert bad == -1, bad
    assert outer.num_edges > 0
    np.testing.assert_allclose(out, reference.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out, fused.last_hop.mean(x).numpy())  # the CPU kernel, bit for bit


def check_uniform():
    assert_same_as_unfused([2, 3])


def check_rows_wider_than_a_thread_block():
    assert_same_as_unfused([3], width=40)  # two blocks of columns


def check_uniform_with_replacement():
    assert_same_as_unfused([2, 3], replace=True)


def check_weighted_both_ways():
    assert_same_as_unfused([2, 3], weighted=True)
    assert_same_as_unfused([3], key=5, weighted=True, replace=True)


def check_every_in_edge_and_new_nodes_only():
    assert_same_as_unfused([2, -1])
    assert_same_as_unfused([2, 2**31 - 1])  # scratch sized by the largest in-degree, not the fanout
    assert_same_as_unfused([2, 2], hop_nodes="new")


def check_damaged_graph_is_reported():
    g = graph()
    indices = g.indices.clone()
    indices[:] = 10**6
    damaged = CSCGraph(g.indptr, indices)
    fused = NeighborSampler(damaged, [2], seed=0, fuse_last_hop=True).sample(torch.tensor([0, 1]))
    _, bad = gpu_mean(damaged, fused, np.zeros((NUM_NODES, WIDTH), np.float32))
    assert bad == 1, bad  # nodes 0 and 1 are both damaged: the largest is named


def check_the_samplers_gpu_branch_fuses_as_its_cpu_branch():
    """``NeighborSampler's GPU backend`` with fusion (the hops before the last, the last hop's destinations and key),
    its driver run over NumPy arrays: the same batch and mean as the CPU branch."""
    from sparsetrain.sampling.cuda import driver
    from sparsetrain.sampling.cuda import graph as cuda_graph

    def layers_on_numpy(views, seeds, layout, keys, replace, weighted, new_only, seed_type, padded, capture=False,
                        fused=None):
        indptr, indices, weights = views.numpy()
        with np.errstate(all="ignore"):
            layers, nodes = driver.sample_arrays(NumpyArrays(), indptr, indices, weights if weighted else
                                                 np.empty(1, np.float32), seeds.numpy(), layout, keys, replace,
                                                 weighted, new_only=new_only, seed_type=seed_type)
        tensors = [(torch.from_numpy(ei), torch.from_numpy(ids), seg, before, after)
                   for ei, ids, seg, before, after in layers]
        return tensors, [torch.from_numpy(n) for n in nodes]

    saved = driver.sample_layers, cuda_graph.DeviceCSC
    driver.sample_layers, cuda_graph.DeviceCSC = layers_on_numpy, lambda g: g
    try:
        g = graph()
        x = np.random.default_rng(1).standard_normal((NUM_NODES, WIDTH)).astype(np.float32)
        for fanouts, kw in (([2, 3], {}), ([3, 2, 2], {"hop_nodes": "new"}), ([4], {"weighted": True})):
            inp = SamplerInput(torch.tensor([2, 7, 30]), key=5)
            on_cpu = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw)
            on_gpu = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw)
            on_gpu._backend = GpuBackend(on_gpu, None)  # the GPU backend over the host graph
            a, b = on_cpu.sample(inp), on_gpu.sample(inp)
            assert torch.equal(a.input_nodes, b.input_nodes) and len(a.blocks) == len(b.blocks)
            for mine, theirs in zip(b.blocks, a.blocks):
                assert torch.equal(mine.edge_index, theirs.edge_index)
            assert (a.last_hop.first, a.last_hop.num_dst, a.last_hop.key) == (b.last_hop.first, b.last_hop.num_dst,
                                                                           b.last_hop.key)
            assert torch.equal(a.last_hop.nodes, b.last_hop.nodes)
            out, bad = gpu_mean(g, b, x)
            assert bad == -1
            np.testing.assert_array_equal(out, a.last_hop.mean(x).numpy())
    finally:
        driver.sample_layers, cuda_graph.DeviceCSC = saved


class SimulatedGraph:
    """What ``NeighborSampler's GPU backend`` keeps of its graph (a ``DeviceCSC``), for the simulator: the CSCGraph and
    one workspace over NumPy arrays."""

    def __init__(self, graph: CSCGraph) -> None:
        from sparsetrain.sampling.cuda.workspace import DeviceWorkspace

        self.graph, self.ws = graph, DeviceWorkspace(NumpyArrays())

    def workspace(self):
        return self.ws

    @property
    def last_batch_counts(self):
        return self.ws.last_counts


def simulated_layers(g: SimulatedGraph, seeds, layout, keys, replace, weighted, new_only=False, seed_type=0,
                     padded=None, capture=False, fused=None):
    """``driver.sample_layers`` over NumPy views of the sampler's CPU tensors (padded buffers and features too)."""
    import dataclasses

    from sparsetrain.sampling.cuda import driver
    from sparsetrain.sampling.cuda.padded import PaddedOut

    indptr, indices, weights = g.graph.numpy()
    if padded is not None:
        padded = PaddedOut(padded.nodes, padded.edges, padded.node_ids.numpy(), [e.numpy() for e in padded.edge_index],
                           padded.sizes.numpy(), None if padded.neighbor_mean is None else padded.neighbor_mean.numpy())
    if fused is not None:
        fused = dataclasses.replace(fused, features=fused.features.numpy())
    with np.errstate(all="ignore"):
        out = driver.sample_arrays(NumpyArrays(), indptr, indices, weights if weighted else np.empty(1, np.float32),
                                   seeds.numpy(), layout, keys, replace, weighted, new_only=new_only,
                                   seed_type=seed_type, workspace=g.ws, padded=padded, capture=capture, fused=fused)
    if padded is not None:
        return None
    layers, nodes = out
    return ([(torch.from_numpy(ei), torch.from_numpy(ids), seg, before, after) for ei, ids, seg, before, after in
             layers], [torch.from_numpy(n) for n in nodes])


class on_the_simulator:
    """``samplers`` draw their GPU batches (``sample``, ``sample_padded``) with the driver under the simulator."""

    def __init__(self, *samplers) -> None:
        self.samplers = samplers

    def __enter__(self):
        from sparsetrain.sampling.cuda import driver
        from sparsetrain.sampling.cuda import graph as cuda_graph

        self.saved = driver.sample_layers, cuda_graph.DeviceCSC
        driver.sample_layers, cuda_graph.DeviceCSC = simulated_layers, SimulatedGraph
        for sampler in self.samplers:
            sampler._backend = GpuBackend(sampler, None)  # the GPU backend over the host graph
        return self

    def __exit__(self, *exc) -> None:
        from sparsetrain.sampling.cuda import driver
        from sparsetrain.sampling.cuda import graph as cuda_graph

        driver.sample_layers, cuda_graph.DeviceCSC = self.saved


def padded_fused(batch_size, fanouts, g, width):
    """A static step's buffers for a fused sampler (StaticBatch), every entry set to garbage first."""
    from sparsetrain.engine.static.padded_batch import StaticBatch
    from sparsetrain.engine.static.shapes import StepShapes

    shapes = StepShapes.bound(batch_size, fanouts, g.num_nodes, num_edges=g.num_edges, max_degree=NUM_NODES,
                              fuse_last_hop=True)
    batch = StaticBatch(shapes, width)
    batch.neighbor_mean.fill_(float("nan"))
    batch.node_ids.fill_(7)
    return batch


def check_padded_fused_batches_equal_the_fused_sampler():
    """sample_padded of a fused sampler: the hops before the last into the padded buffers, the last hop's mean into
    neighbor_mean, zero past the last level's count; the CPU fused sampler's batch and mean, bit for bit, for full and
    smaller batches in the same buffers, and no host read."""
    g = graph()
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((NUM_NODES, 40)).astype(np.float32))
    for fanouts, kw in (([3, 2], {}), ([2, 2, 3], {"hop_nodes": "new"}), ([4], {}), ([2, -1], {"weighted": True}),
                        ([3, 2], {"replace": True})):
        batch = padded_fused(4, fanouts, g, 40)
        on_gpu = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw)
        on_cpu = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw)
        with on_the_simulator(on_gpu):
            for key, seeds in enumerate(([2, 7, 30, 11], [5], [40, 1, 3, 8])):
                inp = SamplerInput(torch.tensor(seeds), key=key)
                on_gpu.sample_padded(inp, batch.padded, features=x)
                counts = on_gpu.last_batch_counts.as_dict()
                mb = on_cpu.sample(inp)
                sizes = batch.sizes.tolist()
                levels = [len(seeds)] + [b.num_src for b in reversed(mb.blocks)]
                assert sizes == levels + [b.num_edges for b in reversed(mb.blocks)], (fanouts, sizes)
                edges, nodes = batch.padded.unpadded(sizes)
                assert torch.equal(nodes[-1], mb.input_nodes), (fanouts, key)
                for hop, block in enumerate(reversed(mb.blocks)):
                    assert torch.equal(edges[hop], block.edge_index), (fanouts, key, hop)
                n = mb.input_nodes.numel()
                mean = batch.neighbor_mean
                assert torch.equal(mean[:n], mb.last_hop.mean(x)), (fanouts, key)
                assert not mean[n:].any() and mean[:n].abs().sum() > 0, (fanouts, key)
                assert counts["batch"]["syncs"] == 0, counts
                assert counts["fused hop"] == {"launches": 2, "kernels": 2, "torch_ops": 0, "copies": 0, "syncs": 0,
                                               "allocations": 3 * (key == 0), "pinned_allocations": 0, "graphs": 0}
        on_gpu.check_padded()


def check_a_damaged_graph_under_the_fused_padded_hop_raises_late():
    """The fused hop's damage check rides in the padded batch's record: raised at the next batch or check_padded."""
    from sparsetrain.errors import InputError

    g = graph()
    damaged = CSCGraph(g.indptr, torch.full_like(g.indices, 10**6))
    sampler = NeighborSampler(damaged, [-1], seed=0, fuse_last_hop=True)  # one hop: only the fused one reads indices
    batch = padded_fused(2, [3], g, WIDTH)
    x = torch.zeros(NUM_NODES, WIDTH)
    with on_the_simulator(sampler):
        sampler.sample_padded(SamplerInput(torch.tensor([4, 9]), key=0), batch.padded, features=x)  # queued
        try:
            sampler.check_padded()
        except InputError as exc:
            assert "CSCGraph.indices: the in-edges of node 9 lie outside the graph" in str(exc), str(exc)
        else:
            raise AssertionError("a damaged graph under the fused hop raised nothing")


def check_a_padded_fused_batch_without_its_mean_is_refused_in_one_line():
    from sparsetrain.errors import InputError

    g = graph()
    batch, x = padded_fused(2, [3, 2], g, WIDTH), torch.zeros(NUM_NODES, WIDTH)
    fused, plain = (NeighborSampler(g, [3, 2], seed=0, fuse_last_hop=f) for f in (True, False))
    narrow = padded_fused(2, [3, 2], g, WIDTH + 1).padded
    with on_the_simulator(fused, plain):
        for call, fragment in [(lambda: fused.sample_padded(torch.tensor([1, 2]), batch.padded), "pass both"),
                               (lambda: plain.sample_padded(torch.tensor([1, 2]), batch.padded, features=x),
                                "neither for an unfused sampler"),
                               (lambda: fused.sample_padded(torch.tensor([1, 2]), narrow, features=x),
                                f"the fused hop writes [{narrow.nodes[-1]}, {WIDTH}] float32")]:
            try:
                call()
            except InputError as exc:
                assert fragment in str(exc) and "\n" not in str(exc), str(exc)
            else:
                raise AssertionError(f"{fragment!r}: no error")


def check_captured_fused_sampled_loader_trains_as_the_loader():
    """--step static --fuse-last-hop on a GPU: SampledLoader(capture=True) over a fused sampler (ring of two: batches
    eager, captured, replayed, the epoch's smaller last one eager) trains as the static step on the Loader's fused
    batches (neighbor_mean from the fetch stage): the same losses and weights."""
    import copy

    from sparsetrain._late_reads import LateChecks
    from sparsetrain.engine.loader import Loader
    from sparsetrain.engine.static.sampled_loader import SampledLoader
    from sparsetrain.engine.static.shapes import StepShapes
    from sparsetrain.engine.static.step import StaticStep
    from sparsetrain.nn.models import GraphSAGE

    g = graph(seed=4)
    gen = torch.Generator().manual_seed(1)
    features, labels = torch.randn(NUM_NODES, 8, generator=gen), torch.randint(0, 4, (NUM_NODES,), generator=gen)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 4, num_layers=2, dropout=0.0)
    shapes = StepShapes.bound(6, [4, 3], NUM_NODES, num_edges=g.num_edges, fuse_last_hop=True)
    steps = [StaticStep(m, torch.optim.Adam(m.parameters(), lr=0.01), shapes, 8) for m in (model, copy.deepcopy(model))]
    samplers = [NeighborSampler(g, [4, 3], seed=5, fuse_last_hop=True) for _ in range(2)]
    loader = Loader(samplers[0], features, labels, torch.arange(0, 45), batch_size=6, prefetch=0, seed=4)
    twin = Loader(samplers[1], features, labels, torch.arange(0, 45), batch_size=6, prefetch=0, seed=4)
    sampled = SampledLoader(twin, steps[1], features, labels, capture=True)
    ring, LateChecks.RING = LateChecks.RING, 2
    try:
        with on_the_simulator(samplers[1]):
            graphs = []
            for mb, padded in zip(loader.epoch(0), sampled.epoch(0), strict=True):
                graphs.append(samplers[1].last_batch_counts.total.graphs)
                assert padded is steps[1].batch and mb.neighbor_mean is not None
                loss, padded_loss = steps[0].step(mb), steps[1].step(padded)
                assert torch.allclose(padded_loss, loss, rtol=1e-5, atol=1e-6), (graphs, padded_loss, loss)
    finally:
        LateChecks.RING = ring
    assert graphs == [0, 0, 1, 1, 1, 1, 1, 0], graphs  # 7 full batches of 6, then 3 seeds
    for a, b in zip(*(s.model.parameters() for s in steps)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), "weights differ"


if __name__ == "__main__":
    from cudasim_main import run_checks

    run_checks(globals())
