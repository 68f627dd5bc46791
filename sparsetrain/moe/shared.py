"""Shared experts: a dense MLP every token goes through, beside the routed experts (DeepSeek-MoE)."""

from __future__ import annotations

import math

import torch
from torch import nn

from sparsetrain.moe.experts import ExpertShape, activate


class SharedExperts(nn.Module):
    """``count`` always-on experts merged into one MLP of hidden size ``count * d_hidden``."""

    def __init__(self, d_model: int, d_hidden: int, count: int, activation: str) -> None:
        super().__init__()
        shape = ExpertShape(d_model, d_hidden * count, activation)
        self.activation = activation
        self.w_in = nn.Parameter(torch.empty(d_model, shape.in_width))
        self.w_out = nn.Parameter(torch.empty(shape.d_hidden, d_model))
        nn.init.uniform_(self.w_in, -1 / math.sqrt(d_model), 1 / math.sqrt(d_model))
        nn.init.uniform_(self.w_out, -1 / math.sqrt(shape.d_hidden), 1 / math.sqrt(shape.d_hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``act(x @ w_in) @ w_out`` for ``x [T, d_model]``."""
        return activate(x @ self.w_in.to(x.dtype), self.activation) @ self.w_out.to(x.dtype)
