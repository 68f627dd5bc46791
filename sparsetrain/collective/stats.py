"""Per-call accounting of the sparse collectives: rows and bytes moved, wall time."""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, fields


@dataclass
class CallRecord:
    """What one collective call did on this rank.

    ``bytes_sent`` / ``bytes_received`` count payload (ids and rows) exchanged with other
    ranks; rows this rank holds itself never count. ``meta_bytes`` is the small fixed-size
    exchange of sizes, dtypes and validity flags that precedes the payload.
    """

    op: str
    rank: int
    world_size: int
    rows_requested: int = 0
    rows_unique: int = 0
    rows_local: int = 0
    rows_remote: int = 0
    rows_served: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    meta_bytes: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


_SUMMED = [f.name for f in fields(CallRecord) if f.name not in ("op", "rank", "world_size")]


class CollectiveStats:
    """Totals per operation plus the most recent call records (``keep`` of them)."""

    def __init__(self, keep: int = 1024) -> None:
        self.records: deque[CallRecord] = deque(maxlen=keep)
        self._totals: dict[str, dict[str, float]] = {}
        self._calls: dict[str, int] = {}

    def record(self, rec: CallRecord) -> None:
        """Add one call."""
        self.records.append(rec)
        tot = self._totals.setdefault(rec.op, dict.fromkeys(_SUMMED, 0))
        for name in _SUMMED:
            tot[name] += getattr(rec, name)
        self._calls[rec.op] = self._calls.get(rec.op, 0) + 1

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self.records.clear()
        self._totals.clear()
        self._calls.clear()

    def calls(self, op: str | None = None) -> int:
        """Number of calls of ``op`` (all ops when None)."""
        return self._calls.get(op, 0) if op else sum(self._calls.values())

    def total(self, field: str, op: str | None = None) -> float:
        """Sum of ``field`` (e.g. ``"bytes_sent"``, ``"seconds"``) over calls of ``op`` (all ops when None)."""
        ops = [op] if op else list(self._totals)
        return sum(self._totals[o][field] for o in ops if o in self._totals)

    @property
    def bytes_sent(self) -> int:
        return int(self.total("bytes_sent"))

    @property
    def bytes_received(self) -> int:
        return int(self.total("bytes_received"))

    @property
    def seconds(self) -> float:
        return float(self.total("seconds"))

    def summary(self) -> dict[str, dict[str, float]]:
        """``{op: {"calls": n, field: total, ...}}``, JSON-ready."""
        return {op: {"calls": self._calls[op], **tot} for op, tot in self._totals.items()}

    def __repr__(self) -> str:
        return (f"CollectiveStats(calls={self.calls()}, bytes_sent={self.bytes_sent}, "
                f"bytes_received={self.bytes_received}, seconds={self.seconds:.4f})")


_DEFAULT = CollectiveStats()


def collective_stats() -> CollectiveStats:
    """The process-wide stats object every call records into unless given its own ``stats=``."""
    return _DEFAULT
