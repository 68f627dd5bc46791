"""`SeedBatches`: an epoch's seeds cut into keyed batches, the first stage of every loader.

The one implementation of seed batching: the shuffle of an epoch, a rank's share,
the optional batch order (:class:`~sparsetrain.sampling.MatchReorder`) and the batch
keys that make a batch's random draws a pure function of (seed, epoch, rank, position),
so a run resumed mid-epoch sees exactly the batches of the uninterrupted run. It lives
in ``sampling`` (not in the engine that drives it) because its output is the samplers'
input, :class:`~sparsetrain.sampling.SamplerInput`, and the batch order it applies
pre-samples. Edge seeds and typed seeds get the same treatment: shuffle and cut their
own seed table, and hand out ``SamplerInput`` with the fields of that kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling.batch_keys import batch_key, epoch_order
from sparsetrain.sampling.input import EdgeSamplerInput, EdgeSeeds, SamplerInput


class SeedBatches:
    """An epoch's seed batches: shuffled by ``(seed, epoch)``, this rank's share, optionally reordered.

    With ``world_size > 1`` every rank draws the same shuffle and takes its own equal
    share (the remainder is left out, so all ranks step together). ``order`` is a
    hook ``(seed batches, sampler) -> reordered seed batches`` such as ``MatchReorder()``
    (it needs ``sampler``). :meth:`inputs` gives the batches as keyed ``SamplerInput``
    (``EdgeSamplerInput`` when ``seeds`` is an :class:`~sparsetrain.sampling.EdgeSeeds` table).
    """

    def __init__(self, seeds: torch.Tensor | EdgeSeeds, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False, seed: int = 0,
                 order: Callable[[Sequence[torch.Tensor], object], list[torch.Tensor]] | None = None, sampler=None,
                 rank: int = 0, world_size: int = 1) -> None:
        if batch_size < 1:
            raise InputError(f"batch_size={batch_size}; give a positive batch size")
        if order is not None and sampler is None:
            raise InputError("order= needs sampler= (batches are pre-sampled to measure their overlap)")
        if not 0 <= rank < world_size:
            raise InputError(f"rank={rank}; give a rank in [0, world_size={world_size})")
        if isinstance(seeds, EdgeSeeds) and order is not None:
            raise InputError("order= reorders node-seed batches only; drop it for edge seeds")
        self.seeds = seeds if isinstance(seeds, EdgeSeeds) else torch.as_tensor(seeds, dtype=torch.int64)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.order = order
        self.sampler = sampler
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self, epoch: int | None = None) -> list[torch.Tensor | EdgeSeeds]:
        """This rank's seed batches of ``epoch`` (default: the current one), a pure function of (seed, epoch, rank)."""
        epoch = self.epoch if epoch is None else epoch
        seeds = self.seeds
        if self.shuffle:  # one order shared by every rank
            seeds = seeds[epoch_order(len(seeds), self.seed, epoch)]
        if self.world_size > 1:
            share = len(seeds) // self.world_size
            seeds = seeds[self.rank * share : (self.rank + 1) * share]
        parts = [seeds[lo : lo + self.batch_size] for lo in range(0, len(seeds), self.batch_size)]
        if self.drop_last and parts and len(parts[-1]) < self.batch_size:
            parts.pop()
        return self.order(parts, self.sampler) if self.order is not None else parts

    def inputs(self, epoch: int | None = None) -> list[SamplerInput | EdgeSamplerInput]:
        """The batches of ``epoch`` as ``SamplerInput`` whose keys never collide across epochs or ranks
        (:func:`~sparsetrain.sampling.batch_keys.batch_key`)."""
        epoch = self.epoch if epoch is None else epoch
        per_epoch = -(-len(self.seeds) // self.batch_size)
        keys = [batch_key(epoch, i, per_epoch, self.rank, self.world_size) for i in range(per_epoch)]
        return [part.input(key=keys[i]) if isinstance(part, EdgeSeeds) else SamplerInput(part, key=keys[i])
                for i, part in enumerate(self.batches(epoch))]

    def __len__(self) -> int:
        n = len(self.seeds) // self.world_size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.batches())
