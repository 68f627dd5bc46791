"""`rank_batches`: a rank's keyed seed batches of an epoch, as many on every rank."""

from __future__ import annotations

from sparsetrain import _args
from sparsetrain.errors import InputError
from sparsetrain.partition.load import Partition, part_sizes
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
