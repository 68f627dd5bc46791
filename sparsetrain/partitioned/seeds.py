"""A rank's keyed seed batches of an epoch, as many on every rank: `global_rank_batches`, its shares of the one-process
epoch's batches (what training uses), or `rank_batches`, batches of its own part's seeds."""

from __future__ import annotations

import torch

from sparsetrain import _args
from sparsetrain.collective.dense import all_gather_rows
from sparsetrain.collective.groups import group_info
from sparsetrain.errors import InputError
from sparsetrain.partition.load import Partition, load_partition, part_sizes
from sparsetrain.sampling.batch_keys import batch_key, epoch_order
from sparsetrain.sampling.input import SamplerInput


def batches_per_epoch(part: Partition, split: str, batch_size: int) -> int:
    """The batch count of the rank with most seeds, from the manifest (the same on every rank, no collective)."""
    batch_size = _args.integer("batches_per_epoch", "batch_size", batch_size, low=1, error=InputError)
    _check_split(part, split)
    return max(-(-n // batch_size) for n in part_sizes(part.manifest, split))


def _check_split(part: Partition, split: str) -> None:
    splits = part.manifest["parts"][0]["splits"]
    if split not in splits:
        raise InputError(f"{part.path}: has no split {split!r} (its splits: {', '.join(splits) or 'none'})")


def rank_batches(part: Partition, split: str, batch_size: int, *, seed: int = 0, epoch: int = 0,
                 shuffle: bool = True) -> list[SamplerInput]:
    """This rank's owned ``split`` nodes (global ids), shuffled by (seed, epoch, rank), cut into batches, padded with
    empty batches to :func:`batches_per_epoch`, each under its :func:`~sparsetrain.sampling.batch_keys.batch_key`:
    unique across ranks and epochs, so a batch's draws are a pure function of (seed, epoch, rank, position), and the
    PyG drop-in over the same parts draws the same epoch."""
    batch_size = _args.integer("rank_batches", "batch_size", batch_size, low=1, error=InputError)
    _check_split(part, split)
    ids = part.split_global(split)
    ids = ids[epoch_order(len(ids), seed, epoch, shuffle=shuffle, rank=part.rank, world_size=part.num_parts)]
    per_epoch = batches_per_epoch(part, split, batch_size)
    return [SamplerInput(ids[i * batch_size : (i + 1) * batch_size],
                         key=batch_key(epoch, i, per_epoch, part.rank, part.num_parts)) for i in range(per_epoch)]


def global_split(part: Partition, split: str, group=None) -> torch.Tensor:
    """Every part's owned ``split`` nodes as global ids (typed: ids within the target type), ascending: the one-process
    run's split. Collective over ``group`` (one all-gather, padded to the largest part's count from the manifest);
    without a process group, read from every part in the folder."""
    _check_split(part, split)
    sizes = part_sizes(part.manifest, split)
    world = group_info(group).world_size
    if world == 1 and part.num_parts > 1:  # no process group (one process reading parts): the folder has every part
        ids = [load_partition(part.path, r).split_global(split).to(torch.int64) for r in range(part.num_parts)]
        return torch.sort(torch.cat(ids)).values
    if world != part.num_parts:
        raise InputError(f"{part.path}: has {part.num_parts} parts but the process group has {world} ranks; run one "
                         f"rank per part (torchrun --nproc-per-node {part.num_parts})")
    mine = part.split_global(split).to(torch.int64)
    padded = torch.full((max(sizes),), -1, dtype=torch.int64)
    padded[: len(mine)] = mine
    rows = all_gather_rows(padded, group)
    return torch.sort(torch.cat([rows[r, :n] for r, n in enumerate(sizes)])).values


def global_batches_per_epoch(num_seeds: int, batch_size: int, world_size: int) -> int:
    """The one-process epoch's batch count: ``num_seeds`` cut into batches of ``batch_size * world_size``."""
    return -(-num_seeds // (batch_size * world_size))


def global_batch_size(key: int, num_seeds: int, batch_size: int, world_size: int) -> int:
    """How many seeds the one-process batch under ``key`` holds (all ranks' shares together; the last is short)."""
    per_epoch = global_batches_per_epoch(num_seeds, batch_size, world_size)
    whole = batch_size * world_size
    return min(whole, num_seeds - (key % per_epoch) * whole)


def global_rank_batches(part: Partition, split_ids: torch.Tensor, owned: torch.Tensor, batch_size: int, *,
                        seed: int = 0, epoch: int = 0, shuffle: bool = True) -> list[SamplerInput]:
    """This rank's shares of the one-process epoch: ``split_ids`` (:func:`global_split`) shuffled by (seed, epoch) as
    :class:`~sparsetrain.sampling.SeedBatches` shuffles them, cut into batches of ``batch_size * world_size`` (the
    one-process run's ``--batch-size``), batch ``i`` under the one-process key ``batch_key(epoch, i, per_epoch)``;
    rank r keeps the seeds of each batch that it owns (``owned``: its ascending owned ids of the split), in the batch's
    order. So the ranks' batches of a step together are the one-process batch: the same seeds, drawn under the same
    key (an owner's draws depend on (seed, key, hop, node) only), with no seed sent to another rank."""
    batch_size = _args.integer("global_rank_batches", "batch_size", batch_size, low=1, error=InputError)
    ids = split_ids[epoch_order(len(split_ids), seed, epoch, shuffle=shuffle)]
    pos = torch.searchsorted(owned, ids).clamp_(max=max(len(owned) - 1, 0))
    mine = owned[pos] == ids if len(owned) else torch.zeros(len(ids), dtype=torch.bool)
    whole = batch_size * part.num_parts
    per_epoch = global_batches_per_epoch(len(ids), batch_size, part.num_parts)
    out = []
    for i in range(per_epoch):
        lo, hi = i * whole, (i + 1) * whole
        out.append(SamplerInput(ids[lo:hi][mine[lo:hi]], key=batch_key(epoch, i, per_epoch)))
    return out
