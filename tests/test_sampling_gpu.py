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
