"""A padded batch's device work captured once and replayed for every full batch after it (:class:`CapturedBatches`).

A padded batch queues a fixed sequence of ~27 launches; from Python they cost the host ~6 ms a batch against ~0.5 ms
of device work. Captured, a batch is one graph launch and one copy. What changes from batch to batch lives where the
captured work reads it when replayed, never in a launch's arguments: the seeds in a fixed device buffer (copied in
before each replay), the hop keys in the pinned upload buffer (the host rewrites it before each replay; the captured
copy reads it then), and each batch's checks go to its ring slot's pinned buffer, raised late as an eager padded
batch's are. Each ring slot has its own pinned buffers, hence its own graph, captured after one eager batch in that slot
has made its arrays and compiled the kernels: nothing is allocated while capturing. Only full batches (as many seeds
as the padded shapes hold) are captured; a smaller one (an epoch's last) runs the eager padded path. A capture that
fails raises :class:`~sparsetrain.errors.BackendError` (the run asked for it; it never stays eager silently).

On a GPU the graph is a ``torch.cuda.CUDAGraph`` (:class:`CudaGraphCapture`); under the simulator a :class:`Recording`
runs and records every device operation the workspace queues and replays them, and only them: the CUDA graph's
semantics, checked on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from sparsetrain.errors import BackendError

WARM = "warm"  # the slot's eager batch has made its arrays: capture next time


class Recording:
    """The simulator's CUDA graph: while capturing, the workspace runs each device operation and appends it here;
    :meth:`replay` runs them again in order, and nothing else (each reads its inputs from memory when it runs)."""

    def __init__(self) -> None:
        self._work: list[Callable[[], object]] = []

    @contextmanager
    def capturing(self, ws):
        yield

    def record(self, work: Callable[[], object]) -> None:
        self._work.append(work)

    def replay(self) -> None:
        for work in self._work:
            work()


class CudaGraphCapture:
    """A ``torch.cuda.CUDAGraph`` of the work queued while :meth:`capturing` (on a side stream, which Numba's
    kernels reach as torch's current stream), replayed on the current stream."""

    def __init__(self, ops) -> None:
        self._ops = ops
        self._graph = ops.torch.cuda.CUDAGraph()

    @contextmanager
    def capturing(self, ws):
        torch = self._ops.torch
        side = torch.cuda.Stream(self._ops.device)
        try:
            with torch.cuda.graph(self._graph, stream=side, capture_error_mode="thread_local"):
                ws.stream = self._ops.stream()  # the capture stream
                yield
        finally:
            ws.stream = self._ops.stream()

    def record(self, work) -> None:
        pass  # the stream capture records it

    def replay(self) -> None:
        self._graph.replay()


@dataclass
class Captured:
    """One ring slot's captured batch: its graph, the device buffer it reads the seeds from, what the driver returned
    (the padded buffers), the pinned uploads it reads (buffer, values at capture, ``(offset, hop)`` of each hop's keys
    in them), the pinned buffers it copies checks to (with their check), the counts of the captured work and the
    workspace's arrays it uses (kept alive)."""

    graph: object
    seeds: object
    result: object = None
    uploads: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    counts: object = None
    held: list = field(default_factory=list)

    def record(self, work) -> None:
        self.graph.record(work)

    def uploaded(self, host, values: np.ndarray, keys_at) -> None:
        self.uploads.append((host, np.array(values, np.int64), list(keys_at)))

    def late_check(self, host, check) -> None:
        self.checks.append((host, check))


class CapturedBatches:
    """A workspace's captured padded batches, one per (batch key, ring slot); see the module docstring."""

    def __init__(self, ops) -> None:
        self._ops = ops
        self._slots: dict[tuple, object] = {}  # (key, slot) -> WARM or its Captured

    def sample(self, ws, key: tuple, seeds, keys, run: Callable):
        """The batch of ``seeds`` with hop keys ``keys``: eager (``run(seeds)``, the driver's padded batch) the first
        time in its ring slot, then captured, then replayed. ``key`` names what the capture bakes in (the padded
        buffers, the options); ``ws`` has begun the batch."""
        at = (key, ws.slot)
        state = self._slots.get(at)
        if state is None:
            self._slots[at] = WARM
            return run(seeds)
        if state is WARM:
            try:
                state = self._capture(ws, seeds, run)
            finally:
                ws.restart()
            self._slots[at] = state
        return self._replay(ws, state, seeds, keys)

    def _capture(self, ws, seeds, run: Callable) -> Captured:
        """Capture the batch; a failure is a :class:`BackendError` (the run asked for capture: no silent eager run)."""
        try:
            captured = Captured(self._ops.graph(), self._ops.empty(len(seeds)))
            ws.assign(captured.seeds, seeds)  # (the simulator runs the work as it records it)
            ws.capture = captured
            with captured.graph.capturing(ws):
                captured.result = run(captured.seeds)
        except Exception as exc:
            if isinstance(exc, BackendError):
                raise
            reason = str(exc).splitlines()[0] if str(exc) else ""
            raise BackendError(f"capturing the padded batch's sampling as a CUDA graph failed ({type(exc).__name__}: "
                               f"{reason}); run without capture: drop --step static (or sample_padded(..., "
                               "capture=False))") from exc
        finally:
            ws.capture = None
        captured.counts, captured.held = ws.counts, ws.held()
        return captured

    def _replay(self, ws, captured: Captured, seeds, keys):
        for host, values, keys_at in captured.uploads:
            values = values.copy()  # (the whole buffer: an eager batch in this slot may have rewritten it)
            for offset, hop in keys_at:
                hop_keys = np.asarray(keys[hop]).view(np.int64)
                values[offset: offset + len(hop_keys)] = hop_keys
            self._ops.write(host, values)
        ws.assign(captured.seeds, seeds)
        ws.phase("graph")
        captured.graph.replay()
        ws.counts.add(graphs=1)
        for host, check in captured.checks:
            ws.late.add(self._ops.record_done(), host, check)
        return captured.result
