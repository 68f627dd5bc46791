"""Dense collectives on small tensors (counts, routing statistics, flat gradients); no-ops without a process group."""

from __future__ import annotations

import torch
import torch.distributed as dist

from sparsetrain.collective.groups import comm_device, group_info


def all_reduce_sum(t: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``t`` over ``group`` (a new tensor on ``t``'s device; ``t`` itself when there is one rank)."""
    if group_info(group).world_size == 1:
        return t
    buf = t.detach().to(comm_device(group, t.device), copy=True)
    dist.all_reduce(buf, group=group)
    return buf.to(t.device)


def all_gather_rows(t: torch.Tensor, group=None) -> torch.Tensor:
    """``[W, *t.shape]``: every rank's ``t`` (same shape on every rank), on ``t``'s device."""
    world = group_info(group).world_size
    if world == 1:
        return t.unsqueeze(0)
    dev = comm_device(group, t.device)
    out = [torch.empty_like(t, device=dev) for _ in range(world)]
    dist.all_gather(out, t.to(dev), group=group)
    return torch.stack(out).to(t.device)
