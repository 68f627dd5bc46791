"""Grouped matmul: ``out[rows of group g] = x[rows of group g] @ w[g]`` for rows sorted by group.

Backends, chosen per call by device and dtype (no flag):

* ``native`` — ``torch._grouped_mm`` (PyTorch >= 2.8) wrapped in an autograd function whose
  backward is two more grouped matmuls. Used where a one-time probe on that device and dtype
  succeeds and the row strides are 16-byte aligned (fp32 on CPU; bf16/fp16/fp32 on recent GPUs).
  On CPU only when groups average at least ``CPU_NATIVE_MIN_ROWS`` rows (measured crossover).
* ``bucketed`` — groups are bucketed by their row count rounded up to a power of two, and each
  bucket is one padded ``bmm``: at most ``log2(max rows)`` kernel launches whatever the number of
  experts, and at most 2x padding. Everywhere else (fp64, torch 2.2, unaligned shapes).

Groups with no rows produce no output rows and get an exact zero weight gradient.
"""

from __future__ import annotations

import torch

from sparsetrain.moe.errors import MoEConfigError

CPU_NATIVE_MIN_ROWS = 1024  # mean rows per non-empty group from which CPU torch._grouped_mm beats bucketed bmm
_NATIVE_OK: dict[tuple[str, torch.dtype], bool] = {}
_FORCED: str | None = None


def set_backend(name: str | None) -> None:
    """Force ``"native"`` or ``"bucketed"`` for every call (``None``: automatic). For tests and benchmarks."""
    global _FORCED
    if name not in (None, "native", "bucketed"):
        raise MoEConfigError(f"grouped matmul backend must be None, 'native' or 'bucketed', got {name!r}")
    _FORCED = name


def _aligned(*tensors_dims: tuple[int, torch.dtype]) -> bool:
    return all((n * torch.empty((), dtype=dt).element_size()) % 16 == 0 for n, dt in tensors_dims)


def _probe(device: torch.device, dtype: torch.dtype) -> bool:
    key = (device.type, dtype)
    if key not in _NATIVE_OK:
        ok = False
        if hasattr(torch, "_grouped_mm") and dtype in (torch.float32, torch.bfloat16, torch.float16):
            try:
                x = torch.ones(6, 16, dtype=dtype, device=device)
                w = torch.ones(2, 16, 8, dtype=dtype, device=device)
                offs = torch.tensor([2, 6], dtype=torch.int32, device=device)
                y = torch._grouped_mm(x, w, offs=offs)
                gw = torch._grouped_mm(x.t(), y, offs=offs)
                gx = torch._grouped_mm(y, w.transpose(-2, -1), offs=offs)
                ok = bool((y == 16).all()) and gw.shape == (2, 16, 8) and gx.shape == (6, 16)
            except Exception:  # any failure means: not supported on this build/device/dtype
                ok = False
        _NATIVE_OK[key] = ok
    return _NATIVE_OK[key]


def native_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` works here for ``dtype`` (probed once per device type and dtype)."""
    return _probe(torch.device(device), dtype)


class _NativeGroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w, offs)
        return torch._grouped_mm(x, w, offs=offs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, w, offs = ctx.saved_tensors
        grad = grad.contiguous()
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = torch._grouped_mm(grad, w.transpose(-2, -1), offs=offs)
        if ctx.needs_input_grad[1]:
            gw = torch._grouped_mm(x.t(), grad, offs=offs)
        return gx, gw, None


def _bucketed(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    n, m = x.shape[0], w.shape[-1]
    if n == 0:
        return x.new_zeros(0, m) + (x.sum() * 0 + (w.sum() * 0).to(x.dtype))  # keeps x and w in the graph: zero grads
    groups = w.shape[0]
    counts = counts.to(torch.int64)
    group_of_row = torch.repeat_interleave(torch.arange(groups, device=x.device), counts)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(n, device=x.device) - starts[group_of_row]
    # bucket width: next power of two >= count (0 for empty groups)
    width = torch.where(counts > 0, 2 ** torch.ceil(torch.log2(counts.clamp(min=1).double())).long(), counts)
    outs, rows = [], []
    for c in torch.unique(width[counts > 0]).tolist():
        members = (width == c).nonzero().squeeze(1)
        slot = torch.full((groups,), -1, dtype=torch.int64, device=x.device)
        slot[members] = torch.arange(members.numel(), device=x.device)
        sel = (slot[group_of_row] >= 0).nonzero().squeeze(1)
        dest = slot[group_of_row[sel]] * c + pos[sel]
        xp = x.new_zeros(members.numel() * c, x.shape[1]).index_add(0, dest, x[sel])
        yp = torch.bmm(xp.view(members.numel(), c, -1), w[members]).view(-1, m)
        outs.append(yp[dest])
        rows.append(sel)
    if len(outs) == 1:
        return outs[0]
    sel = torch.cat(rows)
    return x.new_zeros(n, m).index_copy(0, sel, torch.cat(outs))


def grouped_mm(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``[N, K] x [G, K, M] -> [N, M]`` where the first ``counts[0]`` rows use ``w[0]``, the next ``counts[1]``
    ``w[1]``, ...

    ``counts`` is ``[G]`` int64 summing to ``N`` (zeros allowed). Differentiable in ``x`` and ``w``.
    """
    backend = _FORCED
    if backend is None:
        fits = x.dtype == w.dtype and _aligned((x.shape[1], x.dtype), (w.shape[-1], w.dtype))
        if fits and x.device.type == "cpu":  # measured (benchmarks/moe.py): CPU native wins only with big groups
            fits = x.shape[0] >= CPU_NATIVE_MIN_ROWS * max(1, int((counts > 0).sum()))
        backend = "native" if fits and _probe(x.device, x.dtype) else "bucketed"
    if backend == "native":
        offs = torch.cumsum(counts, 0).to(torch.int32)
        return _NativeGroupedMM.apply(x.contiguous(), w.contiguous(), offs)
    return _bucketed(x, w, counts)
