"""``sparsetrain train --data DIR`` on a partitioned folder (``sparsetrain partition``'s output): one part per rank.

Rank ``r`` opens part ``r`` (:func:`~sparsetrain.partition.load_partition`), samples its own train nodes with
:class:`~sparsetrain.distributed.DistNeighborSampler` over :func:`~sparsetrain.distributed.rank_batches` (every rank
as many batches, the short ones padded with empty batches), reads features through
:class:`~sparsetrain.distributed.PartitionedFeatures` and trains with DDP through the same
:class:`~sparsetrain.engine.trainer.Trainer` and loader stages as every other run. Evaluation samples each rank's
owned val/test nodes the same way and sums correct/total over the ranks. Sampler and feature exchanges share one
group of their own, apart from DDP's, as ``--features sharded`` does.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from sparsetrain.collective import all_reduce_sum, new_group
from sparsetrain.datasets.applicable import TRAIN_RULES, TrainContext, refuse_inapplicable
from sparsetrain.datasets.format import NODE
from sparsetrain.distributed import DistNeighborSampler, PartitionedFeatures, batches_per_epoch, rank_batches
from sparsetrain.engine.dataset_meta import DatasetMeta, Table
from sparsetrain.engine.distributed import DistContext
from sparsetrain.engine.evaluate import loaders_evaluator
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.partitioned_checks import (
    PartitionedRunError,
    check_part_contents,
    check_part_rows,
    check_same_settings,
    rank_settings,
)
from sparsetrain.engine.plan import MODEL_DEFAULTS, RunPlan, auto_epochs, plan
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.engine.stages.fetch import FetchFeatures
from sparsetrain.engine.trainer import Task
from sparsetrain.nn.models import build_model
from sparsetrain.partition import load_partition
from sparsetrain.partition.load import Partition, part_sizes
from sparsetrain.partition.manifest import MANIFEST

HALO_CACHE_FRACTION = 0.25
"""Without ``--cache-gb``: the share of a part's halo rows kept locally (the most-drawn ones)."""


def is_partitioned(path) -> bool:
    """Whether ``--data`` names a partitioned folder (it has ``sparsetrain partition``'s manifest)."""
    return path is not None and (Path(path) / MANIFEST).is_file()


def refuse_unsupported(settings: TrainSettings) -> None:
    """One line for every setting a partitioned run does not support yet (the rows of ``TRAIN_RULES`` for a
    partitioned folder, checked before any part is opened)."""
    refuse_inapplicable(TRAIN_RULES, TrainContext(settings, partitioned=True), PartitionedRunError)


def _part_meta(part: Partition) -> DatasetMeta:
    """The part as the planner reads it: its features are the part's owned rows."""
    rows = part.features
    return replace(DatasetMeta.of(part.dataset), features={NODE: Table(rows.shape[1], rows.nbytes, rows.row_bytes)})


class GlobalLabels:
    """A part's labels indexed by global ids of nodes it owns (the batches' seeds)."""

    def __init__(self, part: Partition) -> None:
        self.part, self.labels = part, part.dataset.labels

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.labels[self.part.to_local(ids.cpu())]


class FetchWithOwners(FetchFeatures):
    """The fetch stage handing the store each input node's owner (``mb.node_owner``)."""

    def __call__(self, mb):
        mb.x = self.features.gather(mb.input_nodes, owner=mb.node_owner)
        check_part_rows(mb.x, mb.input_nodes, mb.node_owner, self.labels.part)
        mb.y = self.labels[mb.seeds]
        return mb


class PartSeedBatches:
    """:class:`~sparsetrain.sampling.SeedBatches`'s interface over :func:`rank_batches`: a rank's keyed batches of a
    split, as many on every rank."""

    def __init__(self, part: Partition, split: str, batch_size: int, *, seed: int, shuffle: bool) -> None:
        self.part, self.split = part, split
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle
        self.drop_last, self.world_size = False, part.num_parts
        # what a checkpoint records is the whole split's size, the same on every rank (inputs() has this rank's seeds)
        self.seeds = range(sum(part_sizes(part.manifest, split)))

    def inputs(self, epoch: int | None = None):
        return rank_batches(self.part, self.split, self.batch_size, seed=self.seed, epoch=epoch or 0,
                            shuffle=self.shuffle)

    def batches(self, epoch: int | None = None) -> list[torch.Tensor]:
        return [inp.seeds for inp in self.inputs(epoch)]

    def __len__(self) -> int:
        return batches_per_epoch(self.part, self.split, self.batch_size)


class PartLoader(Loader):
    """The loader of one part: :class:`PartSeedBatches` in place of the seed batches, :class:`FetchWithOwners` in
    place of the fetch stage; the sample and copy stages, prefetching and stats are the loader's."""

    def __init__(self, part: Partition, split: str, sampler, features, *, batch_size: int, seed: int, shuffle: bool,
                 device) -> None:
        labels = GlobalLabels(part)
        super().__init__(sampler, features, labels, part.split_global(split), batch_size=batch_size, shuffle=shuffle,
                         device=device, seed=seed)
        self.seed_batches = PartSeedBatches(part, split, batch_size, seed=seed, shuffle=shuffle)
        self.fetch_stage = FetchWithOwners(features, labels)
        self.stages = [self.sample_stage, self.fetch_stage, self.device_stage]


def padded_cross_entropy(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy; a padding batch (no seeds) is a zero loss that still reaches every parameter, so its rank joins
    DDP's gradient all-reduce."""
    if len(target):
        return F.cross_entropy(out, target)
    return out.sum() * 0.0


def cache_rows(part: Partition, cache_gb: float) -> int:
    """Halo rows to cache: ``--cache-gb`` worth of rows when given, else ``HALO_CACHE_FRACTION`` of the halo."""
    if cache_gb > 0:
        row_bytes = part.features.row_bytes
        return int(cache_gb * 2**30 // max(row_bytes, 1))
    return int(len(part.halo_owner) * HALO_CACHE_FRACTION)


def partitioned_parts(settings: TrainSettings, ctx: DistContext):
    """``(run, loader, model, evaluate, task)`` of a run on a partitioned folder (the caller builds the Trainer)."""
    refuse_unsupported(settings)
    folder = settings.data.path
    # this rank's part checked as `train` checks a dataset: shapes and sizes of every array, the small ones' sha256;
    # --verify: every array's sha256 and the structure
    part = load_partition(folder, ctx.rank, verify=settings.data.verify, arrays="small")
    if part.num_parts != ctx.world_size:
        raise PartitionedRunError(f"{folder}: has {part.num_parts} parts but {ctx.world_size} ranks run; run one rank "
                                  f"per part (torchrun --nproc-per-node {part.num_parts})")
    check_part_contents(part)
    run = plan(settings, _part_meta(part), ctx.device, ctx.world_size)
    batch_size, seed = run.sampling.batch_size, run.run.seed
    steps = batches_per_epoch(part, "train", batch_size)
    # every rank's checkpoint record names the partitioned folder, not its own part, so any rank resumes rank 0's
    record = {**run.record, "dataset": {"path": str(folder), "sha256": part.manifest["checksum"]}}
    run = replace(run, optim=replace(run.optim, epochs=settings.optim.epochs or auto_epochs(steps)), record=record)
    check_same_settings(rank_settings(settings, run, part, steps), ctx)
    group = new_group() if ctx.enabled else None  # apart from DDP's: the loader thread's exchanges never interleave
    fanouts = run.sampling.fanouts
    sampler = DistNeighborSampler(part, fanouts, seed=seed, group=group)
    features = PartitionedFeatures(part, group=group, cache_rows=cache_rows(part, settings.features.cache_gb))
    loader = PartLoader(part, "train", sampler, features, batch_size=batch_size, seed=seed, shuffle=True,
                        device=run.device)
    torch.manual_seed(seed)  # as run.train does; DDP then hands rank 0's initial weights to every rank
    model = _model(part, run)
    eval_sampler = DistNeighborSampler(part, fanouts, seed=seed + 1, group=group)
    evaluate = part_evaluator(part, eval_sampler, features, batch_size, run.device, group)
    return run, loader, model, evaluate, Task(loss_fn=padded_cross_entropy)


def _model(part: Partition, run: RunPlan) -> torch.nn.Module:
    extra = {k: v for k, v in MODEL_DEFAULTS.get(run.model.name, {}).items()
             if k not in ("lr", "weight_decay", "hidden")}
    in_dim = int(part.features.row_shape.numel())
    return build_model(run.model.name, in_dim, run.model.hidden, part.dataset.num_classes,
                       run.sampling.fanouts.num_hops, run.model.dropout, **extra)


def part_evaluator(part: Partition, sampler, features, batch_size: int, device, group):
    """``evaluate(model) -> {"val_acc", "test_acc"}``: each rank's owned split nodes on sampled blocks (padded to one
    batch count), correct and total summed over the ranks."""
    loaders = {name: PartLoader(part, name, sampler, features, batch_size=batch_size, seed=0, shuffle=False,
                                device=device)
               for name in ("val", "test") if name in part.dataset.split}
    # all_reduce_sum moves the CPU counts to the GPU for an NCCL group (NCCL has no CPU tensors)
    return loaders_evaluator(loaders, reduce=lambda counts: counts.copy_(all_reduce_sum(counts, group)))
