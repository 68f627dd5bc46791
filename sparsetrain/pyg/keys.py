"""The random key of each batch :class:`sparsetrain.pyg.PyGNeighborSampler` draws: a function of (seed, epoch,
position).

A loader's epoch reserves its keys when it starts (:meth:`BatchKeys.start_epoch`): batch ``p`` of the epoch uses
``base + p``, and the next epoch starts at ``base + num_batches``, however many of this epoch's batches were made,
prefetched or never asked for. So an epoch left early shifts nothing, and uninterrupted epochs use keys 0, 1, 2, ...
in order, as calls counted one by one do. Sampling threads (:mod:`sparsetrain.pyg.workers`) make batch ``p`` under
the key :meth:`BatchKeys.at` gives it (:func:`batch_key` pins it in the thread); worker processes count their own
calls, worker ``w`` of ``W`` making batches ``w, w + W, ...``; outside a loader, calls count from where the last
epoch's keys end.
"""

from __future__ import annotations

import contextlib
import threading

import torch

_pinned = threading.local()


@contextlib.contextmanager
def batch_key(key: int | None):
    """Within the block, this thread's sampler calls use batch key ``key`` (None: their own count)."""
    before, _pinned.key = getattr(_pinned, "key", None), key
    try:
        yield
    finally:
        _pinned.key = before


class BatchKeys:
    """The batch keys of one sampler: epochs reserve ranges, calls take the next position of the current one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base = 0  # the current epoch's first key
        self._used = 0  # calls counted in this process since then
        self._end = 0  # the first key after the current epoch's reservation

    def start_epoch(self, num_batches: int | None) -> int:
        """Reserve ``num_batches`` keys for an epoch starting now (None: its length is unknown, so the next epoch starts
        after the last key taken); its first key."""
        with self._lock:
            self._base = max(self._end, self._base + self._used)
            self._used, self._end = 0, self._base + (num_batches or 0)
            return self._base

    def at(self, position: int) -> int:
        """The key of batch ``position`` of the current epoch."""
        with self._lock:
            self._used = max(self._used, position + 1)
            return self._base + position

    def next(self) -> int:
        """The key of this call: the one pinned by :func:`batch_key`, else the next position of the epoch,
        interleaved across DataLoader worker processes."""
        pinned = getattr(_pinned, "key", None)
        if pinned is not None:
            return pinned
        with self._lock:
            position = self._used
            self._used += 1
        info = torch.utils.data.get_worker_info()
        return self._base + (position if info is None else position * info.num_workers + info.id)

    def __getstate__(self) -> dict:
        """Pickled into worker processes without the lock: the epoch's base travels, positions restart."""
        return {"_base": self._base, "_used": 0, "_end": self._end}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
