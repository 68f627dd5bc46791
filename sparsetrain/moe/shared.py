"""Shared experts: a dense MLP every token goes through, beside the routed experts (DeepSeek-MoE, Qwen2-MoE)."""

from __future__ import annotations

import math

import torch
from torch import nn

from sparsetrain.moe.experts import ExpertShape, activate


class SharedExperts(nn.Module):
    """The always-on experts merged into one MLP of hidden width ``d_hidden``.

    With ``gate=True`` the MLP's output is scaled per token by ``sigmoid(x @ gate_weight.T)``
    (Qwen2-MoE's ``shared_expert_gate``).
    """

    def __init__(self, d_model: int, d_hidden: int, activation: str, *, gate: bool = False) -> None:
        super().__init__()
        shape = ExpertShape(d_model, d_hidden, activation)
        self.activation = activation
        self.w_in = nn.Parameter(torch.empty(d_model, shape.in_width))
        self.w_out = nn.Parameter(torch.empty(shape.d_hidden, d_model))
        nn.init.uniform_(self.w_in, -1 / math.sqrt(d_model), 1 / math.sqrt(d_model))
        nn.init.uniform_(self.w_out, -1 / math.sqrt(shape.d_hidden), 1 / math.sqrt(shape.d_hidden))
        if gate:
            self.gate_weight = nn.Parameter(torch.empty(1, d_model))
            nn.init.uniform_(self.gate_weight, -1 / math.sqrt(d_model), 1 / math.sqrt(d_model))
        else:
            self.gate_weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``act(x @ w_in) @ w_out`` for ``x [T, d_model]``, times the sigmoid gate when there is one."""
        y = activate(x @ self.w_in.to(x.dtype), self.activation) @ self.w_out.to(x.dtype)
        if self.gate_weight is not None:
            y = torch.sigmoid(x @ self.gate_weight.to(x.dtype).t()) * y
        return y
