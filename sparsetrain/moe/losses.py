"""Auxiliary router losses (Switch/GShard load balancing, router z-loss) and the ``aux`` record.

Both losses are written as *shares*: with ``T_global`` tokens over all ranks and global expert
counts, each rank's value is ``W * (its tokens' part of the global loss)``, so the mean over
ranks (what data-parallel gradient averaging computes) is exactly the global-batch loss. In
one process ``W = 1`` and the share is the loss itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MoEAux:
    """Auxiliary outputs of one :class:`~sparsetrain.moe.MoE` call."""

    loss: torch.Tensor  #: ``aux_loss_weight * load_balancing_loss + z_loss_weight * z_loss`` (add it to the task loss)
    load_balancing_loss: torch.Tensor  #: Switch/GShard ``E * sum_i f_i * P_i`` (fp32 or fp64), 1.0 when balanced
    z_loss: torch.Tensor  #: mean over tokens of ``logsumexp(logits)^2``
    counts: torch.Tensor  #: ``[E]`` int64 tokens routed to each expert by this rank (before capacity drops)
    dropped: torch.Tensor  #: int64 scalar, expert assignments dropped by the capacity limit on this rank
    router_logits: torch.Tensor | None = None  #: ``[T, E]`` router logits of this call's tokens (fp32 or fp64)


def load_balancing_loss(
    scores: torch.Tensor,
    global_counts: torch.Tensor,
    global_tokens: int,
    top_k: int,
    *,
    world_size: int = 1,
    normalize_scores: bool = False,
) -> torch.Tensor:
    """Switch/GShard load-balancing loss ``E * sum_i f_i * P_i`` (this rank's share).

    ``f_i = global_counts[i] / (global_tokens * top_k)`` is the fraction of assignments expert
    ``i`` received (no gradient); ``P_i`` is the mean router score of expert ``i`` over all tokens
    (sigmoid scores are first normalized per token, so both score kinds give 1.0 when balanced).
    """
    num_experts = scores.shape[-1]
    tiny = torch.finfo(scores.dtype).tiny
    s = scores / scores.sum(dim=-1, keepdim=True).clamp_min(tiny) if normalize_scores else scores
    if global_tokens == 0:
        return s.sum() * 0.0
    f = global_counts.to(s.dtype) / float(global_tokens * top_k)
    p_sum = s.sum(dim=0)
    return (num_experts * world_size / float(global_tokens)) * (f * p_sum).sum()


def router_z_loss(logits: torch.Tensor, global_tokens: int, *, world_size: int = 1) -> torch.Tensor:
    """ST-MoE router z-loss ``mean(logsumexp(logits)^2)`` over all tokens (this rank's share)."""
    if global_tokens == 0:
        return logits.sum() * 0.0
    return torch.logsumexp(logits, dim=-1).square().sum() * (world_size / float(global_tokens))
