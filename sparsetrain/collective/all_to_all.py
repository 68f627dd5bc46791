"""The differentiable all-to-all of rows: the one token / sequence exchange of MoE expert
parallelism and the sequence-parallel graph transformer.

``torch.distributed.nn.functional.all_to_all_single`` computes the same thing (same rows and
gradients under gloo on torch 2.13; the tests check this function against it), but torch 2.13
deprecates it with a ``FutureWarning`` on every call in favour of a private module, and it
leaves the caller to move CUDA tensors to the CPU for gloo. So the exchange is written here
once, on the public ``dist.all_to_all_single``, with the communication device applied inside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from sparsetrain.collective.groups import comm_device, group_info
from sparsetrain.errors import InputError


def _send_rows(x: torch.Tensor, send: list[int], recv: list[int], group, async_op: bool = False):
    """The exchange on the backend's device; the rows received, back on ``x``'s device (or a wait giving them)."""
    dev = comm_device(group, x.device)
    out = torch.empty((sum(recv), *x.shape[1:]), dtype=x.dtype, device=dev)
    work = dist.all_to_all_single(out, x.contiguous().to(dev), recv, send, group=group, async_op=async_op)
    if not async_op:
        return out.to(x.device)

    def wait() -> torch.Tensor:
        work.wait()
        return out.to(x.device)

    return wait


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
    send, recv, world = _splits(x, send_splits, recv_splits, group)
    if world == 1:
        return x
    return _AllToAll.apply(x, send, recv, group)


def all_to_all_start(x: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int],
                     group=None) -> Callable[[], torch.Tensor]:
    """:func:`all_to_all` in the background, not differentiable: starts the exchange and returns a call that waits
    for it and gives the rows received (the caller works while the backend's threads move them)."""
    send, recv, world = _splits(x, send_splits, recv_splits, group)
    if world == 1:
        return lambda: x
    return _send_rows(x, send, recv, group, async_op=True)


def _splits(x: torch.Tensor, send_splits, recv_splits, group) -> tuple[list[int], list[int], int]:
    """The splits as lists of ints, checked against the group and ``x``; and the group's size."""
    info = group_info(group)
    send, recv = [int(s) for s in send_splits], [int(s) for s in recv_splits]
    if len(send) != info.world_size or len(recv) != info.world_size:
        raise InputError(
            f"all_to_all: got {len(send)} send and {len(recv)} receive splits for a group of {info.world_size} ranks; "
            "pass one split per rank"
        )
    if sum(send) != x.shape[0]:
        raise InputError(f"all_to_all: send splits add up to {sum(send)} rows but x has {x.shape[0]}; make "
                         "them add up to x.shape[0]")
    return send, recv, info.world_size
