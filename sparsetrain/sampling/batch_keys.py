"""The shuffle of an epoch and the key of each batch: the scheme reproducibility rests on, written once.

Every path that cuts seeds into batches uses it: the single-process and DDP loaders
(:class:`~sparsetrain.sampling.SeedBatches`), the partitioned run (:func:`~sparsetrain.partitioned.global_rank_batches`:
each rank's share of the one-process batch, under its key; :func:`~sparsetrain.partitioned.rank_batches`) and the PyG
drop-in (:class:`sparsetrain.pyg.PyGNeighborSampler`'s keys, the ``batch_sampler`` over parts in
:mod:`sparsetrain.pyg.partitioned`). So the drop-in over a partitioned folder and the engine over the same folder draw
the same epoch for the same seed: the same seeds in the same batches, sampled under the same keys.

* An epoch's order is ``randperm`` under :func:`shuffle_seed`: ``seed * SHUFFLE_STRIDE + epoch``, times the world
  size plus the rank where every rank shuffles its own seeds (a part's owned nodes).
* Batch ``position`` of ``epoch`` on ``rank`` of ``world_size`` has key :func:`batch_key`:
  ``(epoch * per_epoch + position) * world_size + rank`` (``per_epoch``: the batches of an epoch, the same on every
  rank), unique across epochs and ranks; one process's keys are 0, 1, 2, ... in order.
"""

from __future__ import annotations

import torch

SHUFFLE_STRIDE = 1_000_003
"""An epoch's shuffle seed is ``seed * SHUFFLE_STRIDE + epoch``: distinct for the first million epochs of each seed."""
SEED_SPACE = 1 << 64
"""Shuffle seeds are taken modulo 2**64, as torch folds a negative seed: the same stream wherever the seed fitted, and
no overflow for any seed the settings allow (``|seed| < 2**43``) on any number of ranks."""


def shuffle_seed(seed: int, epoch: int, rank: int | None = None, world_size: int = 1) -> int:
    """The seed of ``epoch``'s shuffle: one shared by every rank (``rank=None``), or rank ``rank``'s own."""
    shared = seed * SHUFFLE_STRIDE + epoch
    return (shared if rank is None else shared * world_size + rank) % SEED_SPACE


def epoch_order(n: int, seed: int, epoch: int, *, shuffle: bool = True, rank: int | None = None,
                world_size: int = 1) -> torch.Tensor:
    """Positions ``0..n-1`` in ``epoch``'s order: shuffled by :func:`shuffle_seed` (``arange`` without ``shuffle``)."""
    if not shuffle:
        return torch.arange(n)
    return torch.randperm(n, generator=torch.Generator().manual_seed(shuffle_seed(seed, epoch, rank, world_size)))


def batch_key(epoch: int, position: int, per_epoch: int, rank: int = 0, world_size: int = 1) -> int:
    """The key of batch ``position`` of ``epoch`` (``per_epoch`` batches each) on ``rank`` of ``world_size``."""
    return run_key(epoch * per_epoch + position, rank, world_size)


def run_key(index: int, rank: int = 0, world_size: int = 1) -> int:
    """The key of a rank's batch number ``index`` of the run (its epoch times the batches of an epoch, plus its
    position: what :class:`sparsetrain.pyg.keys.BatchKeys` counts) on ``rank`` of ``world_size``."""
    return index * world_size + rank
