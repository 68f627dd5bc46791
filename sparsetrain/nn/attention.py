"""Attention kernels of the graph transformer: along edges, within clusters, and a global linear term.

Shapes: queries ``q`` [num_dst, heads, dim], keys/values ``k``, ``v`` [num_src, heads, dim].

- :func:`edge_attention` — exact softmax attention of each destination over its in-edges.
  Scores exist per edge (a segment softmax), in chunks of edges; what autograd keeps is
  the inputs, the output and one log-sum-exp per (node, head): memory O(E/chunks·heads·dim
  + N·heads·dim), never O(N²). The backward recomputes scores chunk by chunk.
- :func:`cluster_attention` — dense softmax attention among the nodes of each group
  (block-diagonal). Groups are packed into padded ``[groups, size, ...]`` tiles, bucketed by
  size rounded up to a power of two (padding at most doubles a tile side), and each bucket is
  one ``scaled_dot_product_attention`` call with a key-padding mask. Packing is O(N) from
  cluster boundaries (or one sort of N group ids); no N² mask is ever built.
- :func:`linear_attention` — ``elu+1`` kernelized attention over each group (e.g. a batch's
  independent subgraph): O(N·dim²) time, O(groups·dim²) state, for long-range context.

All are plain torch (CPU and CUDA; torch >= 2.0) and differentiable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sparsetrain.errors import SettingError

DEFAULT_EDGE_CHUNK = 1 << 18
MIN_TILE = 8


def add_self_loops(edge_index: torch.Tensor, num_dst: int) -> torch.Tensor:
    """``edge_index`` [2, E] (src, dst) without its self loops, plus one loop ``(i, i)`` per destination ``i <
    num_dst``.

    On a block, destination ``i`` is source ``i`` (destinations are the first sources).
    """
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    loops = torch.arange(num_dst, device=edge_index.device, dtype=edge_index.dtype)
    return torch.cat([edge_index[:, keep], torch.stack([loops, loops])], dim=1)


def _scores(q, k, src, dst, scale):
    return (q.index_select(0, dst) * k.index_select(0, src)).sum(-1) * scale


class _EdgeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, src, dst, scale, chunk):
        num_dst, heads, dim = q.shape
        num_edges = src.numel()
        m = torch.full((num_dst, heads), float("-inf"), dtype=q.dtype, device=q.device)
        for lo in range(0, num_edges, chunk):
            s, d = src[lo : lo + chunk], dst[lo : lo + chunk]
            m.scatter_reduce_(0, d[:, None].expand(-1, heads), _scores(q, k, s, d, scale), "amax", include_self=True)
        m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        denom = torch.zeros_like(m)
        out = torch.zeros(num_dst, heads, v.shape[-1], dtype=v.dtype, device=v.device)
        for lo in range(0, num_edges, chunk):
            s, d = src[lo : lo + chunk], dst[lo : lo + chunk]
            p = torch.exp(_scores(q, k, s, d, scale) - m_safe.index_select(0, d))
            denom.index_add_(0, d, p)
            out.index_add_(0, d, p[..., None] * v.index_select(0, s))
        out = out / denom.clamp_min(torch.finfo(denom.dtype).tiny)[..., None]
        lse = m_safe + torch.log(denom)  # -inf for a destination with no edges (output 0)
        ctx.save_for_backward(q, k, v, src, dst, out, lse)
        ctx.scale, ctx.chunk = scale, chunk
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, src, dst, out, lse = ctx.saved_tensors
        scale, chunk = ctx.scale, ctx.chunk
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)  # sum_j p_ij (dout_i . v_j)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for lo in range(0, src.numel(), chunk):
            s, d = src[lo : lo + chunk], dst[lo : lo + chunk]
            p = torch.exp(_scores(q, k, s, d, scale) - lse.index_select(0, d))
            g = dout.index_select(0, d)
            dv.index_add_(0, s, p[..., None] * g)
            ds = p * ((g * v.index_select(0, s)).sum(-1) - delta.index_select(0, d)) * scale
            dq.index_add_(0, d, ds[..., None] * k.index_select(0, s))
            dk.index_add_(0, s, ds[..., None] * q.index_select(0, d))
        return dq, dk, dv, None, None, None, None


def edge_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, edge_index: torch.Tensor, *,
                   scale: float | None = None, chunk_edges: int = DEFAULT_EDGE_CHUNK) -> torch.Tensor:
    """Softmax attention of every destination ``i`` over the sources ``j`` of its edges ``(j, i)``.

    ``out[i] = sum_j softmax_j(q_i . k_j * scale) v_j`` per head; a destination without edges gets 0.
    ``edge_index`` [2, E] holds (src, dst) local ids (add self loops with :func:`add_self_loops`).
    """
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or k.shape[:2] != v.shape[:2] or q.shape[1:] != k.shape[1:]:
        raise SettingError(f"q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}: expected [nodes, heads, dim] "
                           "with matching heads and dim")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    src, dst = edge_index[0].contiguous(), edge_index[1].contiguous()
    return _EdgeAttention.apply(q, k, v, src, dst, float(scale), int(chunk_edges))


@dataclass
class Packing:
    """Nodes grouped for dense per-group attention: group ``g`` is nodes ``order[ptr[g]:ptr[g + 1]]``
    (``order=None``: contiguous ids). ``tiles`` is one ``(node_index [G_b, S_b], valid [G_b, S_b])``
    per size bucket ``S_b`` (a power of two); padded slots point at node 0 and are not valid."""

    num_nodes: int
    tiles: list[tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def from_pointers(cls, ptr: torch.Tensor, order: torch.Tensor | None = None,
                      max_size: int | None = None) -> Packing:
        """From group boundaries ``ptr`` [G + 1] (non-decreasing, ``ptr[-1]`` = number of nodes): O(N)."""
        ptr = ptr.to(torch.int64)
        sizes = ptr[1:] - ptr[:-1]
        device = ptr.device
        num_nodes = int(ptr[-1])
        if max_size is not None and sizes.numel() and int(sizes.max()) > max_size:
            raise SettingError(f"a group has {int(sizes.max())} nodes, more than max_size={max_size}; split large "
                               "clusters first")
        tiles = []
        nonempty = sizes > 0
        if not bool(nonempty.any()):
            return cls(num_nodes, tiles)
        tile = torch.clamp(sizes, min=MIN_TILE)
        tile = torch.pow(2, torch.ceil(torch.log2(tile.double()))).to(torch.int64)
        for side in torch.unique(tile[nonempty]).tolist():
            groups = torch.nonzero(nonempty & (tile == side)).view(-1)
            slot = torch.arange(side, device=device)
            valid = slot[None, :] < sizes[groups][:, None]
            index = torch.where(valid, ptr[groups][:, None] + slot[None, :],
                                torch.zeros((), dtype=torch.int64, device=device))
            if order is not None:
                index = torch.where(valid, order[index], index)
            tiles.append((index, valid))
        return cls(num_nodes, tiles)

    @classmethod
    def from_groups(cls, groups: torch.Tensor, max_size: int | None = None) -> Packing:
        """From a group id per node (any non-negative integers; equal ids attend to each other)."""
        groups = groups.to(torch.int64)
        if groups.numel() == 0:
            return cls(0, [])
        order = torch.argsort(groups, stable=True)
        counts = torch.bincount(groups)
        ptr = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=groups.device)
        ptr[1:] = torch.cumsum(counts, 0)
        return cls.from_pointers(ptr, order, max_size)


def _scatter_tiles(packing: Packing, tiles_out: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    out = like.new_zeros((packing.num_nodes,) + tuple(like.shape[1:]))
    for (index, valid), t in zip(packing.tiles, tiles_out):
        out = out.index_put((index[valid],), t[valid])
    return out


def cluster_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, *,
                      scale: float | None = None) -> torch.Tensor:
    """Dense softmax attention within each group of ``packing`` (block-diagonal); q, k, v [N, heads, dim]."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for index, valid in packing.tiles:
        # [G, S, H, D] -> [G, H, S, D]
        qt, kt, vt = (t[index].transpose(1, 2) for t in (q, k, v))
        mask = valid[:, None, None, :]  # key padding only: every query row keeps >= 1 real key
        o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale) if _SDPA_HAS_SCALE else \
            F.scaled_dot_product_attention(qt * (scale * q.shape[-1] ** 0.5), kt, vt, attn_mask=mask)
        outs.append(o.transpose(1, 2))
    return _scatter_tiles(packing, outs, v)


def _sdpa_has_scale() -> bool:
    import inspect

    try:
        return "scale" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without a Python signature
        return tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 1)


_SDPA_HAS_SCALE = _sdpa_has_scale()


def _feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing | None = None) -> torch.Tensor:
    """Kernelized (``elu+1``) attention of every node over all nodes of its group (all nodes when ``packing`` is None).

    ``out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j))`` per head.
    """
    fq, fk = _feature_map(q), _feature_map(k)
    if packing is None:
        kv = torch.einsum("nhd,nhe->hde", fk, v)
        z = fk.sum(0)
        return torch.einsum("nhd,hde->nhe", fq, kv) / torch.einsum("nhd,hd->nh", fq, z)[..., None]
    outs = []
    for index, valid in packing.tiles:
        w = valid[:, :, None, None].to(fk.dtype)
        qt, kt, vt = fq[index], fk[index] * w, v[index]  # [G, S, H, D]
        kv = torch.einsum("gshd,gshe->ghde", kt, vt)
        z = kt.sum(1)
        outs.append(torch.einsum("gshd,ghde->gshe", qt, kv) / torch.einsum("gshd,ghd->gsh", qt, z)[..., None])
    return _scatter_tiles(packing, outs, v)
