"""A feature table partitioned over ranks, read with :func:`sparse_all_gather`.

A :class:`sparsetrain.storage.FeatureSource` (``gather(ids, *, out=None)``, ``shape``,
``dtype``, ``device``, ``stats``). Unlike a local store, every ``gather`` is a collective:
all ranks of the group call it the same number of times (an empty ``ids`` is fine), just
as every rank runs every step under DDP. That is also why it keeps its own static cache
of hot remote rows instead of sitting behind :class:`sparsetrain.storage.CachedFeatures`:
a dynamic cache skips the backing store when a batch is all hits, which differs by rank.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sparsetrain.collective.groups import Timeout, group_info
from sparsetrain.collective.placement import RowPlacement
from sparsetrain.collective.sparse_ops import gather_distinct
from sparsetrain.collective.stats import CollectiveStats
from sparsetrain.errors import InputError
from sparsetrain.storage.base import FeatureSource


class ShardedFeatures(FeatureSource):
    """Rows ``placement.local_ids(rank)`` of a feature table on each rank; ``gather`` reads any rows.

    ``cache_ids`` (optional, per rank) names remote rows this rank reads often (e.g. the
    highest-degree nodes); they are fetched once at construction and then served locally.
    Construction is collective: every rank of ``group`` builds its store at the same time.
    ``stats`` counts, per gather, distinct remote rows served from the cache (``hits``) or
    fetched (``misses``) and the bytes of fetched rows (``bytes_moved``); ``collective_stats``
    has the full network accounting of the underlying calls.
    """

    collective = True  # gather must be called on every rank, even with no ids

    def __init__(
        self,
        local_rows: torch.Tensor,
        placement: RowPlacement,
        *,
        group=None,
        cache_ids: torch.Tensor | None = None,
        timeout: Timeout = None,
    ) -> None:
        super().__init__((placement.num_rows, *local_rows.shape[1:]), local_rows.dtype, local_rows.device)
        self.local_rows = local_rows
        self.placement = placement
        self.group = group
        self.timeout = timeout
        self.rank = group_info(group).rank
        self.collective_stats = CollectiveStats()
        self._slot: torch.Tensor | None = None
        self._cache = local_rows.new_empty((0, *local_rows.shape[1:]))
        self._fill_cache(cache_ids)

    @classmethod
    def from_table(
        cls,
        table,
        *,
        partition: RowPlacement | torch.Tensor | np.ndarray | None = None,
        group=None,
        device: torch.device | str | None = None,
        cache_ids: torch.Tensor | None = None,
        timeout: Timeout = None,
    ) -> ShardedFeatures:
        """Keep this rank's share of a full table every rank can read (a tensor or a memory-mapped array).

        ``partition``: None splits rows into contiguous id ranges; an owner-rank array
        partitions by it; a :class:`RowPlacement` is used as is. Only this rank's rows are copied.
        """
        info = group_info(group)
        if partition is None:
            placement = RowPlacement.contiguous(len(table), info.world_size)
        elif isinstance(partition, RowPlacement):
            placement = partition
        else:
            placement = RowPlacement.from_owner(partition, info.world_size)
        if placement.num_rows != len(table):
            raise InputError(
                f"ShardedFeatures.from_table: the partition covers {placement.num_rows} rows but the table has "
                f"{len(table)}; pass one owner rank per table row"
            )
        local = placement.shard(table, info.rank)
        if device is not None:
            local = local.to(device)
        return cls(local, placement, group=group, cache_ids=cache_ids, timeout=timeout)

    def _fill_cache(self, cache_ids: torch.Tensor | None) -> None:
        ids = (torch.zeros(0, dtype=torch.int64) if cache_ids is None
               else torch.as_tensor(cache_ids).to(torch.int64).cpu())
        if ids.numel():
            ids = torch.unique(ids)
            # rows held here need no cache; out-of-range ids go on to the collective, which reports them on every rank
            if int(ids[0]) >= 0 and int(ids[-1]) < self.placement.num_rows:
                ids = ids[self.placement.local_index_on(self.rank, ids) < 0]
        self._stage = torch.empty((0, math.prod(self.row_shape)), dtype=self.dtype, device=self.device)
        buf, slot = self._collective_gather(ids.to(self.device))
        self.stats.misses = 0  # filling the cache is not a gather; its rows stay counted in bytes_moved
        if ids.numel():  # ids are distinct, so buf holds them in some order: put them in cache order
            self._stage = buf.index_select(0, slot)
            self._cache = self._stage.view(ids.numel(), *self.row_shape)
            self._slot = torch.full((self.placement.num_rows,), -1, dtype=torch.int32, device=self.device)
            self._slot[ids.to(self.device)] = torch.arange(ids.numel(), dtype=torch.int32, device=self.device)
        self.cached_ids = ids

    @property
    def cache_bytes(self) -> int:
        """Bytes held by the hot-row cache."""
        return self._cache.numel() * self._cache.element_size()

    def gather(self, ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``ids`` (any order, duplicates, possibly empty) as ``[len(ids), *row_shape]`` on ``self.device``.

        Collective over the group. ``out``, when given, must be a contiguous tensor of that
        shape, dtype and device. Bad ids on any rank raise :class:`InputError` on
        every rank; a bad ``out`` raises ``InputError`` on
        its rank after the collective, so the other ranks do not wait for it.
        """
        ids_t = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(np.asarray(ids))
        n = ids_t.numel() if ids_t.dim() == 1 else 0
        try:
            result, bad_out = self._output(n, out), None
        except InputError as exc:
            result, bad_out = self._empty((n, *self.row_shape)), exc
        try:
            self._gather_into(ids_t, result)
        except InputError as exc:
            if "bad input" in str(exc):
                message = str(exc).replace("sparse_all_gather", f"{type(self).__name__}.gather", 1)
                raise InputError(message) from exc
            raise
        if bad_out is not None:
            raise bad_out
        self.stats.gathers += 1
        self.stats.rows_served += n
        self.stats.bytes_served += n * self.row_bytes
        return result

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        valid = (
            ids.dim() == 1
            and not ids.dtype.is_floating_point
            and ids.dtype != torch.bool
            and (ids.numel() == 0 or (int(ids.min()) >= 0 and int(ids.max()) < self.num_rows))
        )
        if not valid:
            self._collective_gather(ids)  # raises on every rank
        ids = ids.to(self.device, torch.int64)
        flat_out = out.view(ids.numel(), math.prod(self.row_shape))
        if self._slot is None:
            buf, slot = self._collective_gather(ids)
            torch.index_select(buf, 0, slot, out=flat_out)
            return
        # one staging tensor: cached rows first, then the distinct rows fetched now; one final index_select
        slots = self._slot[ids]
        hit = slots >= 0
        miss_pos = (~hit).nonzero().flatten()
        buf, slot = self._collective_gather(ids[miss_pos])
        source = slots.long()
        source[miss_pos] = slot + self._cache.shape[0]
        torch.index_select(self._stage, 0, source, out=flat_out)
        seen = torch.zeros(self._cache.shape[0], dtype=torch.bool, device=self.device)
        seen[source[hit]] = True
        self.stats.hits += int(seen.sum())

    def _staging(self, n: int) -> torch.Tensor:
        """Rows ``[C, C + n)`` of the staging tensor (rows ``[0, C)`` are the cache), grown when too small."""
        cached = self._cache.shape[0]
        if self._stage.shape[0] < cached + n:
            grown = torch.empty((cached + max(n, 2 * (self._stage.shape[0] - cached)), self._stage.shape[1]),
                                dtype=self.dtype, device=self.device)  # fmt: skip
            grown[:cached] = self._stage[:cached]
            self._stage = grown
            self._cache = grown[:cached].view(cached, *self.row_shape)
        return self._stage[cached : cached + n]

    def _collective_gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Distinct rows of ``ids`` (in the staging tensor) and each id's row in them."""
        buf, plan, call = gather_distinct(
            self.local_rows, ids, self.placement, self.group, self.timeout, self.collective_stats, alloc=self._staging
        )
        call.finish()
        self.stats.misses += call.rec.rows_remote
        self.stats.bytes_moved += call.rec.rows_remote * self.row_bytes
        return buf, plan.slot

    def __repr__(self) -> str:
        cache = f", cached_rows={self.cached_ids.numel()}" if self.cached_ids.numel() else ""
        return (f"ShardedFeatures(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}, "
                f"rank={self.rank}{cache})")
