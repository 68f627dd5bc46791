"""Fully sharded sparse data parallelism (FSSDP) for the experts.

Every rank stores a ``1/W`` row shard of the expert table (so also ``1/W`` of its optimizer
state). A step routes locally, materializes only the experts its own tokens chose with
``sparse_all_gather`` (experts it holds are read locally), computes them locally with grouped
matmuls (no token all-to-all), and in backward sends the expert gradients to their owners with
the gather's backward, a sparse reduce-scatter. Optional re-materialization frees the gathered
experts after forward and gathers them again in backward. Load-aware placement rebalances the
owners and replicates hot experts from a sliding window of token counts (:meth:`FSSDPExperts.rebalance`).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from sparsetrain import _args
from sparsetrain.collective import RowPlacement, group_info, sparse_all_gather, sync_replicas
from sparsetrain.errors import SettingError, SettingTypeError
from sparsetrain.moe.experts import ExpertShape, expert_ffn
from sparsetrain.moe.placement import LoadWindow, plan_placement
from sparsetrain.moe.sharded import ShardedExperts


class FSSDP:
    """``sharding=FSSDP(...)`` for :class:`~sparsetrain.moe.MoE`.

    Args:
        group: process group (default: the world). torch.distributed must be initialized before the
            layer is built (without it the layer runs as a single rank).
        rematerialize: free the gathered experts after forward, gather them again in backward.
        placement: a :class:`~sparsetrain.collective.RowPlacement` of the experts (default: contiguous).
        replica_memory_bytes: memory cap per rank for replicas of hot experts (parameter bytes);
            0 (default) disables replication.
        window: steps of per-expert counts kept for load-aware placement.
        rebalance_every: rebalance automatically every this many steps in :func:`finish_step` (None: only when asked).
        hot_factor: an expert is hot when its windowed load exceeds this multiple of the mean.
        stats: a :class:`~sparsetrain.collective.CollectiveStats` to record traffic in (default: the process-wide one).
    """

    def __init__(
        self,
        group=None,
        *,
        rematerialize: bool = False,
        placement: RowPlacement | None = None,
        replica_memory_bytes: int = 0,
        window: int = 100,
        rebalance_every: int | None = None,
        hot_factor: float = 2.0,
        stats=None,
    ) -> None:
        check = {"error": SettingError, "type_error": SettingTypeError}
        window = _args.integer("FSSDP", "window", window, low=1, **check)
        rebalance_every = _args.integer("FSSDP", "rebalance_every", rebalance_every, low=1, optional=True, **check)
        replica_memory_bytes = _args.integer("FSSDP", "replica_memory_bytes", replica_memory_bytes, low=0, **check)
        rematerialize = _args.boolean("FSSDP", "rematerialize", rematerialize, type_error=SettingTypeError)
        hot_factor = _args.number("FSSDP", "hot_factor", hot_factor, low=0, low_open=True, **check)
        self.group, self.rematerialize, self.placement = group, rematerialize, placement
        self.replica_memory_bytes, self.window = replica_memory_bytes, window
        self.rebalance_every = rebalance_every
        self.hot_factor, self.stats = hot_factor, stats

    def build(self, shape: ExpertShape, num_experts: int, base_seed: int) -> FSSDPExperts:
        """The sharded expert table for one layer (called by :class:`MoE`)."""
        world = group_info(self.group).world_size
        placement = self.placement if self.placement is not None else RowPlacement.contiguous(num_experts, world)
        return FSSDPExperts(shape, num_experts, base_seed, self, placement)


class FSSDPExperts(ShardedExperts):
    """One layer's expert shard under FSSDP (built by :class:`FSSDP`)."""

    mode = "FSSDP"

    def __init__(self, shape: ExpertShape, num_experts: int, base_seed: int, config: FSSDP,
                 placement: RowPlacement) -> None:
        super().__init__(shape, num_experts, base_seed, config.group, placement, config.stats)
        self.config = config
        self.loads = LoadWindow(num_experts, config.window)
        self._steps_since_rebalance = 0
        self._owners = self._without_replicas(placement)

    def _without_replicas(self, placement: RowPlacement) -> RowPlacement:
        if not placement.has_replicas:
            return placement
        return RowPlacement.from_owner(placement.owner(torch.arange(self.num_experts)), self.world_size)

    @property
    def owner_placement(self) -> RowPlacement:
        return self._owners

    def global_stats(self, counts: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, int]:
        total, tokens = super().global_stats(counts, num_tokens)
        if self.training:
            self.loads.add(total)
        return total, tokens

    def _gather_and_run(self, shard: torch.Tensor, x_sorted: torch.Tensor, needed: torch.Tensor,
                        counts: torch.Tensor, backend: str | None = None) -> torch.Tensor:
        rows = sparse_all_gather(shard, needed, placement=self.placement, group=self.group, stats=self.stats)
        w_in, w_out = self.shape.unpack(rows)
        return expert_ffn(x_sorted, w_in, w_out, counts, self.shape.activation, backend)

    def forward(self, x_sorted: torch.Tensor, counts: torch.Tensor, backend: str | None = None) -> torch.Tensor:
        """Gather the experts with local tokens, run them (``backend``: the grouped-matmul backend), return rows in
        ``x_sorted`` order."""
        needed = counts.nonzero().flatten()
        used = counts[needed]
        if self.config.rematerialize and torch.is_grad_enabled():
            return checkpoint(self._gather_and_run, self.shard, x_sorted, needed, used, backend, use_reentrant=False)
        return self._gather_and_run(self.shard, x_sorted, needed, used, backend)

    # ------------------------------------------------------------------ placement
    def replica_rows_cap(self) -> int:
        """Replica rows per rank allowed by ``replica_memory_bytes``."""
        row_bytes = self.shape.row_size * self.shard.element_size()
        return self.config.replica_memory_bytes // row_bytes

    def sync_replicas(self) -> None:
        """Copy owners' rows to their replicas (after the optimizer updated the owners). A collective."""
        if self.placement.has_replicas:
            sync_replicas(self.shard.data, placement=self.placement, group=self.group, stats=self.stats)

    @torch.no_grad()
    def rebalance(self, optimizer: torch.optim.Optimizer | None = None) -> RowPlacement:
        """Re-place the experts from the windowed load; move the rows and the optimizer state rows.

        The ``shard`` parameter is replaced by a new tensor (its row count may change); pass the
        optimizer so its parameter list and state follow.

        A collective: every rank calls it at the same point (the load window is global, so every
        rank computes the same placement). Returns the placement now in use.
        """
        new = plan_placement(
            self.loads.load(), self.world_size, max_replica_rows=self.replica_rows_cap(),
            hot_factor=self.config.hot_factor
        )
        self._steps_since_rebalance = 0
        if new == self.placement:
            return self.placement
        old_owners, mine = self._owners, new.local_ids(self.rank)
        owned = old_owners.num_owned(self.rank)

        def move(t: torch.Tensor) -> torch.Tensor:
            return sparse_all_gather(t[:owned].contiguous(), mine, placement=old_owners, group=self.group,
                                     stats=self.stats)

        old = self.shard
        state = optimizer.state.pop(old, {}) if optimizer is not None else {}
        for key in sorted(state, key=str):
            value = state[key]
            if isinstance(value, torch.Tensor) and value.shape == old.shape:
                state[key] = move(value)
        new_param = self._set_shard(move(old.detach()))
        if optimizer is not None:
            for group in optimizer.param_groups:
                group["params"] = [new_param if p is old else p for p in group["params"]]
            if state:
                optimizer.state[new_param] = state
        self.placement = new
        self._owners = self._without_replicas(new)
        return new

    def after_step(self, optimizer: torch.optim.Optimizer | None) -> None:
        """Refresh replicas; rebalance when ``rebalance_every`` steps have passed."""
        self.sync_replicas()
        self._steps_since_rebalance += 1
        every = self.config.rebalance_every
        if every is not None and self._steps_since_rebalance >= every:
            self.rebalance(optimizer)

