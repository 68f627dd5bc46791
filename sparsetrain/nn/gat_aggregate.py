"""A GAT layer's attention-weighted neighbour sum in one CPU pass per destination: :func:`gat_aggregate`.

For every destination ``d`` and head ``h``, over the edges ``e = (s, d)`` into it::

    score[e, h] = leaky_relu(a_src[s, h] + a_dst[d, h], negative_slope)
    alpha[e, h] = softmax over the in-edges of d of score[., h]
    out[d, h, :] = sum_e alpha[e, h] * x[s, :]

One Numba ``parallel=True`` kernel over destination nodes does the scores, the per-destination softmax and the
weighted sum of every head in one pass over the block's edges, grouped by destination as a sampler emits them (the
order is checked in the same pass; edges in another order are sorted once), each edge's source row read once for
all heads. No edge-sized ``[E, heads, width]`` tensor exists: the only edge-sized arrays are ``[E, heads]``: the
softmax weights and raw scores, which the forward keeps. The backward (:class:`GATAggregate`, a
``torch.autograd.Function``) reads them back (no second pass of exponentials and logit gathers) and scatters the
sources' gradients through a source-grouped order built with one counting sort. The output is ``[num_dst, heads,
width]``, a destination's heads contiguous, so the kernels read and write one contiguous row per destination and
``GATConv``'s concatenation of the heads is a view.

``x`` is either one row per source and head (the projected rows, as ``GATConv`` sums them), or one row per source
shared by the heads: GAT with the projection moved after the sum (``W_h (sum_e alpha x_s)`` equals
``sum_e alpha W_h x_s``, the projection is linear). :class:`~sparsetrain.nn.rgat.RGAT` picks per relation: a block has
far fewer destination than source rows in its inner layers, where projecting the per-head sums costs less than
projecting every source row. The attention logits come from the projection folded into the attention vectors
(``a_src = x (W^T att_src)``) either way. PyG's ``GATConv`` computes the same function;
``tests/test_gat_aggregate.py`` checks the kernel against it and with ``torch.autograd.gradcheck``.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import prange

from sparsetrain.errors import SettingError


@numba.njit(cache=True, nogil=True)
def _dst_offsets(dst, num_dst):
    """CSR offsets of ``dst`` (int64 [E]) over ``num_dst`` rows, and whether the edges are grouped in ascending
    destination order (the offsets are valid for the edges as given only then); -1 when an id is out of range."""
    indptr = np.zeros(num_dst + 1, np.int64)
    ordered = True
    prev = -1
    for e in range(dst.shape[0]):
        d = dst[e]
        if d < 0 or d >= num_dst:
            return indptr, -1
        if d < prev:
            ordered = False
        prev = d
        indptr[d + 1] += 1
    for d in range(num_dst):
        indptr[d + 1] += indptr[d]
    return indptr, 1 if ordered else 0


@numba.njit(cache=True, nogil=True)
def _src_order(src, num_src):
    """The edges grouped by source: offsets [num_src + 1] and the edge positions in that order (a counting sort)."""
    offsets = np.zeros(num_src + 1, np.int64)
    for e in range(src.shape[0]):
        offsets[src[e] + 1] += 1
    for s in range(num_src):
        offsets[s + 1] += offsets[s]
    fill = offsets[:-1].copy()
    order = np.empty(src.shape[0], np.int64)
    for e in range(src.shape[0]):
        s = src[e]
        order[fill[s]] = e
        fill[s] += 1
    return offsets, order


_FAST = {"nsz", "arcp", "contract", "reassoc"}  # vectorised sums; no "ninf"/"nnan": the max starts at -inf
_CHUNK = 64  # destinations (sources) a parallel iteration takes: one accumulator row allocated per chunk


@numba.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def _forward(x, a_src, a_dst, indptr, src, slope, out, head_major, alpha, raw):
    """out[d, h, :] (``out[h, d, :]`` when ``head_major``) = sum of alpha * x[s, h or 0, :] over d's in-edges;
    ``alpha`` [E, heads]: the softmax weights, ``raw`` [E, heads]: the scores before the leaky ReLU (both kept for the
    backward)."""
    heads, width = a_dst.shape[1], out.shape[2]
    num_dst = a_dst.shape[0]
    for c in prange((num_dst + _CHUNK - 1) // _CHUNK):
        acc = np.empty((heads, width), out.dtype)
        for d in range(c * _CHUNK, min(num_dst, (c + 1) * _CHUNK)):
            lo, hi = indptr[d], indptr[d + 1]
            for h in range(heads):
                m = -np.inf
                for e in range(lo, hi):
                    r = a_src[src[e], h] + a_dst[d, h]
                    raw[e, h] = r
                    v = r if r >= 0 else r * slope
                    alpha[e, h] = v
                    if v > m:
                        m = v
                total = 0.0
                for e in range(lo, hi):
                    w = np.exp(alpha[e, h] - m)
                    alpha[e, h] = w
                    total += w
                inv = 1.0 / total if hi > lo else 0.0
                for e in range(lo, hi):
                    alpha[e, h] = alpha[e, h] * inv  # stored in x's dtype, so the sum below stays in it
            acc[:] = 0
            for e in range(lo, hi):  # every head of an edge at once: its source row is read once
                s = src[e]
                for h in range(heads):
                    w = alpha[e, h]
                    hx = h if x.shape[1] > 1 else 0
                    for f in range(width):
                        acc[h, f] += w * x[s, hx, f]
            if head_major:
                for h in range(heads):
                    out[h, d] = acc[h]
            else:
                out[d] = acc


@numba.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def _backward_dst(x, indptr, src, slope, grad, head_major, alpha, raw, draw, grad_a_dst):
    """Per destination (``grad`` [num_dst, heads, width], or [heads, num_dst, width] when ``head_major``): the
    gradient of each edge's raw score (before the leaky ReLU): ``draw[e, h]``, from the saved ``alpha`` and ``raw``;
    their sum per destination is ``grad_a_dst``."""
    num_dst, heads, width = grad_a_dst.shape[0], grad_a_dst.shape[1], grad.shape[2]
    zero = np.zeros(1, grad.dtype)[0]
    for d in prange(num_dst):
        lo, hi = indptr[d], indptr[d + 1]
        for h in range(heads):
            hx = h if x.shape[1] > 1 else 0
            row = grad[h, d] if head_major else grad[d, h]
            dot = 0.0
            for e in range(lo, hi):
                s = src[e]
                g = zero
                for f in range(width):
                    g += row[f] * x[s, hx, f]
                draw[e, h] = g  # d loss / d alpha for now
                dot += alpha[e, h] * g
            acc = 0.0
            for e in range(lo, hi):
                ds = alpha[e, h] * (draw[e, h] - dot)
                if raw[e, h] < 0:
                    ds *= slope
                draw[e, h] = ds
                acc += ds
            grad_a_dst[d, h] = acc


@numba.njit(cache=True, nogil=True, parallel=True, fastmath=_FAST)
def _backward_src(offsets, order, dst, alpha, draw, grad, head_major, need_x, grad_x, grad_a_src):
    """Per source: grad_x[s, h or 0, :] = sum over its out-edges (and heads, x shared by them) of alpha * grad[d, h,
    :]; grad_a_src[s, h] = sum of draw[e, h]."""
    heads, width = alpha.shape[1], grad.shape[2]
    num_src, x_heads = offsets.shape[0] - 1, grad_x.shape[1]
    for c in prange((num_src + _CHUNK - 1) // _CHUNK):
        acc = np.empty((x_heads, width), grad.dtype)
        for s in range(c * _CHUNK, min(num_src, (c + 1) * _CHUNK)):
            acc[:] = 0
            for h in range(heads):
                grad_a_src[s, h] = 0
            for i in range(offsets[s], offsets[s + 1]):
                e = order[i]
                d = dst[e]
                for h in range(heads):
                    grad_a_src[s, h] += draw[e, h]
                    if need_x:
                        a = alpha[e, h]
                        hx = h if x_heads > 1 else 0
                        row = grad[h, d] if head_major else grad[d, h]
                        for f in range(width):
                            acc[hx, f] += a * row[f]
            if need_x:
                grad_x[s] = acc


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _view(t: torch.Tensor) -> np.ndarray:
    """A NumPy view, strides kept (a column slice of the logits of several relations is read in place)."""
    return t.detach().numpy()


class GATAggregate(torch.autograd.Function):
    """``out[d, h, :] = sum_e alpha[e, h] x[src_e, :]`` with GAT's attention; see :func:`gat_aggregate`."""

    @staticmethod
    def forward(ctx, x, a_src, a_dst, indptr, src, slope, head_major):
        num_dst, heads = a_dst.shape
        out = x.new_empty((heads, num_dst, x.shape[2]) if head_major else (num_dst, heads, x.shape[2]))
        alpha, raw = a_dst.new_empty(src.shape[0], heads), a_dst.new_empty(src.shape[0], heads)
        _forward(_np(x), _view(a_src), _view(a_dst), indptr.numpy(), src.numpy(), slope, out.numpy(), head_major,
                 alpha.numpy(), raw.numpy())
        ctx.save_for_backward(x, indptr, src, alpha, raw)
        ctx.slope, ctx.num_src, ctx.head_major = slope, a_src.shape[0], head_major
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, indptr, src, alpha, raw = ctx.saved_tensors
        need_x, need_src, need_dst = ctx.needs_input_grad[:3]
        grad = _np(grad_out)
        num_dst, heads = indptr.shape[0] - 1, alpha.shape[1]
        draw = alpha.new_empty(alpha.shape)
        grad_a_dst = alpha.new_empty(num_dst, heads)
        xs = _np(x)
        _backward_dst(xs, indptr.numpy(), src.numpy(), ctx.slope, grad, ctx.head_major, alpha.numpy(), raw.numpy(),
                      draw.numpy(), grad_a_dst.numpy())
        grad_x = grad_a_src = None
        if need_x or need_src:
            offsets, order = _src_order(src.numpy(), ctx.num_src)
            dst = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(indptr.numpy()))
            gx = np.empty(xs.shape if need_x else (0, *xs.shape[1:]), xs.dtype)
            gs = np.empty((ctx.num_src, heads), xs.dtype)
            _backward_src(offsets, order, dst, alpha.numpy(), draw.numpy(), grad, ctx.head_major, bool(need_x), gx,
                          gs)
            grad_x = torch.from_numpy(gx) if need_x else None
            grad_a_src = torch.from_numpy(gs) if need_src else None
        return grad_x, grad_a_src, grad_a_dst if need_dst else None, None, None, None, None


def dst_csr(edge_index: torch.Tensor, num_dst: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indptr [num_dst + 1], src [E])``: the block's edges grouped by destination. Edges a sampler emits come
    grouped already and are used as they are (one pass checks it); others are sorted once (stable)."""
    src, dst = edge_index[0].contiguous(), edge_index[1].contiguous()
    indptr, ordered = _dst_offsets(dst.numpy().astype(np.int64, copy=False), num_dst)
    if ordered < 0:
        raise SettingError(f"edge_index has a destination outside 0..{num_dst - 1}; give num_dst covering every "
                           "destination id")
    if not ordered:
        src = src[torch.argsort(dst, stable=True)]
    return torch.from_numpy(indptr), src.to(torch.int64).contiguous()


def gat_aggregate(x: torch.Tensor, a_src: torch.Tensor, a_dst: torch.Tensor, csr: tuple[torch.Tensor, torch.Tensor],
                  negative_slope: float = 0.2, heads_first: bool = False) -> torch.Tensor:
    """GAT's attention-weighted sum of source rows per destination and head: ``[num_dst, heads, width]`` (a
    destination's heads contiguous: ``.view(num_dst, heads * width)`` is ``GATConv``'s concatenation).

    ``x`` [num_src, width]: the source rows, shared by the heads (GAT with the projection after the sum), or
    [num_src, heads, width]: one row per head (the projected rows, as ``GATConv`` sums them); ``a_src`` [num_src,
    heads] / ``a_dst`` [num_dst, heads]: each node's attention logit per head; ``csr``: :func:`dst_csr` of the block's
    edges; ``heads_first``: the result as ``[heads, num_dst, width]`` instead (what a per-head ``bmm`` reads, the
    projection after the sum). A destination with no in-edge gets zeros, as PyG's ``GATConv``. CPU tensors of one
    floating dtype; differentiable in ``x``, ``a_src`` and ``a_dst``."""
    if x.device.type != "cpu":
        raise SettingError(f"gat_aggregate runs on the CPU and got {x.device} tensors; use PyG's GATConv on a GPU")
    if not (x.dtype == a_src.dtype == a_dst.dtype) or not x.is_floating_point():
        raise SettingError(f"gat_aggregate takes x, a_src and a_dst of one floating dtype, got {x.dtype}, "
                           f"{a_src.dtype}, {a_dst.dtype}; cast them to one")
    indptr, src = csr
    if x.dim() == 2:
        x = x.unsqueeze(1)
    if x.dim() != 3 or x.shape[1] not in (1, a_dst.shape[1]):
        raise SettingError(f"gat_aggregate takes x of shape [num_src, width] or [num_src, {a_dst.shape[1]}, width], "
                           f"got {list(x.shape)}; give one row per source or one per source and head")
    return GATAggregate.apply(x, a_src, a_dst, indptr, src, float(negative_slope), bool(heads_first))
