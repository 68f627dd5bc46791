"""Stage 4, to device: move every tensor of a batch to the training device, ordered against compute.

On CUDA the loader's GPU work runs on a side stream of its own: the producer
enters :meth:`CopyToDevice.stream` around its stages, so sampling kernels, cache
gathers and the host-to-device copies all queue there, never behind the model's
kernels on the compute stream. Each copy reads pinned memory (a batch not yet pinned
is staged through pinned memory first, so the copy is asynchronous), and an event
recorded after it marks the batch complete. :meth:`CopyToDevice.ready`, called by
the consumer, makes its current stream wait on that event and records that stream
on every moved tensor, so the caching allocator does not hand their memory to the
side stream's next batch while compute still reads them. Batch types are walked
generically (dataclasses, lists, tuples, dicts of tensors), so edge-seed and typed
batches move the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class Staged:
    """A batch whose copies were issued; ``event`` (CUDA only) completes with them."""

    batch: object
    event: torch.cuda.Event | None = None


def map_tensors(obj, fn: Callable[[torch.Tensor], torch.Tensor]):
    """``obj`` with ``fn`` applied to every tensor inside it (through dataclass fields, lists, tuples, dicts)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: map_tensors(getattr(obj, f.name),
                                                               fn) for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj


class CopyToDevice:
    """Move batches to ``device``: directly off CUDA, on a side stream with an event on CUDA (see the module
    docstring)."""

    phase = "to_device"  # its profiler range (stages/chain.py)

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self._side: torch.cuda.Stream | None = None

    @property
    def _cuda(self) -> bool:
        return self.device.type == "cuda"

    def _side_stream(self) -> torch.cuda.Stream:
        if self._side is None:
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            self._side = torch.cuda.Stream(self.device)
        return self._side

    def follow_compute(self) -> None:
        """Order the loader's next GPU work after everything queued so far on the caller's current stream.

        Called from the training thread when an epoch starts (setup such as moving
        features to the GPU completes first) and before each batch loaded in line
        (``prefetch=0``: the batch then reads learnable rows after the previous step).
        """
        if self._cuda:
            side = self._side_stream()
            side.wait_stream(torch.cuda.current_stream(self.device))

    def stream(self) -> contextlib.AbstractContextManager:
        """The context the producer's stages run in: the side stream on CUDA, nothing elsewhere."""
        return torch.cuda.stream(self._side_stream()) if self._cuda else contextlib.nullcontext()

    def __call__(self, mb) -> Staged:
        """Issue the batch's copies (inside :meth:`stream` on CUDA)."""
        if not self._cuda:
            x = next(iter((mb.x_by_type or {}).values()), None)
            return Staged(mb if x is None or x.device == self.device else mb.to(self.device))
        side = self._side_stream()
        with torch.cuda.stream(side):
            moved = map_tensors(mb, self._copy)
            event = torch.cuda.Event()
            event.record(side)
        return Staged(moved, event)

    def _copy(self, t: torch.Tensor) -> torch.Tensor:
        if t.device == self.device:
            return t
        # (learnable rows move through autograd's to())
        if t.device.type == "cpu" and not t.is_pinned() and not t.requires_grad:
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    def ready(self, staged: Staged):
        """The batch, safe to use on the caller's current stream (called by the training thread).

        Features stored as float16 (half the bytes to read and copy) are widened to float32 here, on the device.
        """
        if staged.event is None:
            return _widened(staged.batch)
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(staged.event)

        def keep_alive(t: torch.Tensor) -> torch.Tensor:
            if t.device == self.device:
                t.record_stream(compute)
            return t

        return _widened(map_tensors(staged.batch, keep_alive))


def _widened(mb):
    x = getattr(mb, "x", None)
    if isinstance(x, torch.Tensor) and x.dtype == torch.float16:
        mb.x = x.float()
    return mb
