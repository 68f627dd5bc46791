"""The fused last hop's CUDA kernels under the Numba CUDA simulator, checked against the unfused CPU sampler's
outermost block (a scatter mean of its gathered rows).

Run by tests/test_fused_last_hop.py with NUMBA_ENABLE_CUDASIM=1 (set before numba.cuda is imported). Prints one JSON
object: check name -> "ok" or the failure.
"""

from __future__ import annotations

import json
import os
import traceback
import warnings

import numpy as np
import torch

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "run with NUMBA_ENABLE_CUDASIM=1"

from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput  # noqa: E402
from sparsetrain.sampling.cuda.arrays import NumpyArrays  # noqa: E402
from sparsetrain.sampling.cuda.fused_mean import fused_mean_arrays  # noqa: E402

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
    assert bad == 0, bad


def check_the_samplers_gpu_branch_fuses_as_its_cpu_branch():
    """``NeighborSampler._sample_cuda`` with fusion (the hops before the last, the last hop's destinations and key),
    its driver run over NumPy arrays: the same batch and mean as the CPU branch."""
    from sparsetrain.sampling.cuda import driver
    from sparsetrain.sampling.cuda import graph as cuda_graph

    def layers_on_numpy(views, seeds, layout, keys, replace, weighted, new_only, seed_type, padded, capture=False):
        indptr, indices, weights = views.numpy()
        with np.errstate(all="ignore"):
            layers, nodes = driver.sample_arrays(NumpyArrays(), indptr, indices, weights if weighted else
                                                 np.empty(1, np.float32), seeds.numpy(), layout, keys, replace,
                                                 weighted, new_only=new_only, seed_type=seed_type)
        tensors = [(torch.from_numpy(ei), torch.from_numpy(ids), seg, before, after)
                   for ei, ids, seg, before, after in layers]
        return tensors, [torch.from_numpy(n) for n in nodes]

    saved = driver.sample_layers, cuda_graph.CudaGraph
    driver.sample_layers, cuda_graph.CudaGraph = layers_on_numpy, lambda g: g
    try:
        g = graph()
        x = np.random.default_rng(1).standard_normal((NUM_NODES, WIDTH)).astype(np.float32)
        for fanouts, kw in (([2, 3], {}), ([3, 2, 2], {"hop_nodes": "new"}), ([4], {"weighted": True})):
            inp = SamplerInput(torch.tensor([2, 7, 30]), key=5)
            on_cpu = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw)
            on_gpu = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw)
            on_gpu._placement = "cuda"
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
        driver.sample_layers, cuda_graph.CudaGraph = saved


CHECKS = {name: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    results = {}
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    print(json.dumps(results))
