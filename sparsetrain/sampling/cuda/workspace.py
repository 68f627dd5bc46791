"""The GPU sampler's arrays and their kernel views, kept from batch to batch (:class:`Workspace`)."""

from __future__ import annotations

import numpy as np


class Workspace:
    """The array back end ``ops`` as one sampler uses it batch after batch: the arrays a batch allocates are kept, with
    their kernel views, for the next batch, which asks for the same shapes in the same order when its bounds are the
    same (every full batch of a loader). A kernel view costs tens of microseconds of Python (torch's
    ``__cuda_array_interface__``, Numba's device array) and a batch passes ~60 arrays to kernels: made once, not once
    a batch. Outputs are copied out of it (the driver's ``_finish``), and a batch on another stream waits for the last
    one's work (an event, not a host wait) before it reuses the arrays.
    """

    MAX_ARRAYS = 512  # distinct (position, shape) entries kept; past this (batches of ever new shapes) it starts over

    def __init__(self, ops) -> None:
        self._ops = ops
        self._arrays = {}  # (position in the batch, kind, shape) -> the array (or the list of views) made there
        self._owned = {}  # id -> [array, its kernel view or None], for every array held in _arrays
        self._views = {}  # id -> (array, view) for other arrays, for one batch
        self._position = 0
        self._done = None

    def __getattr__(self, name):
        return getattr(self._ops, name)

    def begin(self) -> Workspace:
        """Start a batch (after the last batch's work, on whatever stream that ran)."""
        self._position = 0
        self._views = {}
        if len(self._arrays) > self.MAX_ARRAYS:
            self._arrays, self._owned = {}, {}
        self._ops.wait_for(self._done)
        return self

    def end(self) -> None:
        """The batch's work is queued: the next one waits for it before reusing the arrays."""
        self._done = self._ops.record_done()

    def _kept(self, kind: str, shape, make):
        key = (self._position, kind, shape if isinstance(shape, tuple) else (shape,))
        self._position += 1
        made = self._arrays.get(key)
        if made is None:
            made = self._arrays[key] = make()
            for a in made if isinstance(made, list) else [made]:
                self._owned[id(a)] = [a, None]
        return made

    def empty(self, shape):
        return self._kept("empty", shape, lambda: self._ops.empty(shape))

    def full(self, shape, value: int):
        a = self._kept("full", shape, lambda: self._ops.empty(shape))
        a[...] = value
        return a

    def upload(self, values: np.ndarray):
        return self._ops.upload_into(self._kept("upload", len(values), lambda: self._ops.empty(len(values))), values)

    def copy(self, a):
        out = self._kept("copy", tuple(a.shape), lambda: self._ops.empty(tuple(a.shape)))
        out[...] = a
        return out

    def cumsum(self, a, axis: int = 0):
        shape = tuple(a.shape)
        return self._ops.cumsum(a, axis, out=self._kept("cumsum", shape, lambda: self._ops.empty(shape)))

    def split(self, a, sizes: list[int]) -> list:
        return self._kept("split", (id(a), *sizes), lambda: self._ops.split(a, sizes))

    def as_uint64(self, a):
        return self._kept("uint64", id(a), lambda: self._ops.as_uint64(a))

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
