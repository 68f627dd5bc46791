"""``sparsetrain train --data DIR`` on a partitioned folder (``sparsetrain partition``'s output): one part per rank.

Rank ``r`` opens part ``r`` (:func:`~sparsetrain.partition.load_partition`), samples its own train nodes with
:class:`~sparsetrain.partitioned.DistNeighborSampler` over :func:`~sparsetrain.partitioned.global_rank_batches`
(step i of every rank: its own seeds of the one-process run's batch i, under that batch's key, so the ranks' batches
together are the one-process batch for the same seed; ``--batch-size`` is a rank's, the one-process batch is
``--batch-size`` x world size), reads features through
:class:`~sparsetrain.partitioned.PartitionedFeatures` and trains with DDP through the same
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
from sparsetrain.datasets.format import NODE
from sparsetrain.engine.dataset_meta import DatasetMeta, FeatureTable, PartsMeta
from sparsetrain.engine.distributed import DistContext
from sparsetrain.engine.evaluate import loaders_evaluator
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.partitioned_checks import (
    check_part_contents,
    check_part_rows,
    check_same_settings,
    rank_settings,
)
from sparsetrain.engine.plan import plan
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.engine.stages.fetch import FetchFeatures
from sparsetrain.engine.stages.sample import Sample
from sparsetrain.engine.trainer import Task, node_forward
from sparsetrain.partition import load_partition
from sparsetrain.partition.load import Partition, part_sizes
from sparsetrain.partition.manifest import MANIFEST
from sparsetrain.partitioned import DistNeighborSampler, PartitionedFeatures, global_split
from sparsetrain.partitioned.seeds import global_batch_size, global_batches_per_epoch, global_rank_batches
from sparsetrain.sampling.minibatch import by_type


def is_partitioned(path) -> bool:
    """Whether ``--data`` names a partitioned folder (it has ``sparsetrain partition``'s manifest)."""
    return path is not None and (Path(path) / MANIFEST).is_file()


def part_meta(part: Partition) -> DatasetMeta:
    """The part as the plan reads it: the folder (its manifest's checksum the contents a checkpoint records), the
    part's graph, its owned rows as its features (by node type), the parts' train sizes and this part's halo by node
    type; its node counts are the whole graph's (a typed part's type without features is embedded by its global
    ids)."""
    features = {t: FeatureTable(rows.shape[1], rows.nbytes, rows.row_bytes)
                for t, rows in part.features_by_type.items()}
    halo = {t: int(part.types.num_halo[i]) for i, t in enumerate(part.types.node_types)}
    whole = part.manifest["dataset"]
    return replace(DatasetMeta.of(part.dataset), path=Path(part.path), meta_sha256=part.manifest["checksum"],
                   num_nodes=dict(whole.get("node_types") or {NODE: whole["num_nodes"]}), features=features,
                   parts=PartsMeta(part.num_parts, tuple(part_sizes(part.manifest, "train")), halo))


class GlobalLabels:
    """A part's labels (of its target type) indexed by global ids of nodes it owns (the batches' seeds; typed: ids
    within the target type)."""

    def __init__(self, part: Partition) -> None:
        target = part.target_type
        self.part, self.labels, self.node_type = part, part.dataset.labels_by_type[target], target

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.labels[self.part.to_local(ids.cpu(), self.node_type)]


class FetchWithOwners(FetchFeatures):
    """The fetch stage handing each store its input nodes' owners (``mb.node_owner``, by node type on a typed part,
    where a type without features gets its global ids as ``x``, for an embedding)."""

    def __call__(self, mb):
        x, owners = {}, by_type(mb.node_owner, NODE)
        for t, ids in mb.input_nodes_by_type.items():  # the same types in the same order on every rank: collective
            store = self._stores.get(t)
            if store is None:
                x[t] = ids
                continue
            x[t] = store.gather(ids, owner=owners[t])
            check_part_rows(x[t], ids, owners[t], self.labels.part, t)
        mb.x_by_type = x
        mb.y = self.labels[mb.seeds]
        return mb


class PartSeedBatches:
    """:class:`~sparsetrain.sampling.SeedBatches`'s interface over
    :func:`~sparsetrain.partitioned.global_rank_batches`: a rank's shares of the one-process epoch's batches of a split
    (``batch_size`` a rank, ``batch_size * world size`` a one-process batch), as many on every rank. Construction is
    collective over ``group`` (one all-gather of the split's ids)."""

    def __init__(self, part: Partition, split: str, batch_size: int, *, seed: int, shuffle: bool, group=None) -> None:
        self.part, self.split = part, split
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle
        self.drop_last, self.world_size = False, part.num_parts
        self.split_ids = global_split(part, split, group)
        self.owned = part.split_global(split).to(torch.int64)
        # what a checkpoint records is the whole split's size, the same on every rank (inputs() has this rank's seeds)
        self.seeds = range(len(self.split_ids))

    def inputs(self, epoch: int | None = None):
        return global_rank_batches(self.part, self.split_ids, self.owned, self.batch_size, seed=self.seed,
                                   epoch=epoch or 0, shuffle=self.shuffle)

    def batches(self, epoch: int | None = None) -> list[torch.Tensor]:
        return [inp.seeds for inp in self.inputs(epoch)]

    def global_size(self, key: int) -> int:
        """The seeds of the one-process batch under ``key`` (every rank's share together)."""
        return global_batch_size(key, len(self.split_ids), self.batch_size, self.world_size)

    def __len__(self) -> int:
        return global_batches_per_epoch(len(self.split_ids), self.batch_size, self.world_size)


class ShareSample(Sample):
    """The sample stage marking each batch with its one-process batch's seed count (``mb.global_size``), which the
    loss (:class:`GlobalBatchLoss`) divides by."""

    def __init__(self, sampler, seed_batches: PartSeedBatches) -> None:
        super().__init__(sampler)
        self.seed_batches = seed_batches

    def __call__(self, inp):
        mb = super().__call__(inp)
        mb.global_size = self.seed_batches.global_size(inp.key)
        return mb


class PartLoader(Loader):
    """The loader of one part: :class:`PartSeedBatches` in place of the seed batches, :class:`ShareSample` and
    :class:`FetchWithOwners` in place of the sample and fetch stages; the copy stage, prefetching and stats are the
    loader's. Construction is collective over ``group``."""

    def __init__(self, part: Partition, split: str, sampler, features, *, batch_size: int, seed: int, shuffle: bool,
                 device, group=None) -> None:
        labels = GlobalLabels(part)
        super().__init__(sampler, features, labels, part.split_global(split), batch_size=batch_size, shuffle=shuffle,
                         device=device, seed=seed)
        self.seed_batches = PartSeedBatches(part, split, batch_size, seed=seed, shuffle=shuffle, group=group)
        self.sample_stage = ShareSample(sampler, self.seed_batches)
        self.fetch_stage = FetchWithOwners(features, labels)
        self.stages = [self.sample_stage, self.fetch_stage, self.device_stage]


class GlobalBatchLoss:
    """The partitioned task's forward and loss: a rank's cross-entropy summed over its share and divided by the
    one-process batch's size over the world size, so DDP's mean of the ranks' gradients is the one-process batch's
    mean-loss gradient. A padding share (no seeds) is a zero loss that still reaches every parameter, so its rank
    joins DDP's gradient all-reduce. ``forward`` and ``loss`` run one after the other on the training thread."""

    def __init__(self, world_size: int) -> None:
        self.world_size, self.scale = world_size, 1.0

    def forward(self, model: torch.nn.Module, mb) -> tuple[torch.Tensor, torch.Tensor]:
        share = getattr(mb, "global_size", None)
        self.scale = len(mb.y) * self.world_size / share if share else 1.0
        return node_forward(model, mb)

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return padded_cross_entropy(out, target) * self.scale


def padded_cross_entropy(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy; a padding batch (no seeds) is a zero loss that still reaches every parameter, so its rank joins
    DDP's gradient all-reduce."""
    if len(target):
        return F.cross_entropy(out, target)
    return out.sum() * 0.0


def part_features(part: Partition, group, cache_rows: dict[str, int]):
    """The part's :class:`PartitionedFeatures`, one store per node type with features (built in the same order on
    every rank: construction is collective), each keeping the plan's ``cache_rows`` of its type's halo."""
    return {t: PartitionedFeatures(part, group=group, cache_rows=cache_rows[t], node_type=t)
            for t in part.types.node_types if t in part.features_by_type}


def partitioned_parts(settings: TrainSettings, ctx: DistContext, node_model):
    """``(run, loader, model, evaluate, task)`` of a run on a partitioned folder (the caller builds the Trainer),
    planned by :func:`~sparsetrain.engine.plan.plan` from the part's description (:func:`part_meta`).
    ``node_model(meta, model_settings, layers, target_type)``: how the model is built (run.py passes the one-process
    builder, so both build the plan's model alike)."""
    # this rank's part checked as `train` checks a dataset: shapes and sizes of every array, the small ones' sha256;
    # --verify: every array's sha256 and the structure
    part = load_partition(settings.data.path, ctx.rank, verify=settings.data.verify, arrays="small")
    check_part_contents(part)
    meta = part_meta(part)
    run = plan(settings, meta, ctx.device, ctx.world_size)
    batch_size, seed = run.sampling.batch_size, run.run.seed
    steps = global_batches_per_epoch(sum(part_sizes(part.manifest, "train")), batch_size, part.num_parts)
    check_same_settings(rank_settings(settings, run, part, steps), ctx)
    group = new_group() if ctx.enabled else None  # apart from DDP's: the loader thread's exchanges never interleave
    fanouts = run.sampling.fanouts
    sampler = DistNeighborSampler(part, fanouts, seed=seed, group=group)
    features = part_features(part, group, run.halo_cache_rows)
    loader = PartLoader(part, "train", sampler, features, batch_size=batch_size, seed=seed, shuffle=True,
                        device=run.device, group=group)
    torch.manual_seed(seed)  # as run.train does; DDP then hands rank 0's initial weights to every rank
    model = node_model(meta, run.model, run.sampling.fanouts.num_hops, part.target_type)  # as a one-process run
    eval_sampler = DistNeighborSampler(part, fanouts, seed=seed + 1, group=group)
    evaluate = part_evaluator(part, eval_sampler, features, batch_size, run.device, group)
    loss = GlobalBatchLoss(ctx.world_size)
    return run, loader, model, evaluate, Task(loss_fn=loss.loss, batch_forward=loss.forward)


def part_evaluator(part: Partition, sampler, features, batch_size: int, device, group):
    """``evaluate(model) -> {"val_acc", "test_acc"}``: each rank's shares of the one-process evaluation batches (its
    owned split nodes, as many batches on every rank) on sampled blocks, correct and total summed over the ranks."""
    loaders = {name: PartLoader(part, name, sampler, features, batch_size=batch_size, seed=0, shuffle=False,
                                device=device, group=group)
               for name in ("val", "test") if name in part.dataset.split}
    # all_reduce_sum moves the CPU counts to the GPU for an NCCL group (NCCL has no CPU tensors)
    return loaders_evaluator(loaders, reduce=lambda counts: counts.copy_(all_reduce_sum(counts, group)))
