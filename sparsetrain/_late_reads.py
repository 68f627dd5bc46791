"""Values copied from the device to a ring of pinned host buffers, each checked once it has arrived, with no host wait
unless the host runs a whole ring ahead (:class:`LateChecks`).

The GPU sampler's padded batches raise their checks this way (``sparsetrain.sampling.cuda``), and the trainer reads
each step's loss the same way (``sparsetrain.engine.late_loss``): a module of its own, which both may import.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class LateChecks:
    """The checks of batches (or steps) in flight: each one's values copied to a pinned host buffer with an event after
    the copy (``ops``: ``done(event)``, ``wait(event)``), checked once the event has passed. ``RING`` buffers are used
    in turn (a padded batch's upload buffers too): a batch waits for the device only when the batch ``RING`` before it
    has not finished, i.e. when the host runs ``RING`` batches ahead of the device."""

    RING = 4

    def __init__(self, ops) -> None:
        self._ops = ops
        self._pending = deque()  # (event, host buffer, check), oldest first

    def add(self, event, host, check: Callable[[list[int]], None]) -> None:
        """Queue a check of ``host`` once ``event`` has passed (``host`` None: nothing to read, the entry only holds
        its ring slot until then)."""
        self._pending.append((event, host, check))

    def settle(self) -> int:
        """Raise the first failed check among the batches done; wait for the oldest while ``RING`` are in flight (its
        buffers are the next batch's). Returns the host waits made (0 unless the host is that far ahead)."""
        waits = 0
        while self._pending:
            event, host, check = self._pending[0]
            if not self._ops.done(event):
                if len(self._pending) < self.RING:
                    break
                self._ops.wait(event)
                waits += 1
            self._pending.popleft()
            check(None if host is None else host.tolist())  # (host memory the copy has reached: no wait)
        return waits

    def drain(self) -> int:
        """Wait for every batch in flight and raise the first failed check (at the end of an epoch); returns the host
        waits made."""
        waits = 0
        while self._pending:
            event, host, check = self._pending.popleft()
            if not self._ops.done(event):
                self._ops.wait(event)
                waits += 1
            check(None if host is None else host.tolist())  # (host memory the copy has reached: no wait)
        return waits

    def __len__(self) -> int:
        return len(self._pending)
