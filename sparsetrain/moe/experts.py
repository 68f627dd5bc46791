"""The experts' feed-forward networks as one stacked table, computed with grouped matmuls.

Expert ``e`` is ``act(x @ w_in[e]) @ w_out[e]`` (SwiGLU: ``w_in[e] = [gate | up]`` and
``silu(x @ gate) * (x @ up)``). The table is stored as rows, one per expert, so a sharding can
own, gather and reduce whole experts: ``row(e) = concat(w_in[e].flatten(), w_out[e].flatten())``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sparsetrain.errors import SettingError
from sparsetrain.moe.grouped import grouped_mm

ACTIVATIONS = ("swiglu", "gelu", "relu", "silu")


class ExpertShape:
    """Sizes of one expert and the packing of its parameters into a table row."""

    def __init__(self, d_model: int, d_hidden: int, activation: str) -> None:
        if activation not in ACTIVATIONS:
            raise SettingError(f"MoE: activation={activation!r} is not known; use one of {ACTIVATIONS}")
        if d_model < 1 or d_hidden < 1:
            raise SettingError(f"MoE: d_model and d_hidden must be >= 1, got {d_model} and {d_hidden}")
        self.d_model, self.d_hidden, self.activation = d_model, d_hidden, activation
        self.in_width = 2 * d_hidden if activation == "swiglu" else d_hidden
        self.in_size = d_model * self.in_width
        self.row_size = self.in_size + d_hidden * d_model

    def unpack(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[G, row_size]`` rows -> ``(w_in [G, d_model, in_width], w_out [G, d_hidden, d_model])``."""
        g = rows.shape[0]
        w_in = rows[:, : self.in_size].reshape(g, self.d_model, self.in_width)
        w_out = rows[:, self.in_size :].reshape(g, self.d_hidden, self.d_model)
        return w_in, w_out

    def pack(self, w_in: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`unpack`."""
        return torch.cat([w_in.reshape(w_in.shape[0], -1), w_out.reshape(w_out.shape[0], -1)], dim=1)

    def init_rows(self, ids: torch.Tensor, base_seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Deterministic initial rows for experts ``ids``: row ``e`` depends only on ``(base_seed, e)``,
        so every rank can build exactly its own rows and they agree with a single-process layer."""
        out = torch.empty(ids.numel(), self.row_size, dtype=dtype)
        b_in, b_out = 1.0 / math.sqrt(self.d_model), 1.0 / math.sqrt(self.d_hidden)
        for i, e in enumerate(ids.tolist()):
            g = torch.Generator().manual_seed(int(base_seed) + int(e))
            out[i, : self.in_size].uniform_(-b_in, b_in, generator=g)
            out[i, self.in_size :].uniform_(-b_out, b_out, generator=g)
        return out


class _SwiGLU(torch.autograd.Function):
    """``silu(gate) * up`` for ``h = [gate | up]``; the backward writes both halves of ``dh`` into one tensor (no
    ``cat`` of the two halves, as the chunked autograd graph does)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor) -> torch.Tensor:
        gate, up = h.chunk(2, dim=-1)
        s = F.silu(gate)
        ctx.save_for_backward(h, s)
        return s * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, s = ctx.saved_tensors
        gate, up = h.chunk(2, dim=-1)
        half = gate.shape[-1]
        dh = torch.empty_like(h)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=dh[..., :half])
        torch.mul(grad, s, out=dh[..., half:])
        return dh


def activate(h: torch.Tensor, activation: str) -> torch.Tensor:
    """Apply the expert nonlinearity to ``x @ w_in``."""
    if activation == "swiglu":
        if torch.is_grad_enabled() and h.requires_grad:
            return _SwiGLU.apply(h)
        gate, up = h.chunk(2, dim=-1)
        return F.silu(gate) * up
    if activation == "gelu":
        return F.gelu(h)
    if activation == "relu":
        return F.relu(h)
    return F.silu(h)


def expert_ffn(x_sorted: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, counts: torch.Tensor,
               activation: str, backend: str | None = None) -> torch.Tensor:
    """Run rows sorted by expert through their experts: ``counts[g]`` consecutive rows use expert ``g``.

    ``backend``: the grouped-matmul backend (:func:`sparsetrain.moe.grouped.grouped_mm`)."""
    h = grouped_mm(x_sorted, w_in.to(x_sorted.dtype), counts, backend)
    return grouped_mm(activate(h, activation), w_out.to(x_sorted.dtype), counts, backend)


class LocalExperts(torch.nn.Module):
    """All experts in this process: ``w_in [E, d_model, in_width]`` and ``w_out [E, d_hidden, d_model]``."""

    world_size = 1

    def __init__(self, shape: ExpertShape, num_experts: int, base_seed: int) -> None:
        super().__init__()
        self.shape, self.num_experts = shape, num_experts
        w_in, w_out = shape.unpack(shape.init_rows(torch.arange(num_experts), base_seed))
        self.w_in = torch.nn.Parameter(w_in.contiguous())
        self.w_out = torch.nn.Parameter(w_out.contiguous())

    def global_stats(self, counts: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, int]:
        """Expert counts and token count over all ranks (here: this process)."""
        return counts, num_tokens

    def forward(self, x_sorted: torch.Tensor, counts: torch.Tensor, backend: str | None = None) -> torch.Tensor:
        """Expert outputs for rows sorted by expert (``counts[e]`` rows for expert ``e``)."""
        return expert_ffn(x_sorted, self.w_in, self.w_out, counts, self.shape.activation, backend)

    def full_rows(self) -> torch.Tensor:
        """The whole logical expert table as packed rows ``[E, row_size]``."""
        return self.shape.pack(self.w_in.detach(), self.w_out.detach())
