"""Token dispatch: sort (token, expert) assignments by expert, apply the capacity policy, combine.

Drop policy (``capacity_factor`` set): each expert takes at most
``capacity = ceil(capacity_factor * T * top_k / num_experts)`` assignments of the ``T`` local
tokens. Assignments are ranked first by choice (every token's 1st choice before any 2nd
choice, as in GShard), then by token order; the ones past the capacity are dropped. A dropped
assignment contributes nothing (the remaining weights are not rescaled); a token whose every
choice was dropped gets zero from the routed experts (shared experts and the residual path still
apply).

Permute once, combine once: :func:`permute` gathers the tokens into expert-sorted order and :func:`combine` gathers
the expert outputs back into choice-major order and sums the ``k`` choices of each token. Both are gathers in the
forward *and* the backward (custom autograd functions: the backward of a gather by a permutation is the gather by
its inverse), so no step scatters with accumulation or fills a ``[tokens, d]`` buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class DispatchPlan:
    """Where every kept assignment goes, in expert-sorted order."""

    order: torch.Tensor  #: ``[N]`` index into the choice-major flattened ``[k * T]`` assignments
    tokens: torch.Tensor  #: ``[N]`` token id of each sorted assignment
    experts: torch.Tensor  #: ``[N]`` expert id of each sorted assignment (non-decreasing)
    counts: torch.Tensor  #: ``[E]`` kept assignments per expert (int64)
    selected: torch.Tensor  #: ``[E]`` selected assignments per expert before drops (int64)
    dropped: torch.Tensor  #: int64 scalar, number of dropped assignments
    inverse: torch.Tensor  #: ``[k * T]`` sorted position of each choice-major assignment (``N`` when dropped)
    num_tokens: int = 0  #: ``T``
    top_k: int = 1  #: ``k``

    @property
    def has_drops(self) -> bool:
        """Whether some assignment was dropped (``N < k * T``)."""
        return self.order.numel() < self.inverse.numel()


def capacity(num_tokens: int, top_k: int, num_experts: int, capacity_factor: float) -> int:
    """Per-expert capacity ``ceil(capacity_factor * tokens * top_k / num_experts)``."""
    return int(math.ceil(capacity_factor * num_tokens * top_k / num_experts))


def plan_dispatch(experts: torch.Tensor, num_experts: int, capacity_factor: float | None = None) -> DispatchPlan:
    """Sort the ``[T, k]`` expert choices by expert (stable, choice-major) and drop overflow."""
    num_tokens, k = experts.shape
    flat = experts.t().reshape(-1)
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    selected = torch.bincount(flat, minlength=num_experts)
    counts = selected
    dropped = torch.zeros((), dtype=torch.int64, device=experts.device)
    if capacity_factor is not None:
        cap = capacity(num_tokens, k, num_experts, capacity_factor)
        starts = torch.cumsum(selected, 0) - selected
        pos = torch.arange(order.numel(), device=experts.device) - starts[sorted_e]
        keep = pos < cap
        order, sorted_e = order[keep], sorted_e[keep]
        counts = selected.clamp(max=cap)
        dropped = (~keep).sum()
    tokens = order % num_tokens if num_tokens else order
    inverse = torch.full_like(flat, order.numel()) if capacity_factor is not None else torch.empty_like(flat)
    inverse[order] = torch.arange(order.numel(), device=experts.device)
    return DispatchPlan(order=order, tokens=tokens, experts=sorted_e, counts=counts, selected=selected, dropped=dropped,
                        inverse=inverse, num_tokens=num_tokens, top_k=k)


def _sum_choices(rows: torch.Tensor, plan: DispatchPlan) -> torch.Tensor:
    """``out[t] = sum_j rows[inverse[j * T + t]]`` with dropped assignments contributing zero (``[T, d]``)."""
    if plan.has_drops:
        rows = torch.cat([rows, rows.new_zeros(1, rows.shape[1])])
    picked = rows.index_select(0, plan.inverse)
    if plan.top_k == 1:
        return picked
    return picked.view(plan.top_k, plan.num_tokens, rows.shape[1]).sum(0)


class _Permute(torch.autograd.Function):
    """``x [T, d] -> x[tokens] [N, d]``; backward: the sum over each token's sorted rows, by gathers."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, plan: DispatchPlan) -> torch.Tensor:
        ctx.plan = plan
        return x.index_select(0, plan.tokens)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _sum_choices(grad.contiguous(), ctx.plan), None


class _Unpermute(torch.autograd.Function):
    """``rows [N, d]`` in sorted order ``-> [T, d]``, the sum of each token's rows; backward: ``grad[tokens]``."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, plan: DispatchPlan) -> torch.Tensor:
        ctx.plan = plan
        return _sum_choices(rows, plan)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad.contiguous().index_select(0, ctx.plan.tokens), None


def permute(x: torch.Tensor, plan: DispatchPlan) -> torch.Tensor:
    """The kept assignments' token rows in expert-sorted order (``[N, d]``); differentiable, gathers both ways."""
    return _Permute.apply(x, plan)


def combine(expert_out: torch.Tensor, plan: DispatchPlan, weights: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``y[t] = sum over kept assignments a of t: weight[a] * expert_out[a]`` (``[T, d]``; ``num_tokens`` is
    ``plan.num_tokens``, kept for callers)."""
    w = weights.t().reshape(-1).index_select(0, plan.order).to(expert_out.dtype)
    weighted = expert_out * w.unsqueeze(1)
    return _Unpermute.apply(weighted, plan)
