"""The CUDA loader path: batches equal the CPU loader's, whatever stream the training loop computes on."""

from __future__ import annotations

import pytest
import torch

from sparsetrain.engine import Loader
from sparsetrain.sampling import CSCGraph, NeighborSampler

pytestmark = pytest.mark.gpu


def _data():
    g = torch.Generator().manual_seed(0)
    graph = CSCGraph.from_edge_index(torch.unique(torch.randint(0, 4000, (2, 60000), generator=g), dim=1), 4000)
    return graph, torch.randn(4000, 32, generator=g), torch.randint(0, 5, (4000,), generator=g)


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("features_on", ["cpu", "cuda"])
def test_cuda_batches_equal_cpu_batches_on_a_side_compute_stream(prefetch, features_on):
    graph, feats, labels = _data()

    def loader(device, table):
        return Loader(
            NeighborSampler(graph, [6, 4], seed=1),
            table,
            labels,
            torch.arange(0, 4000, 3),
            batch_size=128,
            seed=2,
            prefetch=prefetch,
            device=device,
        )

    expected = list(loader("cpu", feats).epoch(1))
    compute = torch.cuda.Stream()
    sums, got = [], []
    with torch.cuda.stream(compute):
        for mb in loader("cuda", feats.to(features_on)).epoch(1):
            assert (
                mb.x.is_cuda
                and mb.y.is_cuda
                and mb.input_nodes.is_cuda
                and all(b.edge_index.is_cuda for b in mb.blocks)
            )
            sums.append(mb.x.double().sum(1))  # read on the compute stream, which must have waited for the copies
            got.append(mb)
    torch.cuda.synchronize()
    assert len(got) == len(expected)
    for mb, ref, s in zip(got, expected, sums):
        assert torch.equal(mb.input_nodes.cpu(), ref.input_nodes) and torch.equal(mb.y.cpu(), ref.y)
        assert torch.equal(mb.x.cpu(), ref.x) and torch.equal(s.cpu(), ref.x.double().sum(1))
        assert all(torch.equal(a.edge_index.cpu(), b.edge_index) for a, b in zip(mb.blocks, ref.blocks))
