"""Grouped matmul: ``out[rows of group g] = x[rows of group g] @ w[g]`` for rows sorted by group.

Three backends compute the same function (forward and both gradients):

* ``native`` — ``torch._grouped_mm`` (PyTorch >= 2.8) wrapped in an autograd function whose
  backward is two more grouped matmuls. Where a one-time probe on that device and dtype succeeds
  and the row strides are 16-byte aligned (fp32 on CPU; bf16/fp16/fp32 on recent GPUs).
* ``loop`` — one ``mm`` per non-empty group into slices of one output (forward and backward; the
  weight gradient of an empty group is set to zero, nothing else is filled). Reads the counts on the host.
* ``bucketed`` — groups are bucketed by their row count rounded up to a power of two, and each
  bucket is one padded ``bmm``: at most ``log2(max rows)`` kernel launches whatever the number of
  experts, and at most 2x padding. Runs everywhere (fp64, torch 2.2, unaligned shapes).

Which one a layer uses is measured, not guessed: :mod:`sparsetrain.moe.autotune` times the candidates of
:func:`candidates` on the layer's first call per shape and keeps the fastest. :func:`set_backend` (tests,
benchmarks) or ``MoE(backend=...)`` force one. Without either, a bare :func:`grouped_mm` call uses
:func:`default_backend`. Groups with no rows produce no output rows and get an exact zero weight gradient.
"""

from __future__ import annotations

import torch

from sparsetrain.errors import SettingError

BACKENDS = ("native", "loop", "bucketed")
_NATIVE_OK: dict[tuple[str, torch.dtype], bool] = {}
_FORCED: str | None = None


def check_backend(name: str | None, what: str = "grouped matmul backend") -> None:
    """Raise :class:`SettingError` unless ``name`` is ``None`` (automatic) or one of :data:`BACKENDS`."""
    if name is not None and name not in BACKENDS:
        raise SettingError(f"{what} must be None (measured) or one of {BACKENDS}, got {name!r}")


def set_backend(name: str | None) -> None:
    """Force one of :data:`BACKENDS` for every call in this process (``None``: back to automatic)."""
    global _FORCED
    check_backend(name)
    _FORCED = name


def forced_backend() -> str | None:
    """The backend :func:`set_backend` forces, if any."""
    return _FORCED


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


def native_fits(device: torch.device | str, dtype: torch.dtype, *widths: int) -> bool:
    """Whether the ``native`` backend can run matmuls of these row widths (``K`` and ``M`` of every product)."""
    return native_available(device, dtype) and _aligned(*((n, dtype) for n in widths))


def candidates(device: torch.device | str, dtype: torch.dtype, *widths: int) -> list[str]:
    """The backends that can run grouped matmuls with these row widths on ``device`` in ``dtype``."""
    out = ["native"] if native_fits(device, dtype, *widths) else []
    return out + ["loop", "bucketed"]


def default_backend(device: torch.device | str, dtype: torch.dtype, *widths: int) -> str:
    """The backend of an unmeasured call: ``native`` where it fits, else ``loop`` on the CPU, ``bucketed`` elsewhere
    (one launch per size bucket instead of one per expert)."""
    if native_fits(device, dtype, *widths):
        return "native"
    return "loop" if torch.device(device).type == "cpu" else "bucketed"


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


class _LoopGroupedMM(torch.autograd.Function):
    """One ``mm`` per non-empty group, written into slices of one output; the backward likewise."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.counts = counts
        out = x.new_empty(x.shape[0], w.shape[-1])
        start = 0
        for g, c in enumerate(counts):
            if c:
                torch.mm(x[start : start + c], w[g], out=out[start : start + c])
                start += c
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, w = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        gx = x.new_empty(x.shape) if need_x else None
        gw = w.new_empty(w.shape) if need_w else None
        start = 0
        for g, c in enumerate(ctx.counts):
            if not c:
                if need_w:
                    gw[g].zero_()
                continue
            rows = slice(start, start + c)
            if need_x:
                torch.mm(grad[rows], w[g].t(), out=gx[rows])
            if need_w:
                torch.mm(x[rows].t(), grad[rows], out=gw[g])
            start += c
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
        xp = x.new_zeros(members.numel() * c, x.shape[1]).index_add(0, dest, x.index_select(0, sel))
        yp = torch.bmm(xp.view(members.numel(), c, -1), w.index_select(0, members)).view(-1, m)
        outs.append(yp.index_select(0, dest))
        rows.append(sel)
    if len(outs) == 1:
        return outs[0]
    sel = torch.cat(rows)
    return x.new_zeros(n, m).index_copy(0, sel, torch.cat(outs))


def grouped_mm(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """``[N, K] x [G, K, M] -> [N, M]`` where the first ``counts[0]`` rows use ``w[0]``, the next ``counts[1]``
    ``w[1]``, ...

    ``counts`` is ``[G]`` int64 summing to ``N`` (zeros allowed). Differentiable in ``x`` and ``w``. ``backend``:
    one of :data:`BACKENDS`, else what :func:`set_backend` forces, else :func:`default_backend`; ``native`` where
    it cannot run falls back to ``loop`` (CPU) or ``bucketed``.
    """
    backend = _FORCED or backend
    if backend is None or backend == "native":
        fits = x.dtype == w.dtype and native_fits(x.device, x.dtype, x.shape[1], w.shape[-1])
        if backend is None or not fits:
            backend = "native" if fits else ("loop" if x.device.type == "cpu" else "bucketed")
    if backend == "native":
        offs = torch.cumsum(counts, 0).to(torch.int32)
        return _NativeGroupedMM.apply(x.contiguous(), w.contiguous(), offs)
    if backend == "loop":
        return _LoopGroupedMM.apply(x.contiguous(), w.contiguous(), [int(c) for c in counts.tolist()])
    return _bucketed(x, w, counts)
