"""Dropout whose mask comes from a counter-based hash instead of torch's CPU Bernoulli sampler.

On the CPU build of recent torch, ``F.dropout`` spends most of a GraphSAGE step
drawing Bernoulli numbers (~290 ms for a 166K x 256 activation, measured). Here
one seed is drawn from torch's generator per call (so ``torch.manual_seed`` and
saved RNG states still make runs repeatable), and the mask is a hash of
(seed, element index), recomputed in backward rather than stored. The kernel is
serial and releases the GIL, so it runs beside the loader's threads.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F

from sparsetrain.sampling.rng import GOLDEN, mix64

_SHIFT = np.uint64(11)


@numba.njit(cache=True, nogil=True)
def _masked_scale(src, dst, seed, threshold, scale):
    """dst[i] = src[i] * scale where hash(seed, i) keeps element i, else 0."""
    key = np.uint64(seed)
    for i in range(src.shape[0]):
        if (mix64(key + np.uint64(i) * GOLDEN) >> _SHIFT) >= threshold:
            dst[i] = src[i] * scale
        else:
            dst[i] = 0


def _apply(x: torch.Tensor, seed: int, p: float) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    threshold = np.uint64(int(p * 2**53))
    scale = x.new_tensor(1.0 / (1.0 - p)).item()
    _masked_scale(x.detach().view(-1).numpy(), out.view(-1).numpy(), seed, threshold, scale)
    return out


class _HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.p, ctx.seed = p, seed
        return _apply(x, seed, p)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _apply(grad, ctx.seed, ctx.p), None, None  # the same mask: same seed, same indices


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout`` semantics; CPU float32/float64 tensors take the hash-mask path."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)
    seed = int(torch.randint(0, 2**62, (1,)).item())
    return _HashDropout.apply(x, p, seed)
