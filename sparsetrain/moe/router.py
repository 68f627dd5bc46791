"""The router: token scores over experts, top-k selection, combine weights, selection-only bias."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sparsetrain import _args
from sparsetrain.errors import SettingError, SettingTypeError

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
    for softmax); ``routed_scaling_factor`` then multiplies them (DeepSeek-V3: 2.5). With
    ``expert_bias=True`` a per-expert bias (a buffer, not a parameter) is added to the scores *for
    selection only*, DeepSeek-V3 style: the combine weights stay the unbiased scores, and
    :meth:`update_bias` nudges the bias toward balanced load outside autograd.

    Group-limited routing (``n_group`` > 1, DeepSeek-V3): the experts form ``n_group`` equal
    consecutive groups, a group's score is the sum of its two best (bias-corrected) expert scores,
    and each token picks its ``top_k`` experts only among its ``topk_group`` best groups.
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
        routed_scaling_factor: float = 1.0,
        n_group: int = 1,
        topk_group: int | None = None,
    ) -> None:
        super().__init__()
        check = {"error": SettingError, "type_error": SettingTypeError}
        d_model = _args.integer("MoE", "d_model", d_model, low=1, **check)
        num_experts = _args.integer("MoE", "num_experts", num_experts, low=1, **check)
        top_k = _args.integer("MoE", "top_k", top_k, low=1, high=num_experts, **check)
        renormalize = _args.boolean("MoE", "renormalize", renormalize, optional=True, type_error=SettingTypeError)
        expert_bias = _args.boolean("MoE", "expert_bias", expert_bias, type_error=SettingTypeError)
        bias_update_rate = _args.number("MoE", "bias_update_rate", bias_update_rate, low=0, **check)
        routed_scaling_factor = _args.number("MoE", "routed_scaling_factor", routed_scaling_factor, low=0,
                                             low_open=True, **check)
        n_group = _args.integer("MoE", "n_group", n_group, low=1, **check)
        topk_group = _args.integer("MoE", "topk_group", topk_group, low=1, optional=True, **check)
        if score not in SCORES:
            raise SettingError(f"MoE: router={score!r} is not known; use one of {SCORES}")
        if not 1 <= top_k <= num_experts:
            raise SettingError(
                f"MoE: top_k={top_k} must be between 1 and num_experts={num_experts}; lower top_k or add experts"
            )
        topk_group = n_group if topk_group is None else topk_group
        check_groups(num_experts, top_k, n_group, topk_group)
        if not math.isfinite(routed_scaling_factor) or routed_scaling_factor <= 0:
            raise SettingError(f"MoE: routed_scaling_factor must be a finite number > 0, got {routed_scaling_factor}")
        self.num_experts = num_experts
        self.top_k = top_k
        self.routed_scaling_factor = float(routed_scaling_factor)
        self.n_group, self.topk_group = int(n_group), int(topk_group)
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
        logits = F.linear(x.to(dt), self.weight.to(dt))  # the op HF routers use: bit-equal logits, same choices on ties
        scores = torch.softmax(logits, dim=-1) if self.score == "softmax" else torch.sigmoid(logits)
        pick = scores.detach()
        if self.expert_bias is not None:
            pick = pick + self.expert_bias.to(dt)
        if self.topk_group < self.n_group:
            pick = limit_to_groups(pick, self.n_group, self.topk_group)
        experts = torch.topk(pick, self.top_k, dim=-1, sorted=True).indices
        weights = scores.gather(1, experts)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(dt).tiny)
        if self.routed_scaling_factor != 1.0:
            weights = weights * self.routed_scaling_factor
        return Routing(logits=logits, scores=scores, experts=experts, weights=weights)

    @torch.no_grad()
    def update_bias(self, counts: torch.Tensor) -> None:
        """Aux-loss-free balancing: raise the bias of under-loaded experts, lower over-loaded ones.

        ``counts`` are tokens per expert over the period since the last update (all ranks summed
        under sharding, so every rank applies the same update).
        """
        if self.expert_bias is None:
            raise SettingError("MoE.update_expert_bias: the layer was built without expert_bias=True")
        c = counts.to(torch.float32).to(self.expert_bias.device)
        self.expert_bias.add_(self.bias_update_rate * torch.sign(c.mean() - c))


def check_groups(num_experts: int, top_k: int, n_group: int, topk_group: int) -> None:
    """Raise :class:`SettingError` unless group-limited routing with these sizes can pick ``top_k`` experts."""
    if n_group < 1 or num_experts % n_group:
        raise SettingError(f"MoE: n_group={n_group} must be >= 1 and divide num_experts={num_experts}")
    if not 1 <= topk_group <= n_group:
        raise SettingError(f"MoE: topk_group={topk_group} must be between 1 and n_group={n_group}")
    if n_group > 1 and num_experts // n_group < 2:
        raise SettingError(f"MoE: group-limited routing needs >= 2 experts per group; num_experts={num_experts}, "
                           f"n_group={n_group}")
    if top_k > topk_group * (num_experts // n_group):
        raise SettingError(
            f"MoE: top_k={top_k} exceeds the {topk_group * (num_experts // n_group)} experts in "
            f"topk_group={topk_group} groups of {num_experts // n_group}; raise topk_group or lower top_k"
        )


def limit_to_groups(pick: torch.Tensor, n_group: int, topk_group: int) -> torch.Tensor:
    """Selection scores with every expert outside each token's ``topk_group`` best groups set to ``-inf``.

    A group's score is the sum of its two highest selection scores (DeepSeek-V3's group-limited routing).
    """
    tokens, num_experts = pick.shape
    per_group = num_experts // n_group
    group_scores = pick.view(tokens, n_group, per_group).topk(2, dim=-1).values.sum(dim=-1)
    best = group_scores.topk(topk_group, dim=-1).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
    return pick.masked_fill(~keep.repeat_interleave(per_group, dim=1), float("-inf"))
