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
from sparsetrain.engine.plan import RunPlan, model_options, plan
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.engine.stages.fetch import FetchFeatures, check_finite
from sparsetrain.engine.trainer import Task
from sparsetrain.errors import SettingError
from sparsetrain.nn.models import build_model
from sparsetrain.partition import load_partition
from sparsetrain.partition.load import Partition, part_sizes
from sparsetrain.partition.manifest import MANIFEST


def is_partitioned(path) -> bool:
    """Whether ``--data`` names a partitioned folder (it has ``sparsetrain partition``'s manifest)."""
    return path is not None and (Path(path) / MANIFEST).is_file()


def part_meta(part: Partition) -> DatasetMeta:
    """The part as the plan reads it: the folder (its manifest's checksum the contents a checkpoint records), the
    part's graph, its owned rows as its features (by node type), the parts' train sizes and this part's halo by node
    type; a typed part's node counts are the whole graph's (a type without features is embedded by its global ids)."""
    features = {t: FeatureTable(rows.shape[1], rows.nbytes, rows.row_bytes)
                for t, rows in part.features_by_type.items()}
    types = part.types.node_types if part.is_typed else (NODE,)
    halo = {t: int(part.types.num_halo[i]) for i, t in enumerate(types)} if part.is_typed else {
        NODE: len(part.halo_owner)}
    meta = replace(DatasetMeta.of(part.dataset), path=Path(part.path), meta_sha256=part.manifest["checksum"],
                   features=features, parts=PartsMeta(part.num_parts, tuple(part_sizes(part.manifest, "train")), halo))
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


def part_features(part: Partition, group, cache_rows: dict[str, int]):
    """The part's :class:`PartitionedFeatures`: the one store of a homogeneous part, a store per node type with
    features of a typed one (built in the same order on every rank: construction is collective), each keeping the
    plan's ``cache_rows`` of its type's halo."""
    if not part.is_typed:
        return PartitionedFeatures(part, group=group, cache_rows=cache_rows[NODE])
    return {t: PartitionedFeatures(part, group=group, cache_rows=cache_rows[t], node_type=t)
            for t in part.types.node_types if t in part.features_by_type}


def partitioned_parts(settings: TrainSettings, ctx: DistContext, typed_model=None):
    """``(run, loader, model, evaluate, task)`` of a run on a partitioned folder (the caller builds the Trainer),
    planned by :func:`~sparsetrain.engine.plan.plan` from the part's description (:func:`part_meta`).
    ``typed_model(meta, model_settings, layers, target_type)``: how a typed part's model is built (run.py passes the
    one-process builder, so both build the plan's typed model alike)."""
    # this rank's part checked as `train` checks a dataset: shapes and sizes of every array, the small ones' sha256;
    # --verify: every array's sha256 and the structure
    part = load_partition(settings.data.path, ctx.rank, verify=settings.data.verify, arrays="small")
    check_part_contents(part)
    run = plan(settings, part_meta(part), ctx.device, ctx.world_size)
    batch_size, seed = run.sampling.batch_size, run.run.seed
    check_same_settings(rank_settings(settings, run, part, batches_per_epoch(part, "train", batch_size)), ctx)
    group = new_group() if ctx.enabled else None  # apart from DDP's: the loader thread's exchanges never interleave
    fanouts = run.sampling.fanouts
    sampler = DistNeighborSampler(part, fanouts, seed=seed, group=group)
    features = part_features(part, group, run.halo_cache_rows)
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
            raise SettingError(f"{part.path}: a typed part's model needs the builder of sparsetrain.engine.run (train "
                               "through `sparsetrain train` or run.train)")
        return typed_model(part_meta(part), run.model, run.sampling.fanouts.num_hops, part.target_type)
    in_dim = int(part.features.row_shape.numel())
    return build_model(run.model.name, in_dim, run.model.hidden, part.dataset.num_classes,
                       run.sampling.fanouts.num_hops, run.model.dropout,
                       **model_options(run.model.name, run.model.heads))


def part_evaluator(part: Partition, sampler, features, batch_size: int, device, group):
    """``evaluate(model) -> {"val_acc", "test_acc"}``: each rank's owned split nodes on sampled blocks (padded to one
    batch count), correct and total summed over the ranks."""
    loaders = {name: PartLoader(part, name, sampler, features, batch_size=batch_size, seed=0, shuffle=False,
                                device=device)
               for name in ("val", "test") if name in part.dataset.split}
    # all_reduce_sum moves the CPU counts to the GPU for an NCCL group (NCCL has no CPU tensors)
    return loaders_evaluator(loaders, reduce=lambda counts: counts.copy_(all_reduce_sum(counts, group)))
