"""A feature table partitioned over ranks, read with :func:`sparse_all_gather`.

Follows the ``sparsetrain.storage`` feature-store contract (``gather(ids, *, out=None)``,
``shape``, ``dtype``, ``device``, ``stats``). Unlike a local store, every ``gather`` is a
collective: all ranks of the group call it the same number of times (an empty ``ids``
is fine), exactly like a training step under DDP.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from sparsetrain.collective import _exchange as ex
from sparsetrain.collective.errors import CollectiveInputError
from sparsetrain.collective.placement import RowPlacement
from sparsetrain.collective.sparse_ops import sparse_all_gather
from sparsetrain.collective.stats import CollectiveStats


@dataclass
class ShardedGatherStats:
    """Counters of one :class:`ShardedFeatures` (same names as the storage stores' stats).

    ``hits`` / ``misses`` count distinct remote rows per gather served from the local hot-row
    cache / fetched over the network; ``bytes_moved`` is the bytes of the rows this rank fetched
    from other ranks (``collective_stats`` of the store has the full network accounting).
    """

    gathers: int = 0
    rows_served: int = 0
    bytes_served: int = 0
    bytes_moved: int = 0
    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits over distinct remote rows looked up (0.0 before any lookup)."""
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0

    def reset(self) -> None:
        """Zero every counter."""
        for name in asdict(self):
            setattr(self, name, 0)

    def as_dict(self) -> dict:
        return {**asdict(self), "hit_rate": self.hit_rate}


class ShardedFeatures:
    """Rows ``placement.local_ids(rank)`` of a feature table on each rank; ``gather`` reads any rows.

    ``cache_ids`` (optional, per rank) names remote rows this rank reads often; they are
    fetched once at construction and then served locally (a static hot-row cache).
    Construction is collective: every rank of ``group`` builds its store at the same time.
    """

    def __init__(
        self,
        local_rows: torch.Tensor,
        placement: RowPlacement,
        *,
        group=None,
        cache_ids: torch.Tensor | None = None,
        timeout: ex.Timeout = None,
    ) -> None:
        info = ex.group_info(group)
        self.local_rows = local_rows
        self.placement = placement
        self.group = group
        self.timeout = timeout
        self.rank = info.rank
        self.shape = torch.Size((placement.num_rows, *local_rows.shape[1:]))
        self.dtype = local_rows.dtype
        self.device = local_rows.device
        self.stats = ShardedGatherStats()
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
        timeout: ex.Timeout = None,
    ) -> ShardedFeatures:
        """Keep this rank's share of a full table every rank can read (a tensor or a memory-mapped array).

        ``partition``: None splits rows into contiguous id ranges; an owner-rank array
        partitions by it; a :class:`RowPlacement` is used as is. Only this rank's rows are copied.
        """
        info = ex.group_info(group)
        if partition is None:
            placement = RowPlacement.contiguous(len(table), info.world_size)
        elif isinstance(partition, RowPlacement):
            placement = partition
        else:
            placement = RowPlacement.from_owner(partition, info.world_size)
        if placement.num_rows != len(table):
            raise CollectiveInputError(
                f"ShardedFeatures.from_table: the partition covers {placement.num_rows} rows but the table has {len(table)}; "
                "pass one owner rank per table row"
            )
        local = placement.shard(table, info.rank)
        if device is not None:
            local = local.to(device)
        return cls(local, placement, group=group, cache_ids=cache_ids, timeout=timeout)

    def _fill_cache(self, cache_ids: torch.Tensor | None) -> None:
        ids = torch.zeros(0, dtype=torch.int64) if cache_ids is None else torch.as_tensor(cache_ids).to(torch.int64).cpu()
        if ids.numel():
            ids = torch.unique(ids)
            # rows held here need no cache; out-of-range ids go on to the collective, which reports them on every rank
            if int(ids[0]) >= 0 and int(ids[-1]) < self.placement.num_rows:
                ids = ids[self.placement.local_index_on(self.rank, ids) < 0]
        rows = sparse_all_gather(
            self.local_rows, ids.to(self.device), placement=self.placement, group=self.group,
            timeout=self.timeout, stats=self.collective_stats,
        )  # fmt: skip
        if ids.numel():
            self._cache = rows
            self._slot = torch.full((self.placement.num_rows,), -1, dtype=torch.int32, device=self.device)
            self._slot[ids.to(self.device)] = torch.arange(ids.numel(), dtype=torch.int32, device=self.device)
        self.cached_ids = ids

    @property
    def num_rows(self) -> int:
        return self.shape[0]

    @property
    def row_shape(self) -> torch.Size:
        return self.shape[1:]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return math.prod(self.row_shape) * self.local_rows.element_size()

    @property
    def cache_bytes(self) -> int:
        """Bytes held by the hot-row cache."""
        return self._cache.numel() * self._cache.element_size()

    def __len__(self) -> int:
        return self.num_rows

    def gather(self, ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``ids`` (any order, duplicates, possibly empty) as ``[len(ids), *row_shape]`` on ``self.device``.

        Collective over the group. ``out``, when given, must be a contiguous tensor of that
        shape, dtype and device. An id out of range on any rank raises on every rank.
        """
        ids_t = torch.as_tensor(ids)
        in_range = (
            ids_t.dim() == 1
            and not ids_t.dtype.is_floating_point
            and ids_t.dtype != torch.bool
            and (ids_t.numel() == 0 or (int(ids_t.min()) >= 0 and int(ids_t.max()) < self.num_rows))
        )
        if not in_range or self._slot is None:
            rows = self._remote(ids_t)  # bad ids go to the collective, which raises on every rank
            hit = None
        else:
            ids_t = ids_t.to(self.device, torch.int64)
            slots = self._slot[ids_t]
            hit = slots >= 0
            hit_pos, miss_pos = hit.nonzero().flatten(), (~hit).nonzero().flatten()
            rows = self._remote(ids_t[miss_pos])
        n = ids_t.numel()
        result = self._output(n, out)
        if hit is None:
            result.copy_(rows)
        else:
            result.index_copy_(0, hit_pos, self._cache.index_select(0, slots[hit_pos].long()))
            result.index_copy_(0, miss_pos, rows)
            self.stats.hits += int(torch.unique(ids_t[hit_pos]).numel())
        self.stats.gathers += 1
        self.stats.rows_served += n
        self.stats.bytes_served += n * self.row_bytes
        return result

    def __getitem__(self, ids) -> torch.Tensor:
        """``store[ids]`` is ``store.gather(ids)``."""
        return self.gather(ids)

    def _remote(self, ids: torch.Tensor) -> torch.Tensor:
        rows = sparse_all_gather(
            self.local_rows, ids, placement=self.placement, group=self.group, timeout=self.timeout, stats=self.collective_stats
        )
        rec = self.collective_stats.records[-1]
        self.stats.misses += rec.rows_remote
        self.stats.bytes_moved += rec.rows_remote * self.row_bytes
        return rows

    def _output(self, n: int, out: torch.Tensor | None) -> torch.Tensor:
        shape = (n, *self.row_shape)
        if out is None:
            return torch.empty(shape, dtype=self.dtype, device=self.device)
        if tuple(out.shape) != shape or out.dtype != self.dtype or out.device != self.device or not out.is_contiguous():
            raise CollectiveInputError(
                f"ShardedFeatures.gather(out=): expected a contiguous {self.dtype} tensor of shape {list(shape)} on "
                f"{self.device}, got {out.dtype} {list(out.shape)} on {out.device}; allocate it with "
                "torch.empty(shape, dtype=store.dtype, device=store.device)"
            )
        return out

    def __repr__(self) -> str:
        cache = f", cached_rows={self.cached_ids.numel()}" if self.cached_ids.numel() else ""
        return f"ShardedFeatures(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}, rank={self.rank}{cache})"
