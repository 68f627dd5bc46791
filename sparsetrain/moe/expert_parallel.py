"""Expert parallelism, the classic baseline: experts split across ranks, tokens moved to them.

Rank ``r`` owns a contiguous block of experts. A step sends every routed token to the rank that
owns its expert (variable-split all-to-all), runs the local experts with grouped matmuls, and
sends the results back (a second all-to-all); backward runs the two exchanges in reverse.
"""

from __future__ import annotations

import time

import torch

from sparsetrain.collective import CallRecord, RowPlacement, all_gather_rows, all_to_all, group_info
from sparsetrain.errors import SettingError
from sparsetrain.moe.experts import ExpertShape, expert_ffn
from sparsetrain.moe.sharded import ShardedExperts

OP = "expert_parallel.all_to_all"


class ExpertParallel:
    """``sharding=ExpertParallel(group)`` for :class:`~sparsetrain.moe.MoE`: needs ``num_experts >= world size``.

    ``stats`` (a :class:`~sparsetrain.collective.CollectiveStats`, default the process-wide one)
    records the bytes of the token all-to-alls so they compare directly with FSSDP's.
    """

    def __init__(self, group=None, *, stats=None) -> None:
        self.group, self.stats = group, stats

    def build(self, shape: ExpertShape, num_experts: int, base_seed: int) -> ExpertParallelExperts:
        """The expert block of this rank for one layer (called by :class:`MoE`)."""
        world = group_info(self.group).world_size
        if num_experts < world:
            raise SettingError(
                f"ExpertParallel: {num_experts} experts cannot be split over {world} ranks (each rank needs at least "
                "one); use more experts, a smaller group, or sharding=FSSDP()"
            )
        return ExpertParallelExperts(shape, num_experts, base_seed, self, RowPlacement.contiguous(num_experts, world))


class ExpertParallelExperts(ShardedExperts):
    """One layer's local experts under expert parallelism (built by :class:`ExpertParallel`)."""

    mode = "ExpertParallel"

    def __init__(self, shape: ExpertShape, num_experts: int, base_seed: int, config: ExpertParallel,
                 placement: RowPlacement) -> None:
        super().__init__(shape, num_experts, base_seed, config.group, placement, config.stats)
        self.first = int(placement.owned_ids(self.rank)[0]) if placement.num_owned(self.rank) else 0
        self.local = placement.num_owned(self.rank)
        self.bounds = [0] + [int(placement.owned_ids(r)[-1]) + 1 for r in range(self.world_size)]

    def _record(self, rows_out: int, rows_in: int, row_bytes: int, seconds: float) -> None:
        rec = CallRecord(OP, self.rank, self.world_size)
        rec.bytes_sent, rec.bytes_received = rows_out * row_bytes, rows_in * row_bytes
        rec.rows_served, rec.seconds = rows_in, seconds
        rec.meta_bytes = (self.world_size - 1) * self.num_experts * 8
        self.stats.record(rec)

    def forward(self, x_sorted: torch.Tensor, counts: torch.Tensor, backend: str | None = None) -> torch.Tensor:
        """Send rows to their experts' ranks, run the local experts (``backend``: the grouped-matmul backend), bring
        the results back."""
        t0 = time.perf_counter()
        all_counts = all_gather_rows(counts.to(torch.int64), self.group)  # [W, E]
        # [src, dst]
        per_rank = torch.stack([all_counts[:, a:b].sum(1) for a, b in zip(self.bounds[:-1], self.bounds[1:])], 1)
        send = per_rank[self.rank].tolist()
        recv = per_rank[:, self.rank].tolist()
        x_in = _Tally.apply(all_to_all(x_sorted, send, recv, self.group), self, send, recv)
        mine = all_counts[:, self.first : self.first + self.local]  # [src, local expert]
        local_ids = torch.arange(self.local, device=mine.device).repeat(self.world_size)
        expert_of_row = torch.repeat_interleave(local_ids, mine.reshape(-1)).to(x_in.device)
        perm = torch.argsort(expert_of_row, stable=True)
        w_in, w_out = self.shape.unpack(self.shard)
        out = expert_ffn(x_in[perm], w_in, w_out, mine.sum(0), self.shape.activation, backend)
        back = torch.empty_like(perm)
        back[perm] = torch.arange(perm.numel(), device=perm.device)
        result = all_to_all(out[back], recv, send, self.group)
        if self.world_size > 1:  # dispatch sends `away` rows and receives `arriving`; the combine the reverse
            away, arriving = sum(send) - send[self.rank], sum(recv) - recv[self.rank]
            self._record(away + arriving, arriving + away, x_sorted.shape[1] * x_sorted.element_size(),
                         time.perf_counter() - t0)
        return _Tally.apply(result, self, recv, send)


class _Tally(torch.autograd.Function):
    """Identity whose backward records the bytes of the matching backward all-to-all."""

    @staticmethod
    def forward(ctx, x, layer, send, recv):
        ctx.layer, ctx.send, ctx.recv, ctx.row_bytes = layer, send, recv, x.shape[1] * x.element_size()
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        layer, r = ctx.layer, ctx.layer.rank
        if layer.world_size > 1:
            out_rows, in_rows = sum(ctx.recv) - ctx.recv[r], sum(ctx.send) - ctx.send[r]
            layer._record(out_rows, in_rows, ctx.row_bytes, 0.0)
        return grad, None, None, None
