"""Dropout whose mask comes from a counter-based hash instead of torch's CPU Bernoulli sampler.

On the CPU build of recent torch, ``F.dropout`` spends most of a GraphSAGE step
drawing Bernoulli numbers (~290 ms for a 166K x 256 activation, measured). Here
one seed is drawn from torch's generator per call (so ``torch.manual_seed`` and
saved RNG states still make runs repeatable), and the mask is a hash of
(seed, element index), recomputed in backward rather than stored. The kernel is
serial and releases the GIL, so it runs beside the loader's threads. bfloat16 tensors
(autocast) go through the same kernel on their bits: widened to float32, scaled, rounded
back to nearest-even.

:func:`relu_dropout` fuses the ReLU that precedes dropout in a GNN layer: one pass
forward, and a backward that needs only the output (an element passed both
ReLU and the mask exactly when its output is positive), with no hash at all.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from sparsetrain.sampling.rng import GOLDEN, mix64

_SHIFT = np.uint64(11)


@numba.njit(cache=True, nogil=True, inline="always")
def _kept(value, key, i, threshold, relu):
    """Whether element ``i`` survives: its hash clears the dropout threshold (and, with ``relu``, value > 0)."""
    return (not relu or value > 0) and (mix64(key + np.uint64(i) * GOLDEN) >> _SHIFT) >= threshold


@numba.njit(cache=True, nogil=True)
def _masked_scale(src, dst, seed, threshold, scale, relu):
    """dst[i] = src[i] * scale where element i is :func:`_kept`, else 0."""
    key = np.uint64(seed)
    for i in range(src.shape[0]):
        if _kept(src[i], key, i, threshold, relu):
            dst[i] = src[i] * scale
        else:
            dst[i] = 0


@intrinsic
def _as_float32(typingctx, bits):
    """Reinterpret uint32 bits as a float32."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@intrinsic
def _float32_bits(typingctx, value):
    """Reinterpret a float32 as its uint32 bits."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def _bfloat16(value):
    """float32 -> bfloat16 bits (int16), rounded to nearest even; NaN stays NaN."""
    bits = _float32_bits(value)
    if value != value:
        return np.int16(np.uint16((bits >> np.uint32(16)) | np.uint32(0x40)))
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return np.int16(np.uint16(rounded >> np.uint32(16)))


@numba.njit(cache=True, nogil=True)
def _masked_scale_bf16(src, dst, seed, threshold, scale, relu):
    """:func:`_masked_scale` on bfloat16 bits (int16 arrays)."""
    key = np.uint64(seed)
    factor = np.float32(scale)
    for i in range(src.shape[0]):
        value = _as_float32(np.uint32(np.uint16(src[i])) << np.uint32(16))
        if _kept(value, key, i, threshold, relu):
            dst[i] = _bfloat16(value * factor)
        else:
            dst[i] = 0


def _apply(x: torch.Tensor, seed: int, p: float, relu: bool = False) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    threshold = np.uint64(int(p * 2**53))
    if x.dtype == torch.bfloat16:
        kernel, src, dst = _masked_scale_bf16, x.detach().view(-1).view(torch.int16), out.view(-1).view(torch.int16)
    else:
        kernel, src, dst = _masked_scale, x.detach().view(-1), out.view(-1)
    kernel(src.numpy(), dst.numpy(), seed, threshold, _scale(x, p), relu)
    return out


def _scale(x: torch.Tensor, p: float) -> float:
    return x.new_tensor(1.0 / (1.0 - p)).item()  # rounded to x's dtype, as F.dropout scales


class _HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.p, ctx.seed = p, seed
        return _apply(x, seed, p)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _apply(grad, ctx.seed, ctx.p), None, None  # the same mask: same seed, same indices


class _HashReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        out = _apply(x, seed, p, relu=True)
        ctx.save_for_backward(out)
        ctx.scale = _scale(x, p)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(grad, out, 0).mul_(ctx.scale), None, None


def _hash_path(x: torch.Tensor, p: float) -> bool:
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64, torch.bfloat16) and 0.0 < p < 1.0


def _draw_seed() -> int:
    return int(torch.randint(0, 2**62, (1,)).item())


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout`` semantics; CPU float32/float64/bfloat16 tensors take the hash-mask path."""
    if not training or p == 0.0:
        return x
    if not _hash_path(x, p):
        return F.dropout(x, p, training)
    return _HashDropout.apply(x, p, _draw_seed())


def relu_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(F.relu(x), p, training)`` in one pass (CPU float32/float64/bfloat16; others fall back to the two
    ops)."""
    if not training or p == 0.0:
        return F.relu(x)
    if not _hash_path(x, p):
        return F.dropout(F.relu(x), p, training)
    return _HashReluDropout.apply(x, p, _draw_seed())
