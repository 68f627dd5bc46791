"""`VictimBuffer`: a FIFO ring of rows recently evicted from a cache, in (pinned) host memory.

A row that misses the cache shortly after being evicted is served from here instead of the
slow tier behind the cache (disk, remote memory).
"""

from __future__ import annotations

import numpy as np
import torch

from sparsetrain.storage.host_memory import pinned_empty


class VictimBuffer:
    """Holds up to ``capacity_rows`` evicted rows; the oldest entry is overwritten first."""

    def __init__(self, num_rows: int, capacity_rows: int, row_shape, dtype: torch.dtype) -> None:
        self.capacity_rows = int(capacity_rows)
        self.rows = pinned_empty((self.capacity_rows, *row_shape), dtype)
        self.slot_of = np.full(num_rows, -1, dtype=np.int64)
        self.id_of = np.full(self.capacity_rows, -1, dtype=np.int64)
        self._hand = 0

    @property
    def nbytes(self) -> int:
        return self.rows.numel() * self.rows.element_size()

    def put(self, ids: np.ndarray, rows: torch.Tensor) -> None:
        """Keep evicted rows ``ids`` (distinct) with their data ``rows`` (any device)."""
        if ids.size > self.capacity_rows:
            ids, rows = ids[-self.capacity_rows :], rows[-self.capacity_rows :]
        if ids.size == 0:
            return
        self.discard(ids)
        positions = (self._hand + np.arange(ids.size)) % self.capacity_rows
        self._hand = int(positions[-1] + 1) % self.capacity_rows
        old = self.id_of[positions]
        old = old[old >= 0]
        self.slot_of[old] = -1
        self.id_of[positions] = ids
        self.slot_of[ids] = positions
        self.rows.index_copy_(0, torch.from_numpy(positions), rows.to("cpu"))

    def take(self, ids: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
        """``(found mask, rows of the found ids)`` for distinct ``ids``."""
        positions = self.slot_of[ids]
        found = positions >= 0
        return found, self.rows.index_select(0, torch.from_numpy(positions[found]))

    def discard(self, ids: np.ndarray) -> None:
        """Forget ``ids`` (they went back into the cache)."""
        positions = self.slot_of[ids]
        held = positions >= 0
        self.id_of[positions[held]] = -1
        self.slot_of[ids[held]] = -1
