"""What a piece of GPU work queued, counted where it is queued (:class:`LaunchCounts`): not a timing.

The GPU sampler's workspace counts each batch's work per phase with it, the zero-copy gather each call's; both count
on whichever array back end runs the work, so Numba's CUDA simulator counts what a GPU runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class LaunchCounts:
    """``kernels``: Numba kernel launches; ``torch_ops``: device work queued by PyTorch (fills, scans, sorts, memcpys;
    a sort is a few cub kernels inside PyTorch, counted once); ``copies``: the memcpys among those (host to device,
    device to device, device to host); ``syncs``: host waits for the device; ``allocations``: device arrays allocated
    (kept buffers are allocated once, then only when they grow); ``pinned_allocations``: page-locked host buffers
    allocated; ``graphs``: CUDA graph launches (each replays captured work)."""

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
