"""One plan for a run: every decision and cross-field check of ``sparsetrain train``, made before anything is built.

:func:`plan` reads the settings, the dataset's description (a :class:`~sparsetrain.engine.dataset_meta.DatasetMeta`:
its types, counts, which arrays it has and their sizes; never a value of an array) and the run's device, and returns a
:class:`RunPlan`: the model and its defaults, the task, the node type trained on, where the features and the graph
live, the cache, the evaluation, the temporal rule, the epochs, the output paths (checked to be writable) and the
record a checkpoint keeps of the run. Every setting that cannot be honoured is refused here in one line, before a byte
is read or a step is taken; the builders of :mod:`sparsetrain.engine.run` then only follow the plan. A partitioned
folder is planned here too, from its part's description (``meta.parts``): what parts cannot do, its model, epochs and
halo cache (:mod:`sparsetrain.engine.partitioned` only builds).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch

from sparsetrain.datasets.applicable import TRAIN_RULES, TrainContext, refuse_inapplicable
from sparsetrain.datasets.format import EDGE, NODE, of_node_type, user_type_name
from sparsetrain.datasets.outputs import check_output_path
from sparsetrain.engine.dataset_meta import DatasetMeta
from sparsetrain.engine.host_memory import available_host_memory
from sparsetrain.engine.inference import layerwise_cost, sampled_cost
from sparsetrain.engine.run_log import csv_beside, foreign_csv
from sparsetrain.engine.settings import (
    TYPED_MODELS,
    CheckpointSettings,
    FeatureSettings,
    ModelSettings,
    OptimSettings,
    ReportSettings,
    RunSettings,
    SamplingSettings,
    TrainSettings,
    batch_record,
)
from sparsetrain.engine.static.shapes import StepShapes
from sparsetrain.errors import DatasetError, SettingError
from sparsetrain.nn.models import BLOCK_GNNS, MODELS
from sparsetrain.partitioned.seeds import global_batches_per_epoch
from sparsetrain.storage.residency import fits_on_gpu

MODEL_DEFAULTS = {
    "sage": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 128},
    "gcn": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 128},
    "gat": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 128, "heads": 4},
    # small and with strong input dropout: attention overfits few labels (Cora: 140) otherwise
    "gt": {"lr": 0.005, "weight_decay": 5e-3, "hidden": 64, "input_dropout": 0.8, "heads": 4},
    "rgcn": {"lr": 0.01, "weight_decay": 0.0, "hidden": 64},
    # MLPerf's R-GAT: 4 heads, hidden 512, lr 0.001; hidden 128 (its reference script's default) for CPUs
    "rgat": {"lr": 0.001, "weight_decay": 0.0, "hidden": 128, "heads": 4},
}
"""Per-model optimizer and size defaults (PyG's and DGL's Cora and products settings for the GNNs)."""
LINK_DEFAULTS = {"lr": 0.01, "weight_decay": 0.0, "hidden": 128}
"""``--task link`` defaults (PyG's link_pred example): weight decay shrinks the embeddings a dot product compares."""
AUTO_STEPS = 2000
AUTO_MAX_EPOCHS = 200
LINK_AUTO_STEPS = 750
"""``--task link`` epochs when ``--epochs`` is not given: about this many steps (Cora: 150 epochs); the best val AUC
epoch is reported."""

PINNED_HOST_FRACTION = 0.5  # of the host's free memory that a pinned copy of the features may take behind a GPU cache
EXACT_EVAL_MAX_NODES = 100_000  # below this both evaluations take seconds; the exact one is preferred
# a layer-wise edge costs ~16 sampled ones on 2 CPU cores (chunks re-gather their neighbors; RESULTS.md)
LAYERWISE_EDGE_COST = 16
HALO_CACHE_FRACTION = 0.25
"""A partitioned run without ``--cache-gb``: the share of a part's halo rows kept locally (the most-drawn ones)."""
RANDOM_SPLIT = (0.6, 0.8)
"""A typed dataset's node type without a split trains on a random 60/20/20 one (train below 0.6, val below 0.8)."""


class Refusal(NamedTuple):
    """A setting a kind of dataset cannot honour: ``applies(settings)``, then ``error`` with ``message`` (formatted
    with ``path``, the dataset, and ``settings``)."""

    applies: Callable[[TrainSettings], bool]
    error: type[Exception]
    message: str


@dataclass(frozen=True)
class Kind:
    """What differs between a homogeneous dataset and a typed one, the one table the plan reads (:func:`_check_types`
    picks the row once; the rest of the plan reads its fields, never the dataset's typed-ness)."""

    described: str
    """The dataset in messages."""
    models: tuple[str, ...]
    """The models that train it."""
    why: str
    """Why those models (in messages)."""
    default_model: str
    default_target: str | None
    """The node type trained on when neither ``--target-type`` nor the dataset names one."""
    random_split: bool
    """A target node type without the dataset's split trains on a random ``RANDOM_SPLIT`` (else it is refused)."""
    sampled_on_device: bool
    """The graph can be sampled on the GPU (the CUDA kernels read one edge type)."""
    refusals: tuple[Refusal, ...]
    """The settings this kind cannot honour, each refused in one line."""


_TYPED = "a typed dataset"
KINDS = {
    False: Kind(
        described="a homogeneous dataset (one node type and one edge type)", models=MODELS,
        why="one node type and one edge type", default_model="sage", default_target=NODE, random_split=False,
        sampled_on_device=True,
        refusals=(Refusal(lambda s: s.data.target_type is not None, DatasetError,
                          "--target-type {settings.data.target_type}: {path} is a homogeneous dataset (one node type); "
                          "drop --target-type"),)),
    True: Kind(
        described="a typed dataset", models=TYPED_MODELS, why="an R-GCN or R-GAT: one convolution per edge type",
        default_model="rgcn", default_target=None, random_split=True, sampled_on_device=False,
        refusals=(
            Refusal(lambda s: s.data.task == "link", DatasetError, "--task link: {path} is a typed (heterogeneous) "
                    "dataset; link prediction trains on homogeneous datasets made with --link-split"),
            Refusal(lambda s: s.run.step == "static", SettingError, "--step static pads GraphSAGE node classification "
                    f"batches of a homogeneous graph, not {_TYPED}; drop --step static"),
            Refusal(lambda s: s.sampling.fuse_last_hop, SettingError, "--fuse-last-hop feeds GraphSAGE's first layer "
                    f"in node classification on a homogeneous graph, not {_TYPED}; drop --fuse-last-hop"),
            Refusal(lambda s: s.features.placement == "sharded", SettingError, "--features sharded: typed datasets are "
                    "not sharded yet; pass --features mmap, disk, memory, device or pinned"),
            Refusal(lambda s: s.run.eval == "full", SettingError, "--eval full: typed datasets evaluate on sampled "
                    "batches (no layer-wise R-GCN inference yet); pass --eval sampled or auto"),
        )),
}
"""The two kinds of dataset, keyed by whether the dataset has types (``DatasetMeta``'s one question)."""


@dataclass(frozen=True)
class RunPlan:
    """Every decision of one run; the settings parts in it are resolved (no ``None`` or ``auto`` left that the run
    fills in later)."""

    device: torch.device
    world_size: int
    task: str
    """``node`` or ``link``."""
    target_type: str | None
    """The node type trained on (a homogeneous dataset's: ``_N``); None: the link task."""
    random_split: bool
    """A typed dataset's target type without the dataset's split: a random 60/20/20 one, drawn from the seed."""
    model: ModelSettings
    """The model chosen (``name`` and ``hidden`` filled in)."""
    optim: OptimSettings
    """``lr``, ``weight_decay`` and ``epochs`` filled in."""
    sampling: SamplingSettings
    """``exclude`` (link task) and ``temporal_strategy`` (temporal) resolved."""
    features: FeatureSettings
    """``placement`` resolved (never ``auto``)."""
    graph_on_device: bool
    """The sampler's graph is copied to the GPU (sampling runs there)."""
    times: str | None
    """``--temporal``: the times the sampler reads, ``edge_time`` or ``node_time``; None: not temporal."""
    full_eval: bool
    """Evaluate with exact layer-wise inference rather than on sampled batches."""
    clusters: bool
    """The model (gt) reads a cluster per node."""
    run: RunSettings
    checkpoint: CheckpointSettings
    report: ReportSettings
    record: dict
    """What a checkpoint records of the run (:func:`~sparsetrain.engine.settings.batch_record` and the dataset's
    contents); a resume whose record differs is refused."""
    step_shapes: StepShapes | None = None
    """``--step static``: the padded shapes of every batch; None: the eager step on the batches as sampled."""
    halo_cache_rows: dict[str, int] | None = None
    """A partitioned run: the halo rows of each node type each rank keeps locally; None: not partitioned."""
    capture: str | None = None
    """What ``--step static`` captures as CUDA graphs (:func:`capture_plan`): ``"sampling+step"``, ``"step"``, or None
    (nothing: the eager step, or a CPU's static step, run eagerly)."""


def auto_epochs(steps_per_epoch: int, steps: int = AUTO_STEPS) -> int:
    """Epochs when ``--epochs`` is not given: about ``AUTO_STEPS`` optimizer steps, at most ``AUTO_MAX_EPOCHS`` epochs.

    A fixed epoch count means 1 step an epoch on a small train set (Cora: 140 seeds) and hundreds on a large one
    (products: 193); counting steps gives both enough training (Cora 200 epochs, arxiv 23, products 11), and the
    reported test accuracy is the one at the best validation epoch."""
    return max(1, min(AUTO_MAX_EPOCHS, math.ceil(steps / max(steps_per_epoch, 1))))


def plan(settings: TrainSettings, meta: DatasetMeta, device: torch.device, world_size: int = 1) -> RunPlan:
    """The plan of ``settings`` on the dataset ``meta`` describes and ``device`` (see the module); raises a one-line
    :class:`~sparsetrain.errors.SettingError` or :class:`~sparsetrain.errors.DatasetError` for any setting the run
    cannot honour."""
    data, sampling = settings.data, settings.sampling
    refuse_inapplicable(TRAIN_RULES, TrainContext(settings, partitioned=meta.parts is not None))
    check_outputs(settings.checkpoint, settings.report, meta.path)
    if meta.parts is not None:
        _check_partitioned(settings, meta, world_size)
    if data.task == "link" and sampling.temporal:
        raise SettingError("--temporal samples node classification batches; --task link does not sample "
                           "temporally yet: drop one of them")
    kind = _check_types(settings, meta)
    model = _model(kind, settings.model, data.task)
    target, random_split = _target(meta, kind, data.target_type, model.name) if data.task == "node" else (None, False)
    times = _times(meta, sampling, model.name, target)
    if times is not None:
        sampling = replace(sampling, temporal_strategy=sampling.temporal_strategy or "uniform")
    if data.task == "link":
        sampling = replace(sampling, exclude=_exclude(sampling.exclude, meta.directed))
    features = _features(meta, settings.features, device)
    graph_on_device = (kind.sampled_on_device and times is None and meta.parts is None
                       and _graph_fits(meta.graph_bytes, device))
    _check_fuse_last_hop(sampling, data.task, meta, model, features, times, device, graph_on_device)
    train_seeds = _train_seed_count(meta, data.task, target, random_split)
    optim = _optim(settings.optim, data.task, model, _steps_per_epoch(meta, train_seeds, sampling.batch_size,
                                                                      world_size))
    # recorded as resolved, but --exclude as given: "auto" depends only on the dataset, whose contents are compared
    # (and sparsetrain 0.1 recorded it so); a homogeneous dataset's one node type, which has no name, as none
    recorded = replace(settings, sampling=replace(sampling, exclude=settings.sampling.exclude), model=model,
                       optim=optim, features=features,
                       data=replace(data, target_type=user_type_name(target)))
    shapes = _step_shapes(settings.run, meta, data.task, model, sampling, world_size)
    capture = capture_plan(shapes, device, features.placement if not features.cache_gb else "cached", graph_on_device)
    return RunPlan(
        device=device, world_size=world_size, task=data.task, target_type=target, random_split=random_split,
        model=model, optim=optim, sampling=sampling, features=features,
        graph_on_device=graph_on_device,
        times=times,
        full_eval=data.task == "node" and meta.parts is None and _full_eval(meta, settings.run.eval, model.name,
                                                                             sampling),
        clusters=model.name == "gt", run=settings.run, checkpoint=settings.checkpoint, report=settings.report,
        record={**batch_record(recorded),
                "dataset": {"path": str(Path(meta.path).absolute()), "sha256": meta.meta_sha256}},
        step_shapes=shapes,
        capture=capture,
        halo_cache_rows=None if meta.parts is None else _halo_cache_rows(meta, features.cache_gb),
    )


# ---------------------------------------------------------------- outputs


def check_outputs(checkpoint: CheckpointSettings, report: ReportSettings, dataset: Path | None = None) -> None:
    """Every output path can be written before the run starts: ``--checkpoint-dir`` a folder (or one to create),
    ``--metrics-log`` and ``--summary-json`` files (or ones to create), each under a folder, never under a file, and
    none in the ``dataset`` folder (a summary written over its ``meta.json`` or a log appended to an array would
    destroy the dataset; checkpoints there would go with its next re-import)."""
    outputs = (("--checkpoint-dir", checkpoint.dir, True), ("--metrics-log", report.log, False),
               ("--summary-json", report.summary_json, False), ("--tensorboard", report.tensorboard, True))
    for flag, path, folder in outputs:
        if path is None:
            continue
        check_output_path(flag, path, inputs=(dataset,))  # the one rule: never into a data folder of any kind
        _check_writable(flag, path, folder=folder)
    if report.log is not None and foreign_csv(report.log) is not None:
        raise SettingError(f"--metrics-log {report.log}: its CSV twin {csv_beside(report.log)} (rewritten every "
                           "epoch) would replace a file that is not one; move that file or give the log another name")
    if report.log is not None and report.summary_json is not None and \
            Path(os.path.realpath(report.summary_json)) in {Path(os.path.realpath(p))
                                                            for p in (report.log, csv_beside(report.log))}:
        raise SettingError(f"--summary-json {report.summary_json}: is the metrics log or its CSV twin; give the "
                           "summary its own file")


def _check_writable(flag: str, path: Path, *, folder: bool) -> None:
    if path.exists():
        if path.is_dir() != folder:
            what = "not a folder" if folder else "a folder"
            raise SettingError(f"{flag} {path}: is {what}; give {'a folder' if folder else 'a file'} path")
        if not os.access(path, os.W_OK | (os.X_OK if folder else 0)):
            raise SettingError(f"{flag} {path}: is not writable; give a path you can write to")
        return
    existing = path.parent  # the nearest folder that exists: the run creates the rest
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SettingError(f"{flag} {path}: {existing} is a file, not a folder; give a path under a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SettingError(f"{flag} {path}: {existing} is not writable; give a path you can write to")


# ---------------------------------------------------------------- model and optimizer


def _check_types(settings: TrainSettings, meta: DatasetMeta) -> Kind:
    """The plan's one question of whether the dataset has types: its row of ``KINDS``, whose refusals (what needs one
    node type and one edge type on a typed dataset, ``--target-type`` on a homogeneous one) are raised in one line."""
    kind = KINDS[meta.is_typed]
    for refusal in kind.refusals:
        if refusal.applies(settings):
            raise refusal.error(refusal.message.format(path=meta.path, settings=settings))
    return kind


def _model(kind: Kind, model: ModelSettings, task: str) -> ModelSettings:
    """``--model`` (else the kind's default: sage, rgcn on a typed dataset) with its hidden size; one the kind of
    dataset cannot train is refused, never replaced by another."""
    name = model.name or kind.default_model
    if name not in kind.models:
        models = " or ".join(kind.models)
        raise SettingError(f"--model {name}: {kind.described} trains {models} ({kind.why}); drop --model or pass "
                           f"--model {models}")
    if task == "link" and name != "sage":
        raise SettingError(f"--task link trains the GraphSAGE encoder; drop --model {name}")
    hidden = model.hidden if model.hidden is not None else _defaults(task, name)["hidden"]
    default_heads = MODEL_DEFAULTS.get(name, {}).get("heads")
    if default_heads is None:
        if model.heads is not None:
            raise SettingError(f"--heads {model.heads}: --model {name} has no attention heads; drop --heads or pass "
                               "--model gat, gt or rgat")
        return replace(model, name=name, hidden=hidden)
    heads = model.heads if model.heads is not None else default_heads
    if hidden % heads:
        raise SettingError(f"--hidden {hidden} with --heads {heads}: the {name} model's attention heads split the "
                           f"hidden width; give a hidden size that is a multiple of {heads} (or fewer heads)")
    return replace(model, name=name, hidden=hidden, heads=heads)


def model_options(name: str, heads: int | None = None) -> dict:
    """The keywords :func:`~sparsetrain.nn.models.build_model` (or the R-GAT) takes for model ``name`` beyond its
    size: its ``MODEL_DEFAULTS`` other than ``lr``, ``weight_decay`` and ``hidden`` (gt's ``input_dropout``, the
    attention models' ``heads``), ``heads`` the plan's (``ModelSettings.heads``) when given."""
    options = {k: v for k, v in MODEL_DEFAULTS.get(name, {}).items() if k not in ("lr", "weight_decay", "hidden")}
    if heads is not None and "heads" in options:
        options["heads"] = heads
    return options


def _defaults(task: str, model: str) -> dict:
    return LINK_DEFAULTS if task == "link" else MODEL_DEFAULTS.get(model, MODEL_DEFAULTS["sage"])


def _optim(optim: OptimSettings, task: str, model: ModelSettings, steps_per_epoch: int) -> OptimSettings:
    """The model's defaults where ``lr`` / ``weight_decay`` are None, and the epochs: ``--epochs``, else about
    ``AUTO_STEPS`` (link: ``LINK_AUTO_STEPS``) optimizer steps of ``steps_per_epoch`` each."""
    defaults = _defaults(task, model.name)
    filled = {k: defaults[k] for k in ("lr", "weight_decay") if getattr(optim, k) is None}
    if optim.epochs is None:
        filled["epochs"] = auto_epochs(steps_per_epoch, LINK_AUTO_STEPS if task == "link" else AUTO_STEPS)
    return replace(optim, **filled)


def _steps_per_epoch(meta: DatasetMeta, train_seeds: int, batch_size: int, world_size: int) -> int:
    """Optimizer steps an epoch: a rank's share of the train seeds in batches; on parts, the one-process epoch's batches
    of ``batch_size`` x parts, whose shares every rank runs (:func:`~sparsetrain.partitioned.global_rank_batches`)."""
    if meta.parts is not None:
        return global_batches_per_epoch(sum(meta.parts.train_per_part), batch_size, meta.parts.num_parts)
    return -(-(train_seeds // world_size) // batch_size)


# ---------------------------------------------------------------- a partitioned folder


def _check_partitioned(settings: TrainSettings, meta: DatasetMeta, world_size: int) -> None:
    """What a run on a partitioned folder (``meta.parts``) cannot honour that depends on its parts (the flags that do
    not apply to parts at all are rows of ``TRAIN_RULES``), each refused in one line."""
    target = settings.data.target_type
    if target not in (None, meta.target_type):
        raise SettingError(f"--target-type {target}: not supported on a partitioned folder ({meta.path}); its parts "
                           f"hold the splits of node type {meta.target_type!r}: drop --target-type")
    if meta.parts.num_parts != world_size:
        raise SettingError(f"{meta.path}: has {meta.parts.num_parts} parts but {world_size} ranks run; run one rank "
                           f"per part (torchrun --nproc-per-node {meta.parts.num_parts})")


def _halo_cache_rows(meta: DatasetMeta, cache_gb: float) -> dict[str, int]:
    """Halo rows a rank keeps, by node type: ``--cache-gb`` worth of feature rows when given (split by the types'
    feature bytes), else ``HALO_CACHE_FRACTION`` of its halo of each type."""
    if cache_gb > 0:
        total = max(1, sum(t.nbytes for t in meta.features.values()))
        return {t: int(cache_gb * (table.nbytes / total) * 2**30 // max(table.row_bytes, 1))
                for t, table in meta.features.items()}
    return {t: int(rows * HALO_CACHE_FRACTION) for t, rows in meta.parts.halo_rows.items()}


def _step_shapes(run: RunSettings, meta: DatasetMeta, task: str, model: ModelSettings, sampling: SamplingSettings,
                 world_size: int) -> StepShapes | None:
    """``--step static``: every batch padded to the bounds from the batch size, the fanouts and the node count (with
    ``--fuse-last-hop``, every level but the fused input level)."""
    if run.step != "static":
        return None
    if task != "node" or model.name != "sage":
        what = "link prediction" if task != "node" else f"--model {model.name}"
        raise SettingError(f"--step static pads GraphSAGE node classification batches of a homogeneous graph, not "
                           f"{what}; drop --step static")
    if world_size > 1:
        raise SettingError(f"--step static runs one process (its captured step has no gradient all-reduce), not "
                           f"{world_size} ranks; drop --step static")
    padded = sampling.fanouts.as_list()[:-1] if sampling.fuse_last_hop else sampling.fanouts.as_list()
    if any(f < 0 for f in padded):
        fused = " (all but the fused last)" if sampling.fuse_last_hop else ""
        raise SettingError(f"--step static bounds each hop{fused} by its fanout; --fanout "
                           f"{sampling.fanouts.as_list()} samples all neighbours (-1) there: give counts")
    return StepShapes.bound(sampling.batch_size, sampling.fanouts, meta.num_nodes[NODE],
                            num_edges=meta.num_edges[EDGE], fuse_last_hop=sampling.fuse_last_hop)


def capture_plan(step_shapes: StepShapes | None, device: torch.device, placement: str,
                 graph_on_device: bool) -> str | None:
    """What a ``--step static`` run captures: on a GPU its step (forward, backward, optimizer) always, replayed each
    batch; with the graph, the features (``--features device``) and so the labels in GPU memory also each batch's
    sampling, into the step's buffers (``"sampling+step"``: no loader thread at all); else the loader's thread fills
    the buffers between replays, never inside a capture (``"step"``; every capture runs in thread-local mode). None
    off a GPU or for the eager step. A capture that then fails is an error naming why, never an eager run."""
    if step_shapes is None or device.type != "cuda":
        return None
    return "sampling+step" if graph_on_device and placement == "device" else "step"


def _check_fuse_last_hop(sampling: SamplingSettings, task: str, meta: DatasetMeta, model: ModelSettings,
                         features: FeatureSettings, times: str | None, device: torch.device,
                         graph_on_device: bool) -> None:
    """``--fuse-last-hop``: GraphSAGE's node classification step (eager or ``--step static``) on a homogeneous graph,
    the whole feature table readable where the graph is (host memory or a mapped file on a CPU, device memory on a
    GPU)."""
    if not sampling.fuse_last_hop:
        return
    what = ("link prediction" if task != "node" else f"--model {model.name}" if model.name != "sage"
            else "--temporal" if times else None)
    if what is not None:
        raise SettingError(f"--fuse-last-hop feeds GraphSAGE's first layer in node classification on a "
                           f"homogeneous graph, not {what}; drop --fuse-last-hop")
    on_gpu = device.type == "cuda"
    allowed = ("device",) if on_gpu else ("memory", "mmap")
    if features.placement not in allowed or features.cache_gb > 0 or (on_gpu and not graph_on_device):
        where = "--features device, the graph in GPU memory" if on_gpu else "--features memory or mmap"
        raise SettingError(f"--fuse-last-hop averages rows of the whole feature table where the graph is ({where}, "
                           f"no --cache-gb) but the features are {features.placement}; change --features or drop "
                           "--fuse-last-hop")


# ---------------------------------------------------------------- what is trained on


def _target(meta: DatasetMeta, kind: Kind, target_type: str | None, model: str) -> tuple[str, bool]:
    """The node type to train on (``--target-type``, else the dataset's, else the kind's: a homogeneous dataset's
    ``_N``) and whether it needs a random split (the kind's rule for a type without the dataset's split)."""
    target = target_type or meta.target_type or kind.default_target
    if target is None:
        raise DatasetError(f"{meta.path}: the dataset names no target node type; "
                           f"pass --target-type (one of {', '.join(meta.node_types)})")
    if target not in meta.num_nodes:
        raise DatasetError(f"--target-type {target}: {meta.path} has no such node type; "
                           f"choose one of {', '.join(meta.node_types)}")
    named = of_node_type(target, "", "the dataset")
    if target not in meta.num_classes:
        labelled = ", ".join(meta.num_classes) or "none"
        raise DatasetError(f"{meta.path}: {named} has no labels to train on (labelled types: {labelled}); re-import "
                           "with --labels, or on a typed dataset pass another --target-type")
    if meta.num_classes[target] is None and target == meta.target_type:
        raise DatasetError(f"{meta.path}: {named} has labels but no class count; re-import the dataset")
    if target not in meta.features and model not in TYPED_MODELS:  # the R-GCN / R-GAT embed a type without features
        raise DatasetError(f"{meta.path}: {named} has no features, which --model {model} reads; re-import with "
                           "--features")
    random_split = target != meta.target_type or "train" not in meta.split
    if random_split and not kind.random_split:
        raise DatasetError(f"{meta.path}: {named} has no train split, which training needs; re-import with a split "
                           "(--split, or train/val/test files)")
    return target, random_split


def _train_seed_count(meta: DatasetMeta, task: str, target: str | None, random_split: bool) -> int:
    if task == "link":
        if meta.link_train_edges is None:
            raise DatasetError(f"{meta.path}: --task link needs link splits; re-import with `sparsetrain preprocess "
                               "... --link-split 0.85,0.05,0.10`")
        if not meta.features:
            raise DatasetError(f"{meta.path}: --task link needs node features; re-import with --features")
        return meta.link_train_edges
    if random_split:
        return int(RANDOM_SPLIT[0] * meta.num_nodes[target])
    return meta.split["train"]


def _exclude(exclude: str, directed: bool) -> str:
    """``--exclude auto``: the seed edges' reverses too on a symmetric graph, else the seed edges only."""
    return exclude if exclude != "auto" else ("self" if directed else "reverse")


def _times(meta: DatasetMeta, sampling: SamplingSettings, model: str, target: str | None) -> str | None:
    """``--temporal``: the times the sampler reads (the dataset's edge times when it has them, else its node times);
    a seed's time is its node time, so the target type needs node times."""
    if not sampling.temporal:
        return None
    if not meta.node_time and not meta.edge_time:
        raise DatasetError(f"--temporal: {meta.path} stores no node or edge times; re-import it with `sparsetrain "
                           "preprocess ... --node-time FILE` (and --edge-time-column NAME for edge times)")
    if model == "gt":
        raise SettingError("--temporal with --model gt is not supported (its cluster attention spans the batch's "
                           "subgraphs); pass --model sage, gcn or gat")
    if target not in meta.node_time:
        raise DatasetError(f"--temporal: a seed's time is its node time, but {meta.path} has no node times for the "
                           f"nodes{of_node_type(target)}; re-import it with --node-time")
    return "edge_time" if meta.edge_time else "node_time"


# ---------------------------------------------------------------- where things live


def _fits_on_gpu(nbytes: int, device: torch.device) -> bool:
    """The residency rule the PyG drop-in shares (:func:`~sparsetrain.storage.residency.fits_on_gpu`)."""
    return fits_on_gpu(nbytes, torch.cuda.mem_get_info(device)[0])


def _graph_fits(nbytes: int, device: torch.device) -> bool:
    """The (homogeneous) graph of ``nbytes`` goes to the GPU when it fits: sampling then runs there."""
    return device.type == "cuda" and _fits_on_gpu(nbytes, device)


def _features(meta: DatasetMeta, features: FeatureSettings, device: torch.device) -> FeatureSettings:
    """Where the features live (``--features``, ``auto`` decided by :func:`placement`) and the cache in front of
    them, checked against the memory it would take and the rows it must hold."""
    tables = meta.features
    placement = _placement(sum(table.nbytes for table in tables.values()), features, device)
    if placement == "sharded":
        if features.cache_gb > 0:
            raise SettingError("--cache-gb cannot front sharded features (a cache hit would skip the collective the "
                               "other ranks wait in); drop one of them")
    if placement in ("device", "pinned") and device.type != "cuda":
        raise SettingError(f"--features {placement} needs a CUDA device (this run is on {device}); use --features "
                           "mmap or memory")
    if features.cache_gb > 0:
        features = replace(features, cache_gb=_check_cache(tables, features.cache_gb, device))
    return replace(features, placement=placement, cache_policy=features.cache_policy or "hybrid")


def _placement(nbytes: int, features: FeatureSettings, device: torch.device) -> str:
    """``--features auto``: on a GPU, the features in device memory when they fit, else in pinned host memory read
    zero-copy by the GPU; behind a GPU cache (``--cache-gb``), pinned host memory when it fits in what the host has
    free (GraphBolt's two levels: the cache's misses cross PCIe without a CPU gather), else memory-mapped; on a CPU,
    memory-mapped."""
    if features.placement != "auto":
        return features.placement
    if device.type != "cuda":
        return "mmap"
    if features.cache_gb > 0:
        return "pinned" if nbytes <= PINNED_HOST_FRACTION * available_host_memory()[0] else "mmap"
    return "device" if _fits_on_gpu(nbytes, device) else "pinned"


def cache_budgets(tables: dict, cache_gb: float) -> dict:
    """``--cache-gb`` split over the feature tables (by node type, each with ``nbytes``) by their bytes (bytes by node
    type)."""
    total = max(sum(table.nbytes for table in tables.values()), 1)
    return {node_type: int(cache_gb * 2**30 * table.nbytes / total) for node_type, table in tables.items()}


def _check_cache(tables: dict, cache_gb: float, device: torch.device) -> float:
    """``--cache-gb`` capped at the tables' size (a larger cache would hold nothing more), then within the memory the
    cache would live in (the GPU's free memory on CUDA, else the host's), and holding at least one row of each table
    (a smaller one would cache nothing); returns the capped size."""
    total = sum(table.nbytes for table in tables.values())
    if tables and cache_gb * 2**30 > total:
        cache_gb = total / 2**30
    if device.type == "cuda":
        free, where = torch.cuda.mem_get_info(device)[0], f"free memory of {device}"
    else:
        free, where = available_host_memory()
    if cache_gb * 2**30 > free:
        raise SettingError(f"--cache-gb {cache_gb:g}: only {free / 2**30:.1f} GiB are available ({where}); "
                           f"pass a --cache-gb below {free / 2**30:.1f}")
    budgets = cache_budgets(tables, cache_gb)
    for node_type, table in tables.items():
        if budgets[node_type] < table.row_bytes:
            total = sum(t.nbytes for t in tables.values())
            least = table.row_bytes * total / max(table.nbytes, 1) / 2**30
            raise SettingError(f"--cache-gb {cache_gb:g}: {budgets[node_type]} bytes, less than one feature row"
                               f"{of_node_type(node_type)} "
                               f"({table.row_bytes} bytes), would cache nothing; pass --cache-gb {least:.3g} or more, "
                               "or 0 for no cache")
    return cache_gb


# ---------------------------------------------------------------- evaluation


def _full_eval(meta: DatasetMeta, evaluation: str, model: str, sampling: SamplingSettings) -> bool:
    """Whether this run evaluates with exact layer-wise inference (``--eval``) rather than on sampled batches."""
    if sampling.temporal:  # exact inference would read every neighbor, later ones too
        if evaluation == "full":
            raise SettingError("--eval full reads every neighbor, later ones too; --temporal evaluates on temporally "
                               "sampled batches: pass --eval sampled or auto")
        return False
    if model not in BLOCK_GNNS:  # layer-wise inference runs block GNNs; gt (its cluster attention is per batch) and
        return False             # the R-GCN / R-GAT (an --eval full was refused by _check_types) evaluate sampled
    eval_nodes = sum(size for name, size in meta.split.items() if name != "train")
    cheaper = full_eval_is_cheaper(sum(meta.num_nodes.values()), sum(meta.num_edges.values()), sampling.fanouts,
                                   eval_nodes)
    return evaluation == "full" or (evaluation == "auto" and cheaper)


def full_eval_is_cheaper(num_nodes: int, num_edges: int, fanouts, eval_nodes: int) -> bool:
    """``--eval auto``: exact layer-wise inference on small graphs (Cora), and on larger ones when its edges, weighted
    by their measured cost, are fewer than those of sampled evaluation of the val/test nodes (never on papers100M,
    1% labelled; on a 200K-node graph with 40% of nodes to evaluate it lost 93 s to 66 s, so sampled there too)."""
    if num_nodes <= EXACT_EVAL_MAX_NODES:
        return True
    layerwise = LAYERWISE_EDGE_COST * layerwise_cost(num_edges, fanouts.num_hops)
    return layerwise <= sampled_cost(eval_nodes, fanouts)
