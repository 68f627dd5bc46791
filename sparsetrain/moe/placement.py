"""Load-aware expert placement for FSSDP: a sliding window of per-expert token counts, then
owners balanced by load (whole rows, equal row counts per rank) and hot experts replicated
within a per-rank memory cap."""

from __future__ import annotations

import heapq
from collections import deque

import torch

from sparsetrain.collective import RowPlacement


class LoadWindow:
    """Sum of the last ``window`` per-expert count vectors (global counts: identical on every rank)."""

    def __init__(self, num_experts: int, window: int) -> None:
        self.window = int(window)
        self._steps: deque[torch.Tensor] = deque(maxlen=self.window)
        self.num_experts = num_experts
        self.steps_seen = 0

    def add(self, counts: torch.Tensor) -> None:
        """Record one forward's global counts."""
        self._steps.append(counts.detach().to("cpu", torch.int64).clone())
        self.steps_seen += 1

    def load(self) -> torch.Tensor:
        """``[E]`` int64 tokens per expert over the window."""
        if not self._steps:
            return torch.zeros(self.num_experts, dtype=torch.int64)
        return torch.stack(list(self._steps)).sum(0)


def balanced_owners(load: torch.Tensor, world_size: int) -> torch.Tensor:
    """Owner rank per expert: heaviest first onto the least-loaded rank that still has room.

    Every rank owns ``ceil(E / W)`` or ``floor(E / W)`` experts (equal memory); ties break by
    expert id and rank so every rank computes the same answer.
    """
    num = load.numel()
    base, extra = divmod(num, world_size)
    room = [base + (1 if r < extra else 0) for r in range(world_size)]
    heap = [(0, r) for r in range(world_size)]
    heapq.heapify(heap)
    owner = torch.empty(num, dtype=torch.int64)
    order = sorted(range(num), key=lambda e: (-int(load[e]), e))
    for e in order:
        parked = []
        while True:
            total, r = heapq.heappop(heap)
            if room[r] > 0:
                break
            parked.append((total, r))
        owner[e] = r
        room[r] -= 1
        heapq.heappush(heap, (total + int(load[e]), r))
        for item in parked:
            heapq.heappush(heap, item)
    return owner


def hot_replicas(
    load: torch.Tensor, owner: torch.Tensor, world_size: int, max_rows_per_rank: int, hot_factor: float = 2.0
) -> dict[int, list[int]]:
    """``{expert: [ranks]}``: experts whose load is above ``hot_factor`` x the mean, hottest first,
    copied onto every other rank while that rank has fewer than ``max_rows_per_rank`` replicas."""
    if max_rows_per_rank <= 0 or world_size == 1 or load.sum() == 0:
        return {}
    mean = float(load.sum()) / load.numel()
    used = [0] * world_size
    out: dict[int, list[int]] = {}
    for e in sorted(range(load.numel()), key=lambda e: (-int(load[e]), e)):
        if float(load[e]) <= hot_factor * mean:
            break
        ranks = [r for r in range(world_size) if r != int(owner[e]) and used[r] < max_rows_per_rank]
        for r in ranks:
            used[r] += 1
        if ranks:
            out[e] = ranks
    return out


def plan_placement(
    load: torch.Tensor, world_size: int, *, max_replica_rows: int = 0, hot_factor: float = 2.0
) -> RowPlacement:
    """A :class:`RowPlacement` of the experts: owners balanced by ``load``, hot experts replicated."""
    owner = balanced_owners(load, world_size)
    base = RowPlacement.from_owner(owner, world_size)
    reps = hot_replicas(load, owner, world_size, max_replica_rows, hot_factor)
    return base.with_replicas(reps) if reps else base
