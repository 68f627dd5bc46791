"""The differentiable all-to-all of rows: the one token / sequence exchange of MoE expert
parallelism and the sequence-parallel graph transformer.

``torch.distributed.nn.functional.all_to_all_single`` computes the same thing (same rows and
gradients under gloo on torch 2.13; the tests check this function against it), but torch 2.13
deprecates it with a ``FutureWarning`` on every call in favour of a private module, and it
leaves the caller to move CUDA tensors to the CPU for gloo. So the exchange is written here
once, on the public ``dist.all_to_all_single``, with the communication device applied inside.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from sparsetrain.collective.errors import CollectiveInputError
from sparsetrain.collective.groups import comm_device, group_info


def _send_rows(x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    dev = comm_device(group, x.device)
    out = torch.empty((sum(recv), *x.shape[1:]), dtype=x.dtype, device=dev)
    dist.all_to_all_single(out, x.contiguous().to(dev), recv, send, group=group)
    return out.to(x.device)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, send, recv, group):
        ctx.send, ctx.recv, ctx.group = send, recv, group
        return _send_rows(x, send, recv, group)

    @staticmethod
    def backward(ctx, grad):
        return _send_rows(grad, ctx.recv, ctx.send, ctx.group), None, None, None


def all_to_all(x: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int], group=None) -> torch.Tensor:
    """Rows ``x[sum(send_splits[:r]) : ...]`` go to rank ``r``; returns the rows received, in rank order.

    Variable splits along dim 0; differentiable (backward is the reverse exchange). The result
    is on ``x``'s device whatever the backend needs in transit. Without a process group (or with
    one rank) ``x`` itself is returned. Waits at most the group's timeout.
    """
    info = group_info(group)
    send, recv = [int(s) for s in send_splits], [int(s) for s in recv_splits]
    if len(send) != info.world_size or len(recv) != info.world_size:
        raise CollectiveInputError(
            f"all_to_all: got {len(send)} send and {len(recv)} receive splits for a group of {info.world_size} ranks; "
            "pass one split per rank"
        )
    if sum(send) != x.shape[0]:
        raise CollectiveInputError(f"all_to_all: send splits add up to {sum(send)} rows but x has {x.shape[0]}; make "
                                   "them add up to x.shape[0]")
    if info.world_size == 1:
        return x
    return _AllToAll.apply(x, send, recv, group)
