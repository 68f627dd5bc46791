"""Token dispatch: sort (token, expert) assignments by expert, apply the capacity policy, combine.

Drop policy (``capacity_factor`` set): each expert takes at most
``capacity = ceil(capacity_factor * T * top_k / num_experts)`` assignments of the ``T`` local
tokens. Assignments are ranked first by choice (every token's 1st choice before any 2nd
choice, as in GShard), then by token order; the ones past the capacity are dropped. A dropped
assignment contributes nothing (the remaining weights are not rescaled); a token whose every
choice was dropped gets zero from the routed experts (shared experts and the residual path still
apply).
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
    return DispatchPlan(order=order, tokens=tokens, experts=sorted_e, counts=counts, selected=selected, dropped=dropped)


def combine(expert_out: torch.Tensor, plan: DispatchPlan, weights: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``y[t] = sum over kept assignments a of t: weight[a] * expert_out[a]`` (``[T, d]``)."""
    w = weights.t().reshape(-1)[plan.order].to(expert_out.dtype)
    weighted = expert_out * w.unsqueeze(1)
    if plan.order.numel() == weights.numel():
        # nothing dropped: un-sort to choice-major [k, T, d] and sum the k choices; a gather, whose backward
        # is cheaper than index_add's scatter on the CPU
        inverse = torch.empty_like(plan.order)
        inverse[plan.order] = torch.arange(plan.order.numel(), device=plan.order.device)
        return weighted.index_select(0, inverse).view(weights.shape[1], num_tokens, weighted.shape[-1]).sum(0)
    return weighted.new_zeros(num_tokens, weighted.shape[-1]).index_add(0, plan.tokens, weighted)
