"""``sparse_all_gather``, ``sparse_reduce_scatter`` and ``sync_replicas`` over torch.distributed.

A rank asks for rows by global id; requests are deduplicated, rows the rank holds
itself (owned or replica) are read locally, and only the distinct remaining ids and
their rows cross the network, in ``all_to_all_single`` exchanges with variable
splits (gloo and NCCL both support them). The reduce-scatter is the mirror: row
gradients are summed per distinct id locally, then ids and sums travel together to
the owners in one exchange.

Every call is collective over ``group``: all ranks must call it, in the same order
(an empty ``row_ids`` is fine). When torch.distributed is not initialized the calls
run locally as a single rank. Under NCCL, rows travel on the current CUDA device, so
call ``torch.cuda.set_device(local_rank)`` first (as for any NCCL collective); under
gloo, CUDA rows are staged through host memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from sparsetrain.collective import _exchange as ex
from sparsetrain.collective.groups import Timeout, comm_device, group_info
from sparsetrain.collective.placement import RowPlacement
from sparsetrain.collective.remote_rows import fetch_rows, group_by_owner
from sparsetrain.collective.stats import CallRecord, CollectiveStats, collective_stats
from sparsetrain.errors import InputError, SettingTypeError

GATHER = "sparse_all_gather"
REDUCE = "sparse_reduce_scatter"
GATHER_BACKWARD = "sparse_all_gather.backward"
SYNC = "sync_replicas"


@dataclass
class _Plan:
    """Who serves which distinct id of one request, and the exchange sizes once agreed.

    Distinct rows are staged in one buffer: the ``num_local`` rows this rank holds first, then
    the remote ones grouped by serving rank (the order they arrive in), so received rows land
    in place and one final ``index_select`` by ``slot`` restores the request order.
    """

    ids: torch.Tensor  # the request
    slot: torch.Tensor  # request position -> buffer row
    buffer_ids: torch.Tensor  # global id of each buffer row
    num_local: int
    local_idx: torch.Tensor  # buffer rows [0, num_local) come from these local_rows indices
    counts: torch.Tensor  # [world] distinct ids asked of each rank (0 for self)
    send_splits: list[int] = field(default_factory=list)
    recv_splits: list[int] = field(default_factory=list)
    exchanged: bool = False  # whether anything crossed the network (same answer on every rank)
    served_idx: torch.Tensor | None = None  # local indices of the rows this rank served, in receive order

    @classmethod
    def build(cls, ids: torch.Tensor, placement: RowPlacement, rank: int, *, to_owner: bool) -> _Plan:
        uniq, inverse = torch.unique(ids, sorted=True, return_inverse=True)
        if to_owner:
            holder, local = placement.locate(uniq)
        else:
            holder, local = placement.nearest_holder(uniq, rank), None
        mine = holder == rank
        local_pos = mine.nonzero().flatten()
        remote_pos = (~mine).nonzero().flatten()
        order, counts = group_by_owner(holder[remote_pos], placement.world_size)
        remote_pos = remote_pos[order]
        order = torch.cat([local_pos, remote_pos])
        where = torch.empty_like(order)
        where[order] = torch.arange(order.numel(), device=order.device)
        buffer_ids = uniq[order]
        if local is not None:
            local_idx = local[local_pos]
        else:
            local_idx = placement.local_index_on(rank, buffer_ids[: local_pos.numel()])
        return cls(ids, where[inverse], buffer_ids, local_pos.numel(), local_idx, counts)

    @property
    def num_unique(self) -> int:
        return self.buffer_ids.numel()

    @property
    def remote_ids(self) -> torch.Tensor:
        return self.buffer_ids[self.num_local :]

    def agree(self, meta: torch.Tensor, rank: int) -> bool:
        """Read the exchange sizes from the gathered metadata; False when nothing crosses the network."""
        c = ex.counts_matrix(meta)
        self.send_splits = c[rank].tolist()
        self.recv_splits = c[:, rank].tolist()
        self.exchanged = bool(c.sum() > 0)
        return self.exchanged

    def record(self, rec: CallRecord) -> None:
        rec.rows_requested = self.ids.numel()
        rec.rows_unique = self.num_unique
        rec.rows_local = self.num_local
        rec.rows_remote = self.num_unique - self.num_local


def _validate_ids(row_ids, num_rows: int, device: torch.device) -> tuple[tuple[int, int, int], torch.Tensor]:
    if not isinstance(row_ids, torch.Tensor):
        row_ids = torch.as_tensor(row_ids)
    if row_ids.dtype.is_floating_point or row_ids.dtype.is_complex or row_ids.dtype == torch.bool or row_ids.dim() != 1:
        return (ex.BAD_IDS, int(row_ids.dtype.is_floating_point), row_ids.dim()), row_ids
    ids = row_ids.to(device=device, dtype=torch.int64)
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0:
            return (ex.ID_OUT_OF_RANGE, lo, num_rows), ids
        if hi >= num_rows:
            return (ex.ID_OUT_OF_RANGE, hi, num_rows), ids
    return (ex.OK, 0, 0), ids


def _row_numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _raise_local(err: InputError, local_exc: BaseException | None):
    if local_exc is not None:
        raise err from local_exc
    raise err


class _Call:
    """Shared bookkeeping of one collective call: group, devices, validation, metadata, stats."""

    def __init__(self, op: str, placement: RowPlacement, group, timeout: Timeout, stats: CollectiveStats | None):
        if not isinstance(placement, RowPlacement):
            raise SettingTypeError(f"{op}: placement must be a RowPlacement, got {type(placement).__name__}")
        self.op, self.placement, self.timeout = op, placement, timeout
        self.info = group_info(group)
        self.stats = stats if stats is not None else collective_stats()
        self.rec = CallRecord(op, self.info.rank, self.info.world_size)
        self.t0 = time.perf_counter()
        self.status: tuple[int, int, int] = (ex.OK, 0, 0)
        self.local_exc: BaseException | None = None

    def check_world(self) -> bool:
        if self.placement.world_size != self.info.world_size:
            self.status = (ex.BAD_WORLD, self.placement.world_size, self.info.world_size)
            return False
        return True

    def agree(self, dtype, trailing, counts, device, *, what: str, grad_flag: int = -1) -> torch.Tensor:
        """Exchange metadata and raise on every rank if any input is bad; returns the metadata matrix."""
        distributed = self.info.distributed and self.info.world_size > 1
        self.device = comm_device(self.info.group, device) if distributed else device
        fixed = ex.local_meta(self.status, dtype, trailing, self.placement.fingerprint(), grad_flag)
        meta = ex.exchange_meta(fixed, counts, op=self.op, info=self.info, device=self.device, timeout=self.timeout)
        self.rec.meta_bytes = (self.info.world_size - 1) * meta.shape[1] * 8
        try:
            ex.check_meta(meta, op=self.op, info=self.info, what=what)
        except InputError as err:
            _raise_local(err, self.local_exc)
        return meta

    def a2a(self, send, send_splits, recv_splits, stage: str, out: torch.Tensor | None = None) -> torch.Tensor:
        return ex.exchange_rows(
            send, send_splits, recv_splits, op=self.op, stage=stage, info=self.info, device=self.device,
            timeout=self.timeout, out=out,
        )  # fmt: skip

    def finish(self) -> None:
        self.rec.seconds = time.perf_counter() - self.t0
        self.stats.record(self.rec)


def _gather_impl(local_rows, row_ids, placement, group, timeout, stats, grad_flag) -> tuple[torch.Tensor, _Plan]:
    buf, plan, call = gather_distinct(local_rows, row_ids, placement, group, timeout, stats, grad_flag)
    out = buf.index_select(0, plan.slot).reshape(plan.slot.numel(), *local_rows.shape[1:])
    call.finish()
    return out, plan


def gather_distinct(local_rows, row_ids, placement, group, timeout, stats, grad_flag=-1, alloc=None):
    """The gather without its last step: ``(buf, plan, call)`` where ``buf`` [distinct ids, row numel] holds each
    distinct requested row once and ``buf[plan.slot]`` is the answer; ``call.finish()`` records the stats.

    ``alloc(n)``, when given, returns the contiguous ``[n, row numel]`` tensor to fill (a reused staging buffer).
    """
    call = _Call(GATHER, placement, group, timeout, stats)
    rank, world = call.info.rank, call.info.world_size
    trailing = tuple(local_rows.shape[1:]) if isinstance(local_rows, torch.Tensor) else ()
    device = local_rows.device if isinstance(local_rows, torch.Tensor) else torch.device("cpu")
    plan = None
    counts = torch.zeros(world, dtype=torch.int64)
    try:
        if not isinstance(local_rows, torch.Tensor) or local_rows.dim() < 1:
            raise SettingTypeError(f"{GATHER}: local_rows must be a tensor with one row per local row (at least 1-D)")
        if call.check_world():
            if local_rows.shape[0] != placement.local_count(rank):
                call.status = (ex.BAD_LOCAL_ROWS, local_rows.shape[0], placement.local_count(rank))
            else:
                call.status, ids = _validate_ids(row_ids, placement.num_rows, device)
                if call.status[0] == ex.OK:
                    plan = _Plan.build(ids, placement, rank, to_owner=False)
                    counts = plan.counts
    except Exception as exc:  # reported to every rank below, re-raised here as the cause
        call.status, call.local_exc = (ex.LOCAL_EXCEPTION, 0, 0), exc
    meta = call.agree(local_rows.dtype if isinstance(local_rows, torch.Tensor) else torch.float32, trailing, counts,
                      device,
                      what="local_rows", grad_flag=grad_flag)  # fmt: skip
    numel = _row_numel(trailing)
    flat = local_rows.reshape(local_rows.shape[0], numel)
    if alloc is None:
        buf = torch.empty((plan.num_unique, numel), dtype=local_rows.dtype, device=device)
    else:
        buf = alloc(plan.num_unique)
    torch.index_select(flat, 0, plan.local_idx, out=buf[: plan.num_local])
    if plan.agree(meta, rank):
        send_ids = plan.remote_ids

        def serve(asked: torch.Tensor) -> torch.Tensor:
            plan.served_idx = placement.local_index_on(rank, asked.to(device))
            if plan.served_idx.numel() and bool((plan.served_idx < 0).any()):
                raise InputError(f"{GATHER}: rank {rank} was asked for rows it does not hold; the ranks' "
                                 "placements differ")
            return flat.index_select(0, plan.served_idx)

        recv_ids, served, _ = fetch_rows(send_ids, plan.send_splits, plan.recv_splits, serve, op=GATHER, info=call.info,
                                         device=call.device, timeout=call.timeout, out=buf[plan.num_local :])
        row_bytes = numel * local_rows.element_size()
        call.rec.rows_served = served.shape[0]
        call.rec.bytes_sent = send_ids.numel() * 8 + served.shape[0] * row_bytes
        call.rec.bytes_received = recv_ids.numel() * 8 + (plan.num_unique - plan.num_local) * row_bytes
    plan.record(call.rec)
    return buf, plan, call


def _sum_per_distinct_id(g: torch.Tensor, plan: _Plan, local_count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient rows ``g`` (one per requested id) summed per distinct id (``g_buf``, in the plan's slot order),
    and this rank's ``[local_count, numel]`` gradient holding the sums of the ids it owns itself."""
    g_buf = torch.zeros((plan.num_unique, g.shape[1]), dtype=g.dtype, device=g.device).index_add_(0, plan.slot, g)
    out = torch.zeros((local_count, g.shape[1]), dtype=g.dtype, device=g.device)
    out.index_add_(0, plan.local_idx, g_buf[: plan.num_local])
    return g_buf, out


def _backward_with_plan(grad_out, plan: _Plan, placement, local_shape, group, timeout, stats) -> torch.Tensor:
    """Reduce-scatter along the forward's routes (valid when there are no replicas: server == owner)."""
    call = _Call(GATHER_BACKWARD, placement, group, timeout, stats)
    trailing = tuple(local_shape[1:])
    numel = _row_numel(trailing)
    device = grad_out.device
    g = grad_out.reshape(-1, numel)
    g_buf, out = _sum_per_distinct_id(g, plan, local_shape[0])
    if plan.exchanged:
        call.device = comm_device(call.info.group, device)
        send = g_buf[plan.num_local :]
        got = call.a2a(send, plan.send_splits, plan.recv_splits, "gradient").to(device)
        out.index_add_(0, plan.served_idx, got)
        row_bytes = numel * g.element_size()
        call.rec.bytes_sent = send.shape[0] * row_bytes
        call.rec.bytes_received = got.shape[0] * row_bytes
        call.rec.rows_served = got.shape[0]
    plan.record(call.rec)
    call.finish()
    return out.reshape(local_shape)


def _reduce_scatter_impl(grad_rows, row_ids, placement, group, timeout, stats) -> torch.Tensor:
    call = _Call(REDUCE, placement, group, timeout, stats)
    rank, world = call.info.rank, call.info.world_size
    trailing = tuple(grad_rows.shape[1:]) if isinstance(grad_rows, torch.Tensor) else ()
    device = grad_rows.device if isinstance(grad_rows, torch.Tensor) else torch.device("cpu")
    plan = None
    counts = torch.zeros(world, dtype=torch.int64)
    try:
        if not isinstance(grad_rows, torch.Tensor) or grad_rows.dim() < 1:
            raise SettingTypeError(f"{REDUCE}: grad_rows must be a tensor with one row per requested id (at least 1-D)")
        if call.check_world():
            call.status, ids = _validate_ids(row_ids, placement.num_rows, device)
            if call.status[0] == ex.OK and ids.numel() != grad_rows.shape[0]:
                call.status = (ex.BAD_GRAD_ROWS, grad_rows.shape[0], ids.numel())
            elif call.status[0] == ex.OK and not grad_rows.dtype.is_floating_point:
                call.status = (ex.NOT_FLOAT, 0, 0)
            if call.status[0] == ex.OK:
                plan = _Plan.build(ids, placement, rank, to_owner=True)
                counts = plan.counts
    except Exception as exc:  # reported to every rank below, re-raised here as the cause
        call.status, call.local_exc = (ex.LOCAL_EXCEPTION, 0, 0), exc
    dtype = grad_rows.dtype if isinstance(grad_rows, torch.Tensor) else torch.float32
    meta = call.agree(dtype, trailing, counts, device, what="grad_rows")
    numel = _row_numel(trailing)
    g = grad_rows.detach().reshape(-1, numel)
    g_buf, out = _sum_per_distinct_id(g, plan, placement.local_count(rank))
    if plan.agree(meta, rank):
        send = ex.pack_rows(plan.remote_ids, g_buf[plan.num_local :])
        got = call.a2a(send, plan.send_splits, plan.recv_splits, "gradient").to(device)
        got_ids, got_rows = ex.unpack_rows(got, dtype, (numel,))
        owner, local = placement.locate(got_ids)
        if got_ids.numel() and bool((owner != rank).any()):
            raise InputError(f"{REDUCE}: rank {rank} received gradients for rows it does not own; the ranks' "
                             "placements differ")
        out.index_add_(0, local, got_rows)
        call.rec.bytes_sent = send.numel()
        call.rec.bytes_received = got.numel()
        call.rec.rows_served = got.shape[0]
    plan.record(call.rec)
    call.finish()
    return out.reshape(placement.local_count(rank), *trailing)


class _SparseAllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local_rows, row_ids, placement, group, timeout, stats, grad_flag):
        out, plan = _gather_impl(local_rows, row_ids, placement, group, timeout, stats, grad_flag)
        ctx.plan, ctx.placement, ctx.group, ctx.timeout, ctx.stats = plan, placement, group, timeout, stats
        ctx.local_shape = tuple(local_rows.shape)
        ctx.save_for_backward(plan.ids)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        placement = ctx.placement
        if placement.has_replicas:
            (ids,) = ctx.saved_tensors
            g = _reduce_scatter_impl(grad_out, ids, placement, ctx.group, ctx.timeout, ctx.stats)
        else:
            g = _backward_with_plan(grad_out, ctx.plan, placement, ctx.local_shape, ctx.group, ctx.timeout, ctx.stats)
        return g, None, None, None, None, None, None


def sparse_all_gather(
    local_rows: torch.Tensor,
    row_ids: torch.Tensor,
    *,
    placement: RowPlacement,
    group=None,
    timeout: Timeout = None,
    stats: CollectiveStats | None = None,
) -> torch.Tensor:
    """Rows ``row_ids`` of the table sharded over ``group`` by ``placement``, in request order.

    ``local_rows`` holds this rank's rows (``placement.local_count(rank)`` of them, any
    trailing shape, any dtype). ``row_ids`` may have duplicates, any order, or be empty,
    and differ per rank. Each distinct id is read from the nearest copy (this rank's own
    rows when it holds one). Differentiable in ``local_rows``: the backward is
    :func:`sparse_reduce_scatter`, a collective too, so every rank must backpropagate
    through every gather. ``timeout`` (seconds or timedelta) bounds each exchange;
    default: the process group's timeout. Bad input on any rank raises
    :class:`InputError` on every rank.
    """
    grad_flag = int(torch.is_grad_enabled() and isinstance(local_rows, torch.Tensor) and local_rows.requires_grad)
    if grad_flag:
        return _SparseAllGather.apply(local_rows, row_ids, placement, group, timeout, stats, grad_flag)
    out, _ = _gather_impl(local_rows, row_ids, placement, group, timeout, stats, grad_flag)
    return out


def sparse_reduce_scatter(
    grad_rows: torch.Tensor,
    row_ids: torch.Tensor,
    *,
    placement: RowPlacement,
    group=None,
    timeout: Timeout = None,
    stats: CollectiveStats | None = None,
) -> torch.Tensor:
    """Sum every rank's ``grad_rows`` (row ``i`` belongs to global row ``row_ids[i]``) into the owners' rows.

    Returns a tensor shaped like this rank's ``local_rows``
    (``[placement.local_count(rank), *grad_rows.shape[1:]]``): owned rows hold the sum over
    all ranks and duplicates; replica slots are zero, since every copy's gradient goes to
    the owner. Not itself differentiable (the result is detached).
    """
    with torch.no_grad():
        return _reduce_scatter_impl(grad_rows, row_ids, placement, group, timeout, stats)


def sync_replicas(
    local_rows: torch.Tensor,
    *,
    placement: RowPlacement,
    group=None,
    timeout: Timeout = None,
    stats: CollectiveStats | None = None,
) -> torch.Tensor:
    """Copy every owned row to its replica slots on the other ranks, in place; returns ``local_rows``.

    Call after an optimizer step updates the owners' rows so replicas read the new values.
    """
    call = _Call(SYNC, placement, group, timeout, stats)
    rank, world = call.info.rank, call.info.world_size
    trailing = tuple(local_rows.shape[1:])
    counts = torch.zeros(world, dtype=torch.int64)
    send_idx = torch.zeros(0, dtype=torch.int64)
    try:
        if call.check_world():
            if local_rows.shape[0] != placement.local_count(rank):
                call.status = (ex.BAD_LOCAL_ROWS, local_rows.shape[0], placement.local_count(rank))
            else:
                parts = []
                for dst in range(world):
                    reps = placement.replica_ids(dst)
                    if dst == rank or not reps.numel():
                        continue
                    owner, local = placement.locate(reps)
                    parts.append(local[owner == rank])
                    counts[dst] = parts[-1].numel()
                if parts:
                    send_idx = torch.cat(parts)
    except Exception as exc:  # reported to every rank below, re-raised here as the cause
        call.status, call.local_exc = (ex.LOCAL_EXCEPTION, 0, 0), exc
    meta = call.agree(local_rows.dtype, trailing, counts, local_rows.device, what="local_rows")
    c = ex.counts_matrix(meta)
    if c.sum() > 0:
        numel = _row_numel(trailing)
        with torch.no_grad():
            flat = local_rows.detach().reshape(local_rows.shape[0], numel)
            send = flat.index_select(0, send_idx.to(local_rows.device))
            got = call.a2a(send, c[rank].tolist(), c[:, rank].tolist(), "replica").to(local_rows.device)
            reps = placement.replica_ids(rank)
            order = torch.argsort(placement.owner(reps), stable=True)  # arrival order: by source rank, then id
            slots = (placement.num_owned(rank) + order).to(local_rows.device)
            local_rows.detach().view(local_rows.shape[0], numel).index_copy_(0, slots, got)
        row_bytes = numel * local_rows.element_size()
        call.rec.bytes_sent = send.shape[0] * row_bytes
        call.rec.bytes_received = got.shape[0] * row_bytes
        call.rec.rows_served = send.shape[0]
        call.rec.rows_remote = got.shape[0]
    call.finish()
    return local_rows
