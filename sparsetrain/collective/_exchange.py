"""Low-level exchange helpers shared by the sparse collectives.

Every collective first runs one small ``all_gather`` of a fixed-size int64 metadata
vector (validity flag, dtype, row shape, placement digest, per-destination counts).
Input errors found on any rank are raised on every rank right after it, before any
payload moves; mismatched dtypes and row shapes are reported the same way. Every
wait has a timeout, and a failed or timed-out exchange becomes a
:class:`CollectiveError` naming the operation, stage and rank (:func:`peer_lost`, the one
dead-peer rule, which both feature stores over ranks follow).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from sparsetrain.collective.groups import GroupInfo, Timeout, as_timedelta
from sparsetrain.errors import CollectiveError, InputError

DTYPES = (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128,
)  # fmt: skip
MAX_DIMS = 4  # trailing dims compared one by one; the rest through their product

# status codes of the local validation
OK, BAD_IDS, ID_OUT_OF_RANGE, BAD_LOCAL_ROWS, BAD_WORLD, BAD_GRAD_ROWS, NOT_FLOAT, LOCAL_EXCEPTION = range(8)

# layout of the metadata vector
_STATUS, _A, _B, _DTYPE, _NDIM, _DIMS = 0, 1, 2, 3, 4, 5
_NUMEL = _DIMS + MAX_DIMS
_FINGERPRINT = _NUMEL + 1
_GRAD = _FINGERPRINT + 1
_FIXED = _GRAD + 1


def peer_lost(exc: BaseException, *, op: str, stage: str, info: GroupInfo, timeout: Timeout) -> CollectiveError:
    """The one dead-peer rule: an exchange that failed or timed out (a peer rank died, stopped, never reached it or
    called a different collective) is one :class:`CollectiveError` line naming the operation, the stage, this rank and
    the fix."""
    td = as_timedelta(timeout)
    limit = f"{td.total_seconds():g} s" if td is not None else "the process group's timeout"
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:400]
    return CollectiveError(
        f"{op}: the {stage} exchange failed on rank {info.rank} of {info.world_size} ({reason}). A peer rank died, "
        f"did not reach this collective within {limit}, or called a different collective; check the other ranks' "
        "logs, then end this process and restart the job (from its last checkpoint)"
    )


def wait(work, *, op: str, stage: str, info: GroupInfo, timeout: Timeout) -> None:
    """Wait for ``work``; a failure or timeout is :func:`peer_lost`'s :class:`CollectiveError`."""
    td = as_timedelta(timeout)
    try:
        if td is None:
            work.wait()
        else:
            work.wait(td)
    except RuntimeError as exc:
        raise peer_lost(exc, op=op, stage=stage, info=info, timeout=timeout) from exc


def dtype_code(dtype: torch.dtype) -> int:
    return DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES)


def dtype_name(code: int) -> str:
    return str(DTYPES[code]).replace("torch.", "") if 0 <= code < len(DTYPES) else "an unsupported dtype"


def local_meta(
    status: tuple[int, int, int], rows_dtype: torch.dtype, trailing: Sequence[int], fingerprint: int, grad_flag: int
) -> list[int]:
    """The fixed part of this rank's metadata vector."""
    dims = list(trailing[:MAX_DIMS]) + [-1] * (MAX_DIMS - min(len(trailing), MAX_DIMS))
    numel = 1
    for d in trailing:
        numel *= int(d)
    return [*status, dtype_code(rows_dtype), len(trailing), *dims, numel, fingerprint, grad_flag]


def exchange_meta(
    fixed: list[int], counts: torch.Tensor, *, op: str, info: GroupInfo, device: torch.device, timeout: Timeout
) -> torch.Tensor:
    """All-gather every rank's metadata; returns an int64 CPU matrix [world_size, fixed + world_size]."""
    mine = torch.cat([torch.tensor(fixed, dtype=torch.int64), counts.to("cpu", torch.int64)])
    if not info.distributed or info.world_size == 1:
        return mine.unsqueeze(0)
    mine = mine.to(device)
    parts = [torch.empty_like(mine) for _ in range(info.world_size)]
    work = dist.all_gather(parts, mine, group=info.group, async_op=True)
    wait(work, op=op, stage="metadata", info=info, timeout=timeout)
    return torch.stack(parts).cpu()


def counts_matrix(meta: torch.Tensor) -> torch.Tensor:
    """``C[src, dst]``: rows rank ``src`` asks of (or sends to) rank ``dst``."""
    return meta[:, _FIXED:]


def _describe(code: int, a: int, b: int) -> str:
    if code == BAD_IDS:
        return (f"row_ids must be a 1-D integer tensor (got {'a floating-point' if a else 'a non-integer'} tensor with "
                f"{b} dims)")
    if code == ID_OUT_OF_RANGE:
        return f"row id {a} is outside the table [0, {b}); ids must index the global table the placement describes"
    if code == BAD_LOCAL_ROWS:
        return (f"local_rows has {a} rows but the placement gives this rank {b}; build it with placement.shard(table, "
                "rank)")
    if code == BAD_WORLD:
        return f"the placement is for {a} ranks but the process group has {b}; build the placement for the group's size"
    if code == BAD_GRAD_ROWS:
        return f"grad_rows has {a} rows but row_ids has {b}; pass one gradient row per requested id"
    if code == NOT_FLOAT:
        return "gradient rows must be a floating-point tensor"
    return "checking the inputs raised an exception (see that rank's log)"


def _shape_str(row: list[int]) -> str:
    ndim = row[_NDIM]
    dims = [str(d) for d in row[_DIMS : _DIMS + min(ndim, MAX_DIMS)]]
    if ndim > MAX_DIMS:
        dims.append(f"... ({row[_NUMEL]} values)")
    return "(" + ", ".join(dims) + ("," if ndim == 1 else "") + ")"


def check_meta(meta: torch.Tensor, *, op: str, info: GroupInfo, what: str) -> None:
    """Raise the same :class:`InputError` on every rank if any rank's input is bad or ranks disagree."""
    rows = meta[:, :_FIXED].tolist()
    bad = [r for r, row in enumerate(rows) if row[_STATUS] != OK]
    if bad:
        lines = "; ".join(f"rank {r}: {_describe(rows[r][_STATUS], rows[r][_A], rows[r][_B])}" for r in bad)
        raise InputError(f"{op}: bad input on {len(bad)} of {info.world_size} ranks (no data was exchanged) "
                         f"— {lines}")
    if len({row[_FINGERPRINT] for row in rows}) > 1:
        raise InputError(
            f"{op}: the ranks passed different placements (digests {[row[_FINGERPRINT] for row in rows]}); "
            "every rank must build the same RowPlacement"
        )
    if len({row[_DTYPE] for row in rows}) > 1:
        names = ", ".join(f"rank {r}: {dtype_name(row[_DTYPE])}" for r, row in enumerate(rows))
        raise InputError(f"{op}: {what} dtypes differ between ranks ({names}); cast every rank's {what} to "
                         "one dtype")
    if len({tuple(row[_NDIM:_FINGERPRINT]) for row in rows}) > 1:
        shapes = ", ".join(f"rank {r}: {_shape_str(row)}" for r, row in enumerate(rows))
        raise InputError(
            f"{op}: {what} row shapes (all dims after the first) differ between ranks ({shapes}); every rank must use "
            "the same width"
        )
    grads = [row[_GRAD] for row in rows]
    if any(g >= 0 for g in grads) and len(set(grads)) > 1:
        flags = ", ".join(f"rank {r}: {'yes' if g == 1 else 'no'}" for r, g in enumerate(grads))
        raise InputError(
            f"{op}: ranks disagree on whether local_rows needs a gradient ({flags}); the backward pass is a "
            "collective, so either every rank or no rank must require grad"
        )


def exchange_rows(
    send: torch.Tensor,
    send_splits: Sequence[int],
    recv_splits: Sequence[int],
    *,
    op: str,
    stage: str,
    info: GroupInfo,
    device: torch.device,
    timeout: Timeout,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One step of a sparse collective: ``all_to_all_single`` with variable splits along dim 0, on ``device``,
    waited for with ``timeout``; returns the received rows. Not differentiable (the sparse collectives'
    autograd Functions call it in forward and backward); the differentiable exchange is
    :func:`sparsetrain.collective.all_to_all`.

    ``out`` (optional, contiguous, right shape) receives the rows in place when it lives on ``device``.
    """
    send = send.to(device).contiguous()
    shape = (int(sum(recv_splits)), *send.shape[1:])
    if not info.distributed or info.world_size == 1:  # every row goes to this rank itself
        if out is None:
            return send
        return out.copy_(send)
    direct = out is not None and out.device == device and out.is_contiguous() and tuple(out.shape) == shape
    recv = out if direct else torch.empty(shape, dtype=send.dtype, device=device)
    try:
        work = dist.all_to_all_single(
            recv, send, output_split_sizes=list(map(int, recv_splits)), input_split_sizes=list(map(int, send_splits)),
            group=info.group, async_op=True,
        )  # fmt: skip
    except RuntimeError as exc:  # (a peer already gone can fail the call itself, not only its wait)
        raise peer_lost(exc, op=op, stage=stage, info=info, timeout=timeout) from exc
    wait(work, op=op, stage=stage, info=info, timeout=timeout)
    if out is not None and not direct:
        out.copy_(recv)
        return out
    return recv


def pack_rows(ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Ids and rows side by side as bytes [n, 8 + row bytes], so both travel in one exchange."""
    n = ids.numel()
    numel = 1
    for d in rows.shape[1:]:
        numel *= int(d)
    id_bytes = ids.to(torch.int64).contiguous().view(torch.uint8).reshape(n, 8)
    row_bytes = rows.reshape(n, numel).contiguous().view(torch.uint8)
    return torch.cat([id_bytes, row_bytes], dim=1)


def unpack_rows(buf: torch.Tensor, dtype: torch.dtype, trailing: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_rows`."""
    n = buf.shape[0]
    # reshape(-1) yields unit strides even for a single row, which dtype views need
    ids = buf[:, :8].reshape(-1).view(torch.int64)
    rows = buf[:, 8:].reshape(-1).view(dtype).reshape(n, *trailing)
    return ids, rows
