"""Each step's loss read when it has arrived, with no host wait a step (:class:`LossRing`).

A step queues its loss (and the count of its class targets out of range) into the next of ``RING`` pinned host
buffers, with an event after the copy; the trainer reads it once the event has passed: at a later step, or at
:meth:`LossRing.drain`, which the trainer calls before anything needs the values (a checkpoint, the epoch's end,
evaluation, ``max_steps``). On the CPU the copy is done when it returns and no event is needed: each step is read at
once. The ring is the padded sampler's :class:`~sparsetrain._late_reads.LateChecks`: the host waits only
when it runs ``RING`` steps ahead of the device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sparsetrain._late_reads import LateChecks


class TorchEvents:
    """Events after a step's copy: CUDA events on the copy's stream; ``None`` (done) for a copy off CUDA."""

    @staticmethod
    def record(values: torch.Tensor):
        if not values.is_cuda:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(values.device))
        return event

    @staticmethod
    def done(event) -> bool:
        return event is None or event.query()

    @staticmethod
    def wait(event) -> None:
        event.synchronize()


class LossRing:
    """The values of steps in flight, each handed to its ``read`` callback once it has reached host memory, oldest
    first. ``step_waits``: host waits made at a step (0 unless the host ran ``RING`` steps ahead); ``drain_waits``:
    those made by :meth:`drain`; ``pushed``: the steps queued. ``events``: :class:`TorchEvents`, or a stand-in with
    the same three methods (tests)."""

    RING = LateChecks.RING
    WIDTH = 2  # the loss, the count of targets out of range

    def __init__(self, events=TorchEvents) -> None:
        self._events = events
        self._late = LateChecks(events)
        self._host: torch.Tensor | None = None
        self.pushed = 0
        self.step_waits = 0
        self.drain_waits = 0

    def push(self, values: torch.Tensor, read: Callable[[list[float]], None]) -> None:
        """Queue ``values`` (1-D, at most :attr:`WIDTH` entries, on the step's device), then read every step that has
        arrived; ``read(values as floats)`` may raise. The buffer written here is free: the step ``RING`` before this
        one was read by the previous push at the latest."""
        if self._host is None:
            self._host = torch.zeros(self.RING, self.WIDTH, dtype=torch.float64, pin_memory=values.is_cuda)
        host = self._host[self.pushed % self.RING, : len(values)]
        host.copy_(values.detach().double(), non_blocking=True)  # float64 holds a float32 loss exactly, as .item()
        self._late.add(self._events.record(values), host, read)
        self.pushed += 1
        self.step_waits += self._late.settle()

    def drain(self) -> None:
        """Wait for every step in flight and read them in order (the first failed ``read`` raises)."""
        self.drain_waits += self._late.drain()

    def __len__(self) -> int:
        return len(self._late)
