"""The collectives on CUDA tensors: gloo moving CUDA rows through host memory (one GPU is enough), and NCCL
(one GPU per rank). Skipped without CUDA; run on the lent GPU machine."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

from sparsetrain.collective import RowPlacement, ShardedFeatures, all_to_all, sparse_all_gather, sparse_reduce_scatter
from tests.collective_harness import free_port, spawn, values

pytestmark = [pytest.mark.gpu, pytest.mark.distributed]


def _cuda_checks(rank: int, world: int) -> dict[str, float]:
    """Max abs error of gather, gradient and reduce-scatter on CUDA against a CPU dense reference."""
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    g = torch.Generator().manual_seed(0)
    table = torch.randn(101, 3, 2, generator=g, dtype=torch.float64)
    errors = {}
    for name, placement in {
        "contiguous": RowPlacement.contiguous(101, world),
        "replicas": RowPlacement.from_owner(torch.arange(101) % world, world).with_replicas(
            {0: list(range(world)), 7: [0]}
        ),
    }.items():
        ids = torch.randint(0, 101, (300,), generator=torch.Generator().manual_seed(rank))
        leaf = placement.shard(table, rank).to(dev).requires_grad_(True)
        out = sparse_all_gather(leaf, ids.to(dev), placement=placement)
        errors[f"{name} gather"] = (out.detach().cpu() - table[ids]).abs().max().item()
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(10 + rank), dtype=torch.float64)
        (out * w.to(dev)).sum().backward()
        ref = table.clone().requires_grad_(True)
        (ref[ids] * w).sum().backward()
        total = ref.grad.to(dev)
        dist.all_reduce(total)
        expected = torch.zeros_like(leaf)
        expected[: placement.num_owned(rank)] = total[placement.owned_ids(rank).to(dev)]
        errors[f"{name} gradient"] = (leaf.grad - expected).abs().max().item()
        direct = sparse_reduce_scatter(w.to(dev), ids.to(dev), placement=placement)
        errors[f"{name} reduce_scatter"] = (direct - expected).abs().max().item()
    store = ShardedFeatures.from_table(table, device=dev, cache_ids=torch.arange(0, 101, 5))
    ids = torch.randint(0, 101, (200,), generator=torch.Generator().manual_seed(20 + rank))
    errors["sharded features"] = (store.gather(ids.to(dev)).cpu() - table[ids]).abs().max().item()
    # the differentiable all-to-all: rank r sends r + 1 rows to every rank; the result stays on the rank's device
    def rows(src: int) -> torch.Tensor:
        return table[: (src + 1) * world] + 1000 * src

    x = rows(rank).to(dev).requires_grad_(True)
    y = all_to_all(x, [rank + 1] * world, [src + 1 for src in range(world)])
    expected = torch.cat([rows(src)[(src + 1) * rank : (src + 1) * (rank + 1)] for src in range(world)])
    errors["all_to_all gather"] = (y.detach().cpu() - expected).abs().max().item() + float(y.device != dev)
    (y * 2).sum().backward()
    errors["all_to_all gradient"] = (x.grad.cpu() - 2).abs().max().item() + float(x.grad.device != dev)
    return errors


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("world", [1, 2])
def test_cuda_rows_over_gloo(world):
    for checks in values(spawn(_cuda_checks, world, timeout_s=300)):
        # rows are copied bit for bit; sums of duplicate ids' gradients run in another order on the GPU (float64)
        assert all(err == 0 for name, err in checks.items() if "gather" in name or "features" in name), checks
        assert all(err <= 1e-12 for err in checks.values()), checks


def _nccl_entry(rank: int, world: int, port: int, queue) -> None:
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))  # fmt: skip
    try:
        queue.put((rank, _cuda_checks(rank, world)))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs one GPU per rank (2 GPUs)")
def test_nccl():
    import torch.multiprocessing as mp

    world = min(torch.cuda.device_count(), 4)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(_nccl_entry, args=(world, free_port(), queue), nprocs=world, start_method="spawn")
    for _ in range(world):
        rank, checks = queue.get(timeout=60)
        assert all(err == 0 for err in checks.values()), (rank, checks)
