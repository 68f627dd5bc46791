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
from sparsetrain.datasets.format import NODE
from sparsetrain.distributed import DistNeighborSampler, PartitionedFeatures, batches_per_epoch, rank_batches
from sparsetrain.engine.dataset_meta import DatasetMeta, Table
from sparsetrain.engine.distributed import DistContext
from sparsetrain.engine.evaluate import loaders_evaluator
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.plan import MODEL_DEFAULTS, RunPlan, auto_epochs, plan
from sparsetrain.engine.settings import TYPED_MODELS, TrainSettings
from sparsetrain.engine.stages.fetch import FetchFeatures, check_finite
from sparsetrain.engine.trainer import Task
from sparsetrain.errors import SettingError
from sparsetrain.nn.models import build_model
from sparsetrain.partition import load_partition
from sparsetrain.partition.load import Partition, part_sizes
from sparsetrain.partition.manifest import MANIFEST

MODELS = ("sage", "gcn", "gat")
HALO_CACHE_FRACTION = 0.25
"""Without ``--cache-gb``: the share of a part's halo rows kept locally (the most-drawn ones)."""


class PartitionedRunError(SettingError):
    """A setting a partitioned run cannot honour yet."""


def is_partitioned(path) -> bool:
    """Whether ``--data`` names a partitioned folder (it has ``sparsetrain partition``'s manifest)."""
    return path is not None and (Path(path) / MANIFEST).is_file()


def refuse_unsupported(settings: TrainSettings) -> None:
    """One line for every setting a partitioned run does not support yet."""
    refused = [
        (settings.data.task != "node", f"--task {settings.data.task}", "node classification only"),
        (settings.sampling.temporal, "--temporal", "temporal sampling is not distributed yet"),
        (settings.sampling.fuse_last_hop, "--fuse-last-hop", "the owners draw a part's last hop; drop it"),
        (settings.features.placement != "auto", f"--features {settings.features.placement}",
         "a part's features are its own rows plus a cache of halo rows; drop --features"),
        (settings.model.name not in (None, *MODELS, *TYPED_MODELS), f"--model {settings.model.name}",
         f"choose one of {', '.join(MODELS + tuple(TYPED_MODELS))}"),
        (settings.run.eval == "full", "--eval full", "a partitioned run evaluates on sampled batches; pass --eval "
                                                     "sampled or auto"),
    ]
    for bad, what, fix in refused:
        if bad:
            raise PartitionedRunError(f"{what}: not supported on a partitioned folder ({settings.data.path}); {fix}")


def _part_meta(part: Partition) -> DatasetMeta:
    """The part as the planner reads it: its features are the part's owned rows; a typed part's node counts are the
    whole graph's (a type without features is embedded by its global ids)."""
    features = {t: Table(rows.shape[1], rows.nbytes, rows.row_bytes) for t, rows in part.features_by_type.items()}
    meta = replace(DatasetMeta.of(part.dataset), features=features)
    if part.is_typed:
        meta = replace(meta, num_nodes=dict(part.manifest["dataset"]["node_types"]))
    return meta


class GlobalLabels:
    """A part's labels (of its target type) indexed by global ids of nodes it owns (the batches' seeds; typed: ids
    within the target type)."""

    def __init__(self, part: Partition) -> None:
        target = part.target_type if part.is_typed else NODE
        self.part, self.labels, self.node_type = part, part.dataset.labels_by_type[target], target

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.labels[self.part.to_local(ids.cpu(), self.node_type if self.part.is_typed else None)]


class FetchWithOwners(FetchFeatures):
    """The fetch stage handing each store its input nodes' owners (``mb.node_owner``, by node type on a typed part,
    where a type without features gets its global ids as ``x``, for an embedding)."""

    def __call__(self, mb):
        if isinstance(mb.input_nodes, dict):
            mb.x = {}
            for t, ids in mb.input_nodes.items():  # the same types in the same order on every rank: collective
                store = self.features.get(t)
                if store is None:
                    mb.x[t] = ids
                    continue
                mb.x[t] = store.gather(ids, owner=mb.node_owner[t])
                check_finite(mb.x[t], ids, store)
        else:
            mb.x = self.features.gather(mb.input_nodes, owner=mb.node_owner)
            check_finite(mb.x, mb.input_nodes, self.features)
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


def cache_rows(part: Partition, cache_gb: float, node_type: str | None = None) -> int:
    """Halo rows of ``node_type`` to cache: ``--cache-gb`` worth of rows when given (a typed part: split by the types'
    feature bytes), else ``HALO_CACHE_FRACTION`` of the type's halo."""
    t = part.types.index(node_type)
    if cache_gb > 0:
        rows = part.features_by_type[part.types.node_types[t]]
        share = rows.nbytes / max(1, sum(f.nbytes for f in part.features_by_type.values()))
        return int(cache_gb * share * 2**30 // max(rows.row_bytes, 1))
    return int(int(part.types.num_halo[t]) * HALO_CACHE_FRACTION)


def part_features(part: Partition, group, cache_gb: float):
    """The part's :class:`PartitionedFeatures`: the one store of a homogeneous part, a store per node type with
    features of a typed one (built in the same order on every rank: construction is collective)."""
    if not part.is_typed:
        return PartitionedFeatures(part, group=group, cache_rows=cache_rows(part, cache_gb))
    return {t: PartitionedFeatures(part, group=group, cache_rows=cache_rows(part, cache_gb, t), node_type=t)
            for t in part.types.node_types if t in part.features_by_type}


def partitioned_parts(settings: TrainSettings, ctx: DistContext, typed_model=None):
    """``(run, loader, model, evaluate, task)`` of a run on a partitioned folder (the caller builds the Trainer).
    ``typed_model(meta, model_settings, layers, target_type)``: how a typed part's model is built (run.py passes the
    one-process builder, so both build the plan's typed model alike)."""
    refuse_unsupported(settings)
    folder = settings.data.path
    part = load_partition(folder, ctx.rank)
    if part.num_parts != ctx.world_size:
        raise PartitionedRunError(f"{folder}: has {part.num_parts} parts but {ctx.world_size} ranks run; run one rank "
                                  f"per part (torchrun --nproc-per-node {part.num_parts})")
    if settings.data.target_type not in (None, part.target_type if part.is_typed else None):
        raise PartitionedRunError(f"--target-type {settings.data.target_type}: not supported on a partitioned folder "
                                  f"({folder}); its parts hold the splits of node type {part.target_type!r}, drop "
                                  "--target-type")
    run = plan(settings, _part_meta(part), ctx.device, ctx.world_size)
    batch_size, seed = run.sampling.batch_size, run.run.seed
    steps = batches_per_epoch(part, "train", batch_size)
    # every rank's checkpoint record names the partitioned folder, not its own part, so any rank resumes rank 0's
    record = {**run.record, "dataset": {"path": str(folder), "sha256": part.manifest["checksum"]}}
    run = replace(run, optim=replace(run.optim, epochs=settings.optim.epochs or auto_epochs(steps)), record=record)
    group = new_group() if ctx.enabled else None  # apart from DDP's: the loader thread's exchanges never interleave
    fanouts = run.sampling.fanouts
    sampler = DistNeighborSampler(part, fanouts, seed=seed, group=group)
    features = part_features(part, group, settings.features.cache_gb)
    loader = PartLoader(part, "train", sampler, features, batch_size=batch_size, seed=seed, shuffle=True,
                        device=run.device)
    torch.manual_seed(seed)  # as run.train does; DDP then hands rank 0's initial weights to every rank
    model = _model(part, run, typed_model)
    eval_sampler = DistNeighborSampler(part, fanouts, seed=seed + 1, group=group)
    evaluate = part_evaluator(part, eval_sampler, features, batch_size, run.device, group)
    return run, loader, model, evaluate, Task(loss_fn=padded_cross_entropy)


def _model(part: Partition, run: RunPlan, typed_model) -> torch.nn.Module:
    if part.is_typed:  # the typed model the plan chose, built as a one-process run builds it
        if typed_model is None:
            raise PartitionedRunError(f"{part.path}: a typed part's model needs the builder of sparsetrain.engine.run "
                                      "(train through `sparsetrain train` or run.train)")
        return typed_model(_part_meta(part), run.model, run.sampling.fanouts.num_hops, part.target_type)
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
