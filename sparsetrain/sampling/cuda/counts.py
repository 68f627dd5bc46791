"""What one GPU batch asks of the device, counted by the driver as it queues the work (:class:`BatchCounts`).

Not a timing: every launch, copy, host wait and allocation is counted where the driver (through its
:class:`~sparsetrain.sampling.cuda.workspace.Workspace`) queues it, on whichever array back end runs it, so the
simulator's counts are the GPU's. Each operation counts what PyTorch's CUDA implementation of it launches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class LaunchCounts:
    """The device work of one phase of a batch.

    ``kernels``: Numba kernel launches; ``torch_ops``: device work queued by PyTorch (fills, scans, memcpys);
    ``copies``: the memcpys among those (host to device, device to device, device to host); ``syncs``: host waits
    for the device (reads); ``allocations``: device arrays allocated (a workspace keeps its arrays, so a batch of a
    shape seen before allocates only its outputs); ``pinned_allocations``: page-locked host buffers allocated;
    ``graphs``: CUDA graph launches (each replays a captured batch's device work: :mod:`.capture`).
    """

    kernels: int = 0
    torch_ops: int = 0
    copies: int = 0
    syncs: int = 0
    allocations: int = 0
    pinned_allocations: int = 0
    graphs: int = 0

    @property
    def launches(self) -> int:
        return self.kernels + self.torch_ops + self.graphs

    def __add__(self, other: LaunchCounts) -> LaunchCounts:
        return LaunchCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def as_dict(self) -> dict[str, int]:
        return {"launches": self.launches, **asdict(self)}


class BatchCounts:
    """A batch's :class:`LaunchCounts` per phase (``"setup"``, ``"hop 0"``, ..., ``"finish"``) and in all."""

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
