"""The GPU sampler's arrays and their kernel views, kept from batch to batch, and what a batch queues, counted
(:class:`DeviceWorkspace`)."""

from __future__ import annotations

import numpy as np

from sparsetrain._late_reads import LateChecks
from sparsetrain.errors import BackendError
from sparsetrain.sampling.cuda.capture import CapturedBatches
from sparsetrain.sampling.cuda.counts import BatchCounts


class DeviceWorkspace:
    """The array back end ``ops`` as one sampler uses it batch after batch: the arrays a batch allocates are kept, with
    their kernel views, for the next batch, which asks for the same shapes in the same order when its bounds are the
    same (every full batch of a loader). A kernel view costs tens of microseconds of Python (torch's
    ``__cuda_array_interface__``, Numba's device array) and a batch passes ~60 arrays to kernels: made once, not once
    a batch. Outputs are copied out of it (:meth:`output`), and a batch on another stream waits for the last one's
    work (an event, not a host wait) before it reuses the arrays.

    Every operation that queues device work goes through here and is counted in :attr:`counts` (the last batch's in
    :attr:`last_counts`), as PyTorch's CUDA implementation of it would launch it: the counts are the same on the
    simulator's NumPy back end as on a GPU. While a padded batch is captured (:attr:`capture`,
    :mod:`~sparsetrain.sampling.cuda.capture`), each of those operations is also recorded for its replays, and none may
    allocate or read the device.
    """

    MAX_ARRAYS = 512  # distinct (position, shape) entries kept; past this (batches of ever new shapes) it starts over

    def __init__(self, ops) -> None:
        self._ops = ops
        self._arrays = {}  # (position in the batch, kind, shape) -> the array (or the list of views) made there
        self._owned = {}  # id -> [array, its kernel view or None], for every array held in _arrays
        self._views = {}  # id -> (array, view) for other arrays, for one batch
        self._position = 0
        self._done = None
        self.threads = ops.threads
        self.stream = None
        self.counts = self.last_counts = BatchCounts()
        self.late = LateChecks(ops)  # the checks of padded batches in flight
        self._batches = 0
        self.slot = 0  # which of the pinned host buffers this batch writes (a padded batch: one of a ring)
        self.captured = CapturedBatches(ops)  # the padded batches captured once and replayed
        self.capture = None  # the Captured batch being captured, while one is

    def begin(self, padded: bool = False) -> DeviceWorkspace:
        """Start a batch (after the last batch's work, on whatever stream that ran). A ``padded`` batch ends without a
        host read: it writes the next of :attr:`LateChecks.RING` pinned buffers, and raises the failed checks of the
        batches before it that are done; any other batch first waits for those."""
        waits = self.late.settle() if padded else self.late.drain()
        self.slot = self._batches % LateChecks.RING if padded else 0
        self._padded, self._checks_before = padded, len(self.late)
        self.restart()
        self.counts.add(syncs=waits)
        if len(self._arrays) > self.MAX_ARRAYS:
            self._arrays, self._owned = {}, {}
        self._ops.wait_for(self._done)
        self.stream = self._ops.stream()
        return self

    def restart(self) -> None:
        """Lay out and count the batch from its start again (after capturing it)."""
        self._position = 0
        self._views = {}
        self.counts = BatchCounts()

    def held(self) -> list:
        """Every array the workspace holds, with its kernel view (what a captured batch keeps alive)."""
        return list(self._owned.values())

    def end(self) -> None:
        """The batch's work is queued: the next one waits for it before reusing the arrays."""
        self._done = self._ops.record_done()
        if getattr(self, "_padded", False) and len(self.late) == self._checks_before:
            # a padded batch that raised before its checks were queued: its slot's pinned uploads may still be read by
            # the work it did queue, so the slot is held by an entry of its own (no check) until that work has passed
            self.late.add(self._done, None, _no_check)
        self.last_counts = self.counts
        self._batches += 1

    def phase(self, name: str) -> None:
        """Count what follows under ``name`` (``"hop 0"``, ``"finish"``...)."""
        self.counts.phase(name)

    def _kept(self, kind: str, shape, make, allocations: int = 1, pinned: int = 0):
        key = (self._position, kind, shape if isinstance(shape, tuple) else (shape,))
        self._position += 1
        made = self._arrays.get(key)
        if made is None:
            if self.capture is not None and allocations + pinned:
                raise BackendError(f"the captured batch allocates a {kind} array of shape {key[2]}; capture "
                                   "after an eager batch of the same shapes")
            made = self._arrays[key] = make()
            self.counts.add(allocations=allocations, pinned_allocations=pinned)
            for a in made if isinstance(made, list) else [made]:
                self._owned[id(a)] = [a, None]
        return made

    # ---- arrays (no device work) ----
    def empty(self, shape):
        return self._kept("empty", shape, lambda: self._ops.empty(shape))

    def split(self, a, sizes: list[int]) -> list:
        """``a`` cut into consecutive views of ``sizes``."""
        return self._kept("split", (id(a), *sizes), lambda: self._ops.split(a, sizes), allocations=0)

    def rows(self, a) -> list:
        """The rows of a 2-d array as views (kept with ``a``: a caller's array keyed by its id stays that array)."""
        return self._kept("rows", id(a), lambda: [a, *a], allocations=0)[1:]

    def keep(self, a):
        """``a``, a caller's array used batch after batch (a padded batch's nodes), kept with its kernel view."""
        return self._kept("keep", id(a), lambda: a, allocations=0)

    def as_uint64(self, a):
        return self._kept("uint64", id(a), lambda: self._ops.as_uint64(a), allocations=0)

    def kernel(self, a):
        owned = self._owned.get(id(a))
        if owned is not None:
            if owned[1] is None:
                owned[1] = self._ops.kernel(a)
            return owned[1]
        hit = self._views.get(id(a))
        if hit is None:
            hit = self._views[id(a)] = (a, self._ops.kernel(a))  # (a kept alive: its id stays its own)
        return hit[1]

    # ---- device work, counted (and recorded while a batch is captured) ----
    def _queue(self, work) -> None:
        work()
        if self.capture is not None:
            self.capture.record(work)

    def launch(self, kernel, n: int, *args) -> None:
        """``kernel`` over ``n`` threads (at least one block) on the batch's stream."""
        blocks, stream = max(1, (n + self.threads - 1) // self.threads), self.stream
        self._queue(lambda: kernel[blocks, self.threads, stream](*args))
        self.counts.add(kernels=1)

    def launch_grid(self, kernel, grid: tuple, block: tuple, *args) -> None:
        """``kernel`` over a grid of ``block``-shaped thread blocks (the 2-d form of :meth:`launch`)."""
        stream = self.stream
        self._queue(lambda: kernel[grid, block, stream](*args))
        self.counts.add(kernels=1)

    def upload(self, values: np.ndarray, keys_at=()):
        """A kept device array holding an int64 host array's values, copied from a kept pinned buffer without a host
        wait. The host rewrites a buffer only after the copy from it is done: an eager batch ends with its host read,
        queued after its copies; a padded batch writes the next of a ring of buffers, free once the batch that last
        wrote it has passed its event (:meth:`begin`). ``keys_at``: ``(offset, hop)`` of each hop's keys in
        ``values``, the part a captured batch's replay rewrites."""
        n = len(values)
        out, host = self._kept("upload", (n, self.slot), lambda: [self._ops.empty(n), self._ops.pinned(n)], pinned=1)
        self._ops.write(host, values)
        if self.capture is not None:
            self.capture.uploaded(host, values, keys_at)
        self._queue(lambda: self._ops.copy_in(out, host))
        self.counts.add(torch_ops=1, copies=1)
        return out

    def assign(self, out, a) -> None:
        """``out[...] = a`` (device to device)."""
        self._queue(lambda: _set(out, a))
        self.counts.add(torch_ops=1, copies=1)

    def cumsum(self, a, axis: int = 0):
        shape = tuple(a.shape)
        out = self._kept("cumsum", shape, lambda: self._ops.empty(shape))
        self._queue(lambda: self._ops.cumsum(a, axis, out=out))
        self.counts.add(torch_ops=1)
        return out

    def take(self, out, a, index) -> None:
        """``out[i] = a[index[i]]`` (one gather on the device)."""
        self._queue(lambda: self._ops.take(a, index, out))
        self.counts.add(torch_ops=1)

    def fill(self, a, value: int) -> None:
        self._queue(lambda: _set(a, value))
        self.counts.add(torch_ops=1)

    def read_late(self, a, check) -> None:
        """``a``'s values to a pinned buffer of this batch's slot, without a wait; ``check(values)`` runs once they
        are on the host (:class:`LateChecks`; a captured batch's, after each replay)."""
        n = len(a)
        host = self._kept("late", (n, self.slot), lambda: self._ops.pinned(n), allocations=0, pinned=1)
        self._queue(lambda: self._ops.to_host(host, a))
        self.counts.add(torch_ops=1, copies=1)
        if self.capture is not None:
            self.capture.late_check(host, check)
        else:
            self.late.add(self._ops.record_done(), host, check)

    def output(self, a):
        """A fresh copy of ``a`` (a batch's results leave the workspace; an empty one costs nothing on the device)."""
        if np.prod(a.shape) > 0:
            self.counts.add(torch_ops=1, copies=1, allocations=1)
        return self._ops.clone(a)

    def read(self, a) -> list[int]:
        """``a``'s values on the host: a device-to-host copy and a host wait."""
        if self.capture is not None:
            raise BackendError("the captured batch reads the device; only padded batches are captured")
        self.counts.add(torch_ops=1, copies=1, syncs=1)
        return self._ops.read(a)


def _no_check(values) -> None:
    """The check of a batch that raised before queuing its own (it raised already)."""


def _set(a, value) -> None:
    """``a[...] = value`` (a copy or a fill on the device)."""
    a[...] = value
