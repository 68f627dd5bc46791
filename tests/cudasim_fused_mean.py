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


def assert_same_as_unfused(fanouts, key=3, **kw):
    g = graph()
    x = np.random.default_rng(0).standard_normal((NUM_NODES, WIDTH)).astype(np.float32)
    inp = SamplerInput(torch.tensor([2, 7, 30]), key=key)
    full = NeighborSampler(g, fanouts, seed=9, **kw).sample(inp)
    fused = NeighborSampler(g, fanouts, seed=9, fuse_last_hop=True, **kw).sample(inp)
    outer = full.blocks[0]
    src, dst = outer.edge_index
    rows = torch.from_numpy(x)[full.input_nodes][src]
    reference = torch.zeros(outer.num_dst, WIDTH).scatter_reduce_(0, dst[:, None].expand(-1, WIDTH), rows, "mean",
                                                                  include_self=False)
    out, bad = gpu_mean(g, fused, x)
    assert bad == -1, bad
    assert outer.num_edges > 0
    np.testing.assert_allclose(out, reference.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out, fused.last_hop.mean(x).numpy())  # the CPU kernel, bit for bit


def check_uniform():
    assert_same_as_unfused([2, 3])


def check_uniform_with_replacement():
    assert_same_as_unfused([2, 3], replace=True)


def check_weighted_both_ways():
    assert_same_as_unfused([2, 3], weighted=True)
    assert_same_as_unfused([3], key=5, weighted=True, replace=True)


def check_every_in_edge_and_new_nodes_only():
    assert_same_as_unfused([2, -1])
    assert_same_as_unfused([2, 2], hop_nodes="new")


def check_damaged_graph_is_reported():
    g = graph()
    indices = g.indices.clone()
    indices[:] = 10**6
    damaged = CSCGraph(g.indptr, indices)
    fused = NeighborSampler(damaged, [2], seed=0, fuse_last_hop=True).sample(torch.tensor([0, 1]))
    _, bad = gpu_mean(damaged, fused, np.zeros((NUM_NODES, WIDTH), np.float32))
    assert bad == 0, bad


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
