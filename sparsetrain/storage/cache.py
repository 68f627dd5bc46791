"""`CachedFeatures`: a software cache of rows, on the GPU or in host memory, in front of a slower tier."""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from sparsetrain.errors import SettingError
from sparsetrain.storage.base import FeatureSource, byte_rows, check_ids, widen
from sparsetrain.storage.gather_kernels import assemble_direct, assemble_rows, copy_rows, new_marks, unique_inverse
from sparsetrain.storage.policies import POLICIES, make_policy
from sparsetrain.storage.victim import VictimBuffer

PRELOAD_CHUNK_BYTES = 64 << 20
MAX_PENDING_UPDATES = 2  # device bookkeeping: gathers the policy may lag behind before a gather waits for it


def as_feature_source(source) -> FeatureSource:
    """A FeatureSource for a store, a tensor/array (TensorFeatures) or a .npy path (MmapFeatures)."""
    if isinstance(source, FeatureSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        from sparsetrain.storage.mmap import MmapFeatures

        return MmapFeatures(source)
    from sparsetrain.storage.tensor import TensorFeatures

    return TensorFeatures(source)


class CachedFeatures(FeatureSource):
    """A cache of ``capacity_bytes`` of rows of ``backing`` on ``device``; ``gather`` serves hits from it.

    ``policy``: ``"static"``, ``"lru"``, ``"clock"``, ``"sieve"`` or ``"hybrid"`` (see
    :mod:`sparsetrain.storage.policies`);
    ``hotness`` (one value per row: out-degree, ``graph.out_degrees()``, or pre-sampling access counts) ranks rows for
    the hot set; without it a ``static`` cache keeps the first rows it gathers. ``victim_bytes`` of host memory keep
    recently evicted rows. Row storage never exceeds ``capacity_bytes`` (a budget smaller than one row raises
    :class:`SettingError`); per-row bookkeeping lives in host memory outside that budget: a slot index per row
    (int32, 4 B), plus two float32 scores for ``hybrid`` (12 B in all; 1.24 GiB for papers100M's 111M rows).
    ``prefetch(ids)`` loads misses in a background thread; gathers and prefetches exchange rows
    under a lock, so a gather never sees a half-written row.

    ``bookkeeping``: ``"host"`` asks the policy for every gather's slots (ids copied to the host first);
    ``"device"`` keeps a slot per row in a tensor on the cache's device and looks ids up there with torch
    ops, so a gather copies only its missed ids to the host; the policy (which rows to keep) learns of the
    gather's accesses and admits its misses afterwards, on a background thread, at most
    ``MAX_PENDING_UPDATES`` gathers behind (:meth:`synchronize` waits for it). ``"auto"`` (default):
    ``"device"`` on CUDA without a victim buffer, else ``"host"``.
    """

    def __init__(
        self,
        backing,
        capacity_bytes: int,
        policy: str = "hybrid",
        device: str | torch.device | None = None,
        *,
        hotness=None,
        victim_bytes: int = 0,
        bookkeeping: str = "auto",
        **policy_options,
    ) -> None:
        self.backing = as_feature_source(backing)
        super().__init__(self.backing.shape, self.backing.dtype, device if device is not None else self.backing.device)
        if policy not in POLICIES:
            raise SettingError(f"unknown cache policy {policy!r}; choose one of {', '.join(POLICIES)}")
        row_bytes = self.row_bytes
        if row_bytes == 0 or capacity_bytes < row_bytes:
            raise SettingError(
                f"CachedFeatures: capacity_bytes={capacity_bytes} cannot hold one row of {row_bytes} bytes "
                f"({list(self.row_shape)} x {self.dtype}); give at least {max(row_bytes, 1)} bytes"
            )
        self.capacity_bytes = int(capacity_bytes)
        num_slots = min(self.capacity_bytes // row_bytes, self.num_rows)
        self.policy = make_policy(policy, self.num_rows, num_slots, hotness, **policy_options)
        self.slots = torch.empty((self.policy.num_slots, *self.row_shape), dtype=self.dtype, device=self.device)
        victim_rows = int(victim_bytes) // row_bytes
        self.victim = VictimBuffer(self.num_rows, victim_rows, self.row_shape, self.dtype) if victim_rows else None
        self._lock = threading.Lock()
        self._mark = new_marks(self.num_rows)  # scratch for unique_inverse, used under the lock
        self._executor: ThreadPoolExecutor | None = None
        self._read_events: list = []
        self._write_event = None
        if bookkeeping not in ("auto", "host", "device"):
            raise SettingError("CachedFeatures: bookkeeping must be 'auto', 'host' or 'device', got "
                               f"{bookkeeping!r}")
        if bookkeeping == "device" and self.victim is not None:
            raise SettingError("CachedFeatures: bookkeeping='device' has no victim buffer; pass victim_bytes=0 or "
                               "bookkeeping='host'")
        if bookkeeping == "auto":
            bookkeeping = "device" if self.device.type == "cuda" and self.victim is None else "host"
        self.bookkeeping = bookkeeping
        self._slot_of = None  # device bookkeeping: the policy's slot per row, mirrored on the device
        self._pending: deque[Future] = deque()
        self._preload()
        if bookkeeping == "device":
            self._slot_of = torch.from_numpy(self.policy.slot_of).to(self.device, torch.int32)

    @property
    def memory_bytes(self) -> int:
        """Bytes of row storage held: cache slots plus victim buffer."""
        slots = self.slots.numel() * self.slots.element_size()
        return slots + (self.victim.nbytes if self.victim is not None else 0)

    def _preload(self) -> None:
        ids, slots = self.policy.preload()
        order = np.argsort(ids)  # in file order, a chunk's rows are dense enough to be read in long runs (disk)
        ids, slots = ids[order], slots[order]
        step = max(1, PRELOAD_CHUNK_BYTES // self.row_bytes)
        for lo in range(0, ids.size, step):
            rows = self.backing.gather(torch.from_numpy(ids[lo : lo + step]))
            self.slots.index_copy_(0, self._device_index(slots[lo : lo + step]), rows.to(self.device))
            self.stats.bytes_moved += rows.shape[0] * self.row_bytes

    # -------------------------------------------------- CUDA stream ordering between readers and writers

    def _after_read(self) -> None:
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.device))
            self._read_events.append(event)

    def _before_read(self) -> None:
        if self._write_event is not None:
            torch.cuda.current_stream(self.device).wait_event(self._write_event)

    def _before_write(self) -> None:
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device)
            for event in self._read_events:
                stream.wait_event(event)
            self._read_events.clear()

    def _after_write(self) -> None:
        if self.device.type == "cuda":
            self._write_event = torch.cuda.Event()
            self._write_event.record(torch.cuda.current_stream(self.device))

    # -------------------------------------------------- gather

    def _device_index(self, index: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(index).to(self.device, non_blocking=True)

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        if self.bookkeeping == "device":
            self._gather_device(ids, out)
            return
        if self.device.type == "cpu":
            with self._lock:
                self._gather_cpu(ids, out)
            return
        with self._lock:
            wanted, inverse = unique_inverse(ids.cpu().numpy(), self._mark)
            rows = torch.empty((wanted.size, *self.row_shape), dtype=self.dtype, device=self.device)
            self._before_read()
            slots = self.policy.lookup(wanted)
            hit = slots >= 0
            hit_at = np.flatnonzero(hit)
            if hit_at.size:
                held = self.slots.index_select(0, self._device_index(slots[hit_at]))
                rows.index_copy_(0, self._device_index(hit_at), held)
            self._after_read()
            missed_at = np.flatnonzero(~hit)
            fetch_at = self._take_victims(wanted, missed_at, rows)
        if fetch_at.size:
            fetched = self.backing.gather(torch.from_numpy(wanted[fetch_at]))
            rows.index_copy_(0, self._device_index(fetch_at), fetched.to(self.device, non_blocking=True))
            self.stats.bytes_moved += fetch_at.size * self.row_bytes
        if missed_at.size:
            with self._lock:
                self._admit(wanted[missed_at], rows, missed_at, force=False)
        torch.index_select(rows, 0, self._device_index(inverse), out=out)
        self.stats.hits += int(hit_at.size)
        self.stats.misses += int(missed_at.size)

    def _gather_cpu(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """CPU cache: one fused pass writes hits and misses into ``out``; the caller holds the lock."""
        wanted, inverse = unique_inverse(ids.numpy(), self._mark)
        slots = self.policy.lookup(wanted)
        missed_at = np.flatnonzero(slots < 0)
        missed_ids = wanted[missed_at]
        table = self.backing._direct_rows(missed_ids) if self.victim is None and missed_ids.size else None
        if table is not None:
            self._gather_cpu_direct(table, wanted, slots, missed_ids, inverse, out)
            return
        if self.victim is None:
            missed_rows = self.backing.gather(torch.from_numpy(missed_ids)).cpu()
            fetched = missed_ids.size
        else:
            missed_rows = torch.empty((missed_ids.size, *self.row_shape), dtype=self.dtype)
            local = np.arange(missed_ids.size)
            fetch = self._take_victims(missed_ids, local, missed_rows)
            fetched = fetch.size
            if fetch.size:
                missed_rows.index_copy_(0, torch.from_numpy(fetch),
                                        self.backing.gather(torch.from_numpy(missed_ids[fetch])).cpu())
        self.stats.bytes_moved += fetched * self.row_bytes
        missed_at_of_unique = np.full(wanted.size, -1, np.int64)
        missed_at_of_unique[missed_at] = np.arange(missed_at.size)
        slot_words, missed_words, out_words = widen(byte_rows(self.slots), byte_rows(missed_rows), byte_rows(out))
        assemble_rows(slot_words, slots, missed_words, missed_at_of_unique, inverse, out_words)
        if missed_ids.size:
            admitted, admitted_slots, evicted, evicted_slots = self.policy.admit(missed_ids, False)
            if evicted.size:
                if self.victim is not None:
                    self.victim.put(evicted, self.slots.index_select(0, torch.from_numpy(evicted_slots)))
                self.stats.evictions += int(evicted.size)
            if admitted.size:
                copy_rows(missed_words, np.searchsorted(missed_ids, admitted), slot_words, admitted_slots)
                if self.victim is not None:
                    self.victim.discard(admitted)
        self.stats.hits += int(wanted.size - missed_at.size)
        self.stats.misses += int(missed_at.size)

    def _gather_cpu_direct(self, table: np.ndarray, wanted: np.ndarray, slots: np.ndarray, missed_ids: np.ndarray,
                           inverse: np.ndarray, out: torch.Tensor) -> None:
        """Backing rows addressable in place: hits and misses go to ``out`` in one pass, no staging copy."""
        slot_words, table_words, out_words = widen(byte_rows(self.slots), table, byte_rows(out))
        assemble_direct(slot_words, slots, table_words, wanted, inverse, out_words)
        backing = self.backing.stats
        backing.gathers += 1
        backing.rows_served += missed_ids.size
        backing.bytes_served += missed_ids.size * self.row_bytes
        backing.bytes_moved += missed_ids.size * self.row_bytes
        self.stats.bytes_moved += missed_ids.size * self.row_bytes
        if missed_ids.size:
            admitted, admitted_slots, evicted, _ = self.policy.admit(missed_ids, False)
            self.stats.evictions += int(evicted.size)
            if admitted.size:
                first = np.empty(wanted.size, np.int64)
                first[inverse[::-1]] = np.arange(inverse.size - 1, -1, -1)
                copy_rows(out_words, first[np.searchsorted(wanted, admitted)], slot_words, admitted_slots)
        self.stats.hits += int(wanted.size - missed_ids.size)
        self.stats.misses += int(missed_ids.size)

    def _gather_device(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """Slots looked up on the device; only the missed ids go to the host (to read the backing store)."""
        wanted, inverse = torch.unique(ids.to(self.device, non_blocking=True).long(), return_inverse=True)
        with self._lock:
            self._before_read()
            slots = self._slot_of.index_select(0, wanted).long()
            hit = slots >= 0
            rows = self.slots.index_select(0, slots.clamp(min=0))  # a miss reads slot 0 here and is overwritten below
            self._after_read()
        missed_at = (~hit).nonzero().view(-1)
        missed = wanted.index_select(0, missed_at)
        if self.backing.device != self.device:  # the one device-to-host copy of a gather (pinned host features read
            missed = missed.cpu()  # zero-copy take the ids where they are)
        fetched = None
        if missed.numel():
            fetched = self.backing.gather(missed).to(self.device, non_blocking=True)
            rows.index_copy_(0, missed_at, fetched)
            self.stats.bytes_moved += missed.numel() * self.row_bytes
        torch.index_select(rows, 0, inverse, out=out)
        self.stats.hits += wanted.numel() - missed.numel()
        self.stats.misses += missed.numel()
        ready = None
        if self.device.type == "cuda":
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device))
        while len(self._pending) >= MAX_PENDING_UPDATES:
            self._pending.popleft().result()
        self._pending.append(self._worker().submit(self._update_policy, wanted, missed, fetched, ready))

    def _update_policy(self, wanted: torch.Tensor, missed: torch.Tensor, fetched: torch.Tensor | None, ready) -> None:
        """Off the critical path: tell the policy about a gather's accesses, then admit its misses (device
        bookkeeping)."""
        if ready is not None:
            ready.synchronize()
        missed = missed.cpu().numpy()
        self.policy.lookup(wanted.cpu().numpy())
        if missed.size:
            with self._lock:
                self._admit(missed, fetched, np.arange(missed.size), force=False)

    def synchronize(self) -> None:
        """Wait until the policy has seen every gather so far (device bookkeeping; a no-op otherwise)."""
        while self._pending:
            self._pending.popleft().result()

    def _worker(self) -> ThreadPoolExecutor:
        """The one background thread for prefetches and policy updates (so the policy is used by one thread at a
        time)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparsetrain-cache")
        return self._executor

    def _take_victims(self, wanted: np.ndarray, missed_at: np.ndarray, rows: torch.Tensor) -> np.ndarray:
        """Copy misses held by the victim buffer into ``rows``; returns the positions still to fetch."""
        if self.victim is None or missed_at.size == 0:
            return missed_at
        found, found_rows = self.victim.take(wanted[missed_at])
        if found.any():
            rows.index_copy_(0, self._device_index(missed_at[found]), found_rows.to(self.device, non_blocking=True))
            self.stats.victim_hits += int(found.sum())
        return missed_at[~found]

    def _admit(self, ids: np.ndarray, rows: torch.Tensor, row_at: np.ndarray, force: bool) -> int:
        """Insert ``ids`` (sorted, distinct; data ``rows[row_at]``) as the policy decides. Caller holds the lock."""
        admitted, slots, evicted, evicted_slots = self.policy.admit(ids, force)
        if admitted.size == 0:
            return 0
        self._before_write()
        if evicted.size:
            if self.victim is not None:
                self.victim.put(evicted, self.slots.index_select(0, self._device_index(evicted_slots)))
            if self._slot_of is not None:
                self._slot_of.index_fill_(0, self._device_index(evicted), -1)
            self.stats.evictions += int(evicted.size)
        source = row_at[np.searchsorted(ids, admitted)]
        self.slots.index_copy_(0, self._device_index(slots), rows.index_select(0, self._device_index(source)))
        if self._slot_of is not None:
            self._slot_of.index_copy_(0, self._device_index(admitted), self._device_index(slots.astype(np.int32)))
        if self.victim is not None:
            self.victim.discard(admitted)
        self._after_write()
        return int(admitted.size)

    # -------------------------------------------------- prefetch

    def prefetch(self, ids: torch.Tensor) -> Future:
        """Start loading the rows of ``ids`` that are not cached, in a background thread.

        Returns a Future with the number of rows inserted. A full ``static`` cache
        inserts nothing. Gathers may run meanwhile; they see each row either before or after it is written.
        """
        ids = check_ids(ids, self.num_rows, "CachedFeatures.prefetch")
        return self._worker().submit(self._prefetch, ids.cpu().long())

    def _prefetch(self, ids: torch.Tensor) -> int:
        if self.device.type == "cuda":
            if not hasattr(self, "_side_stream"):
                self._side_stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(self._side_stream):
                inserted = self._prefetch_rows(ids)
            self._side_stream.synchronize()
            return inserted
        return self._prefetch_rows(ids)

    def _prefetch_rows(self, ids: torch.Tensor) -> int:
        if self.policy.dynamic_slots == 0:
            return 0
        with self._lock:
            wanted, _ = unique_inverse(ids.numpy(), self._mark)
            # no more than the dynamic part can keep: a batch larger than the cache would otherwise be read twice
            missing = wanted[self.policy.contains(wanted) < 0][: self.policy.dynamic_slots]
            if missing.size == 0:
                return 0
            rows = torch.empty((missing.size, *self.row_shape), dtype=self.dtype, device=self.device)
            local = np.arange(missing.size)
            fetch_at = self._take_victims(missing, local, rows)
        if fetch_at.size:
            fetched = self.backing.gather(torch.from_numpy(missing[fetch_at])).to(self.device, non_blocking=True)
            rows.index_copy_(0, self._device_index(fetch_at), fetched)
            self.stats.bytes_moved += fetch_at.size * self.row_bytes
        with self._lock:
            still = local[self.policy.contains(missing) < 0]
            inserted = self._admit(missing[still], rows, still, force=True)
        self.stats.prefetched_rows += inserted
        return inserted

    def close(self) -> None:
        """Stop the background thread (waits for a running prefetch or policy update)."""
        self.synchronize()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def __repr__(self) -> str:
        return (
            f"CachedFeatures({self.backing!r}, capacity_bytes={self.capacity_bytes}, policy={self.policy.name!r}, "
            f"slots={self.policy.num_slots}, device={self.device})"
        )
