"""The router: token scores over experts, top-k selection, combine weights, selection-only bias."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from sparsetrain.moe.errors import MoEConfigError

SCORES = ("softmax", "sigmoid")


@dataclass
class Routing:
    """What the router decided for ``T`` tokens."""

    logits: torch.Tensor  #: ``[T, E]`` raw router logits, at least fp32
    scores: torch.Tensor  #: ``[T, E]`` softmax probabilities or sigmoid scores
    experts: torch.Tensor  #: ``[T, k]`` chosen expert ids (int64), best first
    weights: torch.Tensor  #: ``[T, k]`` combine weights of the chosen experts (differentiable)


def router_dtype(dtype: torch.dtype) -> torch.dtype:
    """Router math runs in fp32, or fp64 when the input is fp64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class Router(nn.Module):
    """Linear router ``logits = x @ weight.T`` with softmax or sigmoid scores and top-k selection.

    ``renormalize`` rescales the k chosen weights to sum to one (default: on for sigmoid, off
    for softmax). With ``expert_bias=True`` a per-expert bias (a buffer, not a parameter) is
    added to the scores *for selection only*, DeepSeek-V3 style: the combine weights stay the
    unbiased scores, and :meth:`update_bias` nudges the bias toward balanced load outside autograd.
    """

    def __init__(
        self,
        d_model: int,
        num_experts: int,
        top_k: int,
        *,
        score: str = "softmax",
        renormalize: bool | None = None,
        expert_bias: bool = False,
        bias_update_rate: float = 1e-3,
    ) -> None:
        super().__init__()
        if score not in SCORES:
            raise MoEConfigError(f"MoE: router={score!r} is not known; use one of {SCORES}")
        if not 1 <= top_k <= num_experts:
            raise MoEConfigError(
                f"MoE: top_k={top_k} must be between 1 and num_experts={num_experts}; lower top_k or add experts"
            )
        self.num_experts = num_experts
        self.top_k = top_k
        self.score = score
        self.renormalize = (score == "sigmoid") if renormalize is None else bool(renormalize)
        self.bias_update_rate = float(bias_update_rate)
        self.weight = nn.Parameter(torch.empty(num_experts, d_model))
        bound = 1.0 / math.sqrt(d_model)
        nn.init.uniform_(self.weight, -bound, bound)
        if expert_bias:
            self.register_buffer("expert_bias", torch.zeros(num_experts, dtype=torch.float32))
        else:
            self.expert_bias = None

    def forward(self, x: torch.Tensor) -> Routing:
        """Route ``x`` of shape ``[T, d_model]``."""
        dt = router_dtype(x.dtype)
        logits = x.to(dt) @ self.weight.to(dt).t()
        scores = torch.softmax(logits, dim=-1) if self.score == "softmax" else torch.sigmoid(logits)
        pick = scores.detach()
        if self.expert_bias is not None:
            pick = pick + self.expert_bias.to(dt)
        experts = torch.topk(pick, self.top_k, dim=-1, sorted=True).indices
        weights = scores.gather(1, experts)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(dt).tiny)
        return Routing(logits=logits, scores=scores, experts=experts, weights=weights)

    @torch.no_grad()
    def update_bias(self, counts: torch.Tensor) -> None:
        """Aux-loss-free balancing: raise the bias of under-loaded experts, lower over-loaded ones.

        ``counts`` are tokens per expert over the period since the last update (all ranks summed
        under sharding, so every rank applies the same update).
        """
        if self.expert_bias is None:
            raise MoEConfigError("MoE.update_expert_bias: the layer was built without expert_bias=True")
        c = counts.to(torch.float32).to(self.expert_bias.device)
        self.expert_bias.add_(self.bias_update_rate * torch.sign(c.mean() - c))
