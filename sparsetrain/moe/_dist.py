"""Small torch.distributed helpers for the sharded expert modes (work without a process group too)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def rank_and_world(group=None) -> tuple[int, int]:
    """``(rank, world_size)`` in ``group``; ``(0, 1)`` when torch.distributed is not initialized."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def comm_device(group, device: torch.device) -> torch.device:
    """Where payload must live for ``group``'s backend: CUDA for NCCL, CPU for gloo."""
    return device if "nccl" in str(dist.get_backend(group)).lower() else torch.device("cpu")


def all_reduce_sum(t: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``t`` over ``group`` (a new tensor; ``t`` itself when there is no process group)."""
    if rank_and_world(group)[1] == 1:
        return t
    dev = comm_device(group, t.device)
    buf = t.detach().to(dev, copy=True)
    dist.all_reduce(buf, group=group)
    return buf.to(t.device)


def all_gather_rows(t: torch.Tensor, group=None) -> torch.Tensor:
    """``[W, *t.shape]``: every rank's ``t`` (same shape on every rank)."""
    world = rank_and_world(group)[1]
    if world == 1:
        return t.unsqueeze(0)
    dev = comm_device(group, t.device)
    out = [torch.empty_like(t, device=dev) for _ in range(world)]
    dist.all_gather(out, t.to(dev), group=group)
    return torch.stack(out).to(t.device)


def _a2a(x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    dev = comm_device(group, x.device)
    out = torch.empty((sum(recv), *x.shape[1:]), dtype=x.dtype, device=dev)
    dist.all_to_all_single(out, x.contiguous().to(dev), recv, send, group=group)
    return out.to(x.device)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, send, recv, group):
        ctx.send, ctx.recv, ctx.group = send, recv, group
        return _a2a(x, send, recv, group)

    @staticmethod
    def backward(ctx, grad):
        return _a2a(grad, ctx.recv, ctx.send, ctx.group), None, None, None


def all_to_all(x: torch.Tensor, send_splits: list[int], recv_splits: list[int], group=None) -> torch.Tensor:
    """Differentiable variable-split all-to-all of rows (backward: the reverse exchange)."""
    if rank_and_world(group)[1] == 1:
        return x
    return _AllToAll.apply(x, list(send_splits), list(recv_splits), group)
