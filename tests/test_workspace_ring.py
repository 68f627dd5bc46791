"""A padded batch that raises after its workspace slot began still holds the slot until its queued work has passed
(issue 45 item 4): the slot's pinned uploads are not rewritten while a copy from them may be in flight."""

import numpy as np
import pytest

from sparsetrain._late_reads import LateChecks
from sparsetrain.sampling.cuda.arrays import NumpyArrays
from sparsetrain.sampling.cuda.workspace import DeviceWorkspace

RING = LateChecks.RING


class LaggingArrays(NumpyArrays):
    """The simulator's arrays on a device that finishes nothing until the host waits for it; every host write to a
    pinned buffer is checked against the copies from it still queued."""

    def __init__(self) -> None:
        super().__init__()
        self.events, self.finished, self.in_flight = 0, 0, []  # in_flight: (event after it, pinned buffer)

    def record_done(self):
        self.events += 1
        return self.events - 1

    def done(self, event) -> bool:
        return event is None or event < self.finished

    def wait(self, event) -> None:
        self.finished = max(self.finished, event + 1)

    def copy_in(self, out, host) -> None:
        super().copy_in(out, host)
        self.in_flight.append((self.events, host))  # done once the next recorded event has passed

    def write(self, host, values) -> None:
        busy = [e for e, h in self.in_flight if h is host and e >= self.finished]
        assert not busy, f"a pinned upload rewritten while the copy queued before event {busy[0]} may still read it"
        super().write(host, values)


def _batch(ws: DeviceWorkspace, fail: bool) -> None:
    ws.begin(padded=True)
    try:
        ws.upload(np.arange(8, dtype=np.int64))  # the slot's pinned upload, copied in
        if fail:
            raise RuntimeError("a batch's failure after its upload")
        ws.read_late(ws.empty(2), lambda values: None)
    finally:
        ws.end()


@pytest.mark.parametrize("failed", range(RING))
def test_a_failed_padded_batch_holds_its_slot_until_its_work_passed(failed):
    ops = LaggingArrays()
    ws = DeviceWorkspace(ops)
    for batch in range(3 * RING):
        if batch == failed:
            with pytest.raises(RuntimeError, match="failure after its upload"):
                _batch(ws, fail=True)
        else:
            _batch(ws, fail=False)  # the write asserts that no copy from the slot's buffer is in flight
        assert len(ws.late) <= RING - 1 + 1
    ws.late.drain()
    assert ws.slot == (3 * RING - 1) % RING


def test_a_batch_that_queued_its_checks_adds_no_entry_of_its_own():
    ws = DeviceWorkspace(LaggingArrays())
    _batch(ws, fail=False)
    assert len(ws.late) == 1
