"""What one GPU batch asks of the device, counted by the driver as it queues the work (:class:`BatchCounts`).

Not a timing: every launch, copy, host wait and allocation is counted where the driver (through its
:class:`~sparsetrain.sampling.cuda.workspace.DeviceWorkspace`) queues it, on whichever array back end runs it, so the
simulator's counts are the GPU's. Each operation counts what PyTorch's CUDA implementation of it launches.
"""

from __future__ import annotations

from dataclasses import fields

from sparsetrain._launch_counts import LaunchCounts


class BatchCounts:
    """A batch's :class:`~sparsetrain._launch_counts.LaunchCounts` per phase (``"setup"``, ``"hop 0"``, ...,
    ``"finish"``) and in all."""

    def __init__(self) -> None:
        self.phases: dict[str, LaunchCounts] = {}
        self._now = self.phase("setup")

    def phase(self, name: str) -> LaunchCounts:
        """Count what follows under ``name``."""
        self._now = self.phases.setdefault(name, LaunchCounts())
        return self._now

    def add(self, **counts: int) -> None:
        for name, n in counts.items():
            setattr(self._now, name, getattr(self._now, name) + n)

    @property
    def total(self) -> LaunchCounts:
        return sum(self.phases.values(), LaunchCounts())

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {**{name: c.as_dict() for name, c in self.phases.items()}, "batch": self.total.as_dict()}

    def table(self) -> str:
        """A plain-text table: one row per phase and the batch."""
        names = ["launches", *(f.name for f in fields(LaunchCounts))]
        rows = [("phase", *names)] + [(p, *map(str, c.values())) for p, c in self.as_dict().items()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(names) + 1)]
        return "\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows)
