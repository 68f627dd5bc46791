"""Batch ordering (FastGL's Match-Reorder): consecutive batches that share input nodes.

A feature row already fetched for batch k need not be fetched again for batch
k + 1 (a device cache of the last batch's rows, or the storage tier's cache, serves it).
:func:`match_reorder` pre-samples an epoch's batches and orders them, window
by window, as a greedy chain: the next batch is the one of the window sharing
the most input nodes with the current one. :class:`ReuseStats` reports the
fraction of rows that did not need fetching again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling.input import SamplerInput

MAX_WINDOW = 63  # one bit per batch of the window (plus the previous window's last batch) in a uint64 mask
_PRESAMPLE_KEY = 1 << 48  # batch keys for pre-sampling, far from the sampler's own counter


@dataclass(frozen=True)
class ReuseStats:
    """Feature rows over an epoch in a given batch order: ``rows_needed`` = sum of input nodes, ``rows_reused`` = those
    the previous batch had."""

    rows_needed: int
    rows_reused: int

    @property
    def fraction_reused(self) -> float:
        """Fraction of feature rows not re-fetched (in the previous batch already)."""
        return self.rows_reused / self.rows_needed if self.rows_needed else 0.0

    @property
    def rows_fetched(self) -> int:
        return self.rows_needed - self.rows_reused


@numba.njit(cache=True, nogil=True)
def _consecutive_overlaps(concat, offsets, mark):
    """``out[k] = |I_k & I_{k-1}|`` for node lists ``concat[offsets[k]:offsets[k+1]]``; ``mark`` is -1 scratch, left
    clean."""
    num = offsets.shape[0] - 1
    out = np.zeros(num, np.int64)
    for k in range(num):
        shared = 0
        for p in range(offsets[k], offsets[k + 1]):
            if k > 0 and mark[concat[p]] == k - 1:
                shared += 1
        out[k] = shared
        for p in range(offsets[k], offsets[k + 1]):
            mark[concat[p]] = k
    for p in range(concat.shape[0]):
        mark[concat[p]] = -1
    return out


@numba.njit(cache=True, nogil=True)
def _overlap_matrix(concat, offsets, mask):
    """``out[i, j] = |I_i & I_j|`` for up to 64 node lists; ``mask`` is zeroed uint64 scratch, left clean.

    Every node gets a bit per list holding it; list ``i``'s masks are gathered once,
    then each count ``j > i`` is a branch-free (vectorized) sum of bit ``j``.
    """
    num = offsets.shape[0] - 1
    if num > 64:
        raise InputError("at most 64 node lists")
    for b in range(num):
        bit = np.uint64(1) << np.uint64(b)
        for p in range(offsets[b], offsets[b + 1]):
            mask[concat[p]] |= bit
    out = np.zeros((num, num), np.int64)
    gathered = np.empty(np.max(offsets[1:] - offsets[:-1]) if num else 0, np.uint64)
    for i in range(num - 1):
        size = offsets[i + 1] - offsets[i]
        for p in range(size):
            gathered[p] = mask[concat[offsets[i] + p]]
        for j in range(i + 1, num):
            shift = np.uint64(j)
            count = np.uint64(0)
            for p in range(size):
                count += (gathered[p] >> shift) & np.uint64(1)
            out[i, j] = count
            out[j, i] = count
    for p in range(concat.shape[0]):
        mask[concat[p]] = np.uint64(0)
    return out


def _concat(node_sets: Sequence[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    arrays = [torch.as_tensor(s).detach().cpu().numpy().astype(np.int64, copy=False) for s in node_sets]
    offsets = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum([a.shape[0] for a in arrays], out=offsets[1:])
    return (np.concatenate(arrays) if arrays else np.empty(0, np.int64)), offsets


def reuse_stats(input_nodes: Sequence[torch.Tensor], num_nodes: int) -> ReuseStats:
    """Rows needed and rows shared with the previous batch, for batches in the given order (unique ids per batch)."""
    concat, offsets = _concat(input_nodes)
    overlaps = _consecutive_overlaps(concat, offsets, np.full(num_nodes, -1, np.int64))
    return ReuseStats(int(offsets[-1]), int(overlaps.sum()))


def match_reorder(input_nodes: Sequence[torch.Tensor], num_nodes: int, window: int = 16) -> list[int]:
    """An order of the batches (a permutation of their indices) chaining large overlaps, greedily within windows.

    Window ``w`` holds batches ``[w * window, (w + 1) * window)`` of the given order;
    its chain starts at the batch that shares most with the previous window's last pick.
    """
    if not 1 <= window <= MAX_WINDOW:
        raise InputError(f"window={window}; give 1 <= window <= {MAX_WINDOW}")
    mask = np.zeros(num_nodes, np.uint64)
    order: list[int] = []
    for lo in range(0, len(input_nodes), window):
        members = list(range(lo, min(lo + window, len(input_nodes))))
        chain_from = [order[-1]] if order else []
        concat, offsets = _concat([input_nodes[i] for i in chain_from + members])
        overlap = _overlap_matrix(concat, offsets, mask)
        shift = len(chain_from)
        left = list(range(len(members)))
        current = 0 if not chain_from else None
        if current is None:  # start where the previous window ended
            current = max(left, key=lambda c: (overlap[0, c + shift], -c))
        picked = [current]
        left.remove(current)
        while left:
            current = max(left, key=lambda c, cur=current: (overlap[cur + shift, c + shift], -c))
            picked.append(current)
            left.remove(current)
        order.extend(members[c] for c in picked)
    return order


class MatchReorder:
    """The ``order`` hook of :class:`~sparsetrain.sampling.SeedBatches` (and so of a loader): ``(seed batches, sampler)
    -> reordered seed batches``.

    Pre-samples every batch (with batch keys apart from the sampler's own
    counter), orders them with :func:`match_reorder`, and keeps the reuse of
    the given order and of the new one in ``before`` / ``after``. The batches
    sampled for training draw afresh, so ``after`` is an estimate there, exact
    for fanout -1.
    """

    def __init__(self, window: int = 16) -> None:
        if not 1 <= window <= MAX_WINDOW:
            raise InputError(f"window={window}; give 1 <= window <= {MAX_WINDOW}")
        self.window = window
        self.before: ReuseStats | None = None
        self.after: ReuseStats | None = None

    def __call__(self, batches: Sequence[torch.Tensor], sampler) -> list[torch.Tensor]:
        num_nodes = sampler.graph.num_nodes
        inputs = [sampler.sample(SamplerInput(b, key=_PRESAMPLE_KEY + i)).input_nodes for i, b in enumerate(batches)]
        order = match_reorder(inputs, num_nodes, self.window)
        self.before = reuse_stats(inputs, num_nodes)
        self.after = reuse_stats([inputs[i] for i in order], num_nodes)
        return [batches[i] for i in order]
