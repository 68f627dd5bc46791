"""The settings of one training run, one small dataclass per concern, each checking itself when built.

``sparsetrain train`` builds them from its flags (:mod:`sparsetrain.engine.cli`); a library user builds the same
objects and calls :func:`sparsetrain.engine.run.train`::

    train(TrainSettings(data=DataSettings(path="cora"), sampling=SamplingSettings(fanouts=[15, 10], batch_size=256)))

The run's plan (:func:`sparsetrain.engine.plan.plan`) reads them all once, resolves what is left ``None`` or ``auto``
(the model's defaults, the epochs from optimizer steps, the feature placement) and checks what depends on the dataset
or the device; each builder then receives the part it uses (the feature stores :class:`FeatureSettings`, the sampler
:class:`SamplingSettings`, ...), never the whole. Every check here is one line naming the field and the values it
takes: first each field's type against its annotation (:func:`_check_types`: a bool is not an int, a string not a
bool), then its value. What a field means for a resumed run is its ``metadata``: fields marked ``RESUMABLE`` may
change between a run and its resume; every other field changes the batches or the model and is recorded in each
checkpoint (:func:`batch_record`).

Each field is written once, here, and the ``train`` command line is generated from it (:mod:`sparsetrain.engine.cli`):
the flag's name is the field's flat name (:data:`FLAGS`: ``batch_size`` -> ``--batch-size``; a part's ``path``,
``placement``, ``name``, ``dir``, ``every`` are ``--data``, ``--features``, ``--model``, ``--checkpoint-dir``,
``--checkpoint-every``; ``metadata["flags"]`` spells others), its type the annotation, its default the field's, its
choices ``metadata["choices"]`` (checked here too) and its help the docstring under the field (:func:`field_docs`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import os
import sys
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from sparsetrain.engine.precision import PRECISIONS
from sparsetrain.errors import InputError, SettingError, SettingTypeError
from sparsetrain.nn.link import DECODERS
from sparsetrain.nn.models import MODELS
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.storage.policies import POLICIES

TASKS = ("node", "link")
TYPED_MODELS = ("rgcn", "rgat")
"""Models that train on a typed (heterogeneous) dataset."""
EXCLUDE_CHOICES = ("auto", "none", "self", "reverse")
TEMPORAL_STRATEGIES = ("uniform", "last")
FEATURE_PLACEMENTS = ("auto", "mmap", "disk", "memory", "device", "pinned", "sharded")
EVALUATIONS = ("auto", "full", "sampled")
STEPS = ("eager", "static")


RESUMABLE = {"resumable": True}
"""A field's ``metadata``: a resumed run may change it (it changes neither the batches nor the model's shape)."""
SEED_LIMIT = 2**43
"""``--seed`` lies in [-SEED_LIMIT, SEED_LIMIT): an epoch's shuffle seed is ``seed * 1_000_003 + epoch``
(``sampling/seeds.py``), which must stay within torch's 64-bit seeds."""
MAX_EPOCHS = 1_000_000
"""--epochs above this is a typo (a million epochs of one batch is days of steps), refused in one line."""
DEVICE_TYPES = ("cpu", "cuda")
_TYPE_NAMES = {bool: "True or False", int: "an integer", float: "a number", str: "a string", Path: "a path",
               type(None): "None", Fanouts: "fanouts (a list of ints)"}


def _check_types(part, error: type[SettingError]) -> None:
    """Every field of the dataclass ``part`` holds a value of its annotated type (and one of its ``choices``, where its
    metadata lists them): a bool is not an int nor an int a bool, an int is a float; ``X | None`` takes None. NumPy
    scalars (``np.int64(64)``, ``np.float32(0.01)``, ``np.bool_``, what a computed setting often is) count as their
    Python type and are stored as it, so the checkpoint record holds plain values; a float is not an int (``1024.0``:
    pass ``1024``). One line naming the field and the types it takes."""
    for f in fields(part):
        value = typed_value(type(part), f.name, getattr(part, f.name), error)
        object.__setattr__(part, f.name, value)
        if value is not None and "choices" in f.metadata:
            _choice(error, f.name, value, f.metadata["choices"])


def typed_value(cls, name: str, value, error: type[SettingError] = SettingError):
    """``value`` as the field ``name`` of the dataclass ``cls`` holds it (a NumPy scalar as its Python type), or
    ``error`` in one line naming the field and the types it takes."""
    allowed = field_types(cls, name)
    value = _python_scalar(value, allowed)
    if not any(_is_a(value, kind) for kind in allowed):
        raise error(f"{name}={value!r}: must be {' or '.join(_TYPE_NAMES[kind] for kind in allowed)}")
    return value


def _python_scalar(value, allowed: tuple[type, ...]):
    """A NumPy scalar as the Python type it stands for, where the field takes that type; any other value as it is."""
    for np_kind, kind in ((np.bool_, bool), (np.integer, int), (np.floating, float)):
        if isinstance(value, np_kind) and kind in allowed:
            return kind(value)
    if isinstance(value, np.integer) and float in allowed:
        return int(value)
    return value


def field_types(cls, name: str) -> tuple[type, ...]:
    """The types the field ``name`` of the dataclass ``cls`` takes, from its annotation (``X | None``: X and None)."""
    hint = typing.get_type_hints(cls)[name]
    return typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)


def _is_a(value, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _choice(error: type[SettingError], name: str, value, choices) -> None:
    if value not in choices:
        raise error(f"{name}={value!r}: choose one of {', '.join(map(str, choices))}")


def _number(error: type[SettingError], name: str, value, *, low: float, low_open: bool = False, high: float = math.inf,
            high_open: bool = False, rule: str, optional: bool = False) -> None:
    """``value`` a finite number within [low, high] (ends open as asked), or None where ``optional``."""
    if value is None and optional:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise error(f"{name}={value!r}: must be {rule}")
    too_low = value < low or (low_open and value == low)
    too_high = value > high or (high_open and value == high)
    if not math.isfinite(value) or too_low or too_high:
        raise error(f"{name}={value!r}: must be {rule}")


def _integer(error: type[SettingError], name: str, value, *, low: int, rule: str, optional: bool = False,
             high: int | None = None) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        raise error(f"{name}={value!r}: must be {rule}")


def _as_paths(part, *names: str) -> None:
    """A str or os.PathLike field as a Path (other values are left for :func:`_check_types` to refuse)."""
    for name in names:
        value = getattr(part, name)
        if isinstance(value, (str, os.PathLike)) and not isinstance(value, Path):
            object.__setattr__(part, name, Path(value))


@dataclass(frozen=True)
class DataSettings:
    """What to train on."""

    path: Path | None = field(default=None, metadata=RESUMABLE)
    """Dataset folder, or a built-in dataset: cora (Planetoid's public split, shipped with the package; used when none
    is given) or synthetic (20K nodes); built-ins are built on first use into $SPARSETRAIN_CACHE, else
    $XDG_CACHE_HOME/sparsetrain, else ~/.cache/sparsetrain. A resume compares the dataset's contents, not its path."""
    task: str = field(default="node", metadata={"choices": TASKS})
    """``node`` classification or ``link`` prediction: train on the dataset's link split (``preprocess --link-split``;
    --data cora builds one with 0.85,0.05,0.10), report val/test AUC, MRR and Hits@K (per positive among its own
    negatives: hits@1/3/10_per_positive, as ogbl-citation2; against a shared pool: hits@10/50/100_shared_pool)."""
    target_type: str | None = None
    """Typed (heterogeneous) datasets: the node type to train on; None: the dataset's target type."""
    verify: bool = field(default=False, metadata=RESUMABLE)
    """Check every file's sha256 and the graph's structure before training (reads the whole dataset once); without it,
    file sizes and the sha256 of files up to 64 MiB are checked, and every batch's features for NaN/inf."""

    def __post_init__(self) -> None:
        _as_paths(self, "path")
        _check_types(self, SettingError)


@dataclass(frozen=True)
class SamplingSettings:
    """How batches are drawn."""

    fanouts: Fanouts = field(default_factory=lambda: Fanouts([10, 10]), metadata={"flags": ("--fanout",)})
    """Neighbors per hop from the seeds outward, as PyG's num_neighbors (15,10,5); -1 = all (in Python a
    :class:`Fanouts` or a list, or a dict by edge type)."""
    batch_size: int = 1024
    """Seed nodes (link task: seed edges) per minibatch."""
    exclude: str = field(default="auto", metadata={"choices": EXCLUDE_CHOICES})
    """Link task: leave the batch's seed edges out of its blocks: self, reverse (also v->u), none; auto = reverse on
    symmetric graphs, else self."""
    temporal: bool = False
    """Temporal sampling (PyG's rule): no neighbor later than its seed's time, a seed's time being its node time; reads
    the dataset's edge times, else its node times (``preprocess --node-time``, ``--edge-time-column``); evaluation is
    sampled the same way."""
    temporal_strategy: str | None = field(default=None, metadata={"choices": TEMPORAL_STRATEGIES})
    """With ``--temporal``: draw uniformly among the allowed neighbors (None: uniform) or take the most recent
    (``last``)."""
    fuse_last_hop: bool = field(default=False, metadata=RESUMABLE)
    """GraphSAGE node classification: training batches leave the outermost hop out; it is drawn (the same draws) and
    its sources' features averaged in one pass for the first layer, by the fetch stage (by the GPU sampler itself with
    ``--step static`` on a GPU): no dedupe or gather of that hop's nodes (:mod:`sparsetrain.sampling.fused_mean`);
    features in memory, mmap or device. Same batches and model, so a resume may switch it."""

    def __post_init__(self) -> None:
        if not isinstance(self.fanouts, str):  # a string is refused by the type check, not read as a sequence
            try:
                object.__setattr__(self, "fanouts", Fanouts.of(self.fanouts))
            except InputError as exc:
                raise SettingError(str(exc)) from None
        _check_types(self, SettingError)
        _integer(SettingError, "batch_size", self.batch_size, low=1, rule="a positive integer")
        if self.fanouts.num_hops == 0:  # a model has one layer per hop: none is no model
            raise SettingError("--fanout: no hop given; the model has one layer per hop, give at least one "
                               "count (e.g. --fanout 10,10)")
        if self.temporal_strategy is not None and not self.temporal:
            raise SettingError(f"--temporal-strategy {self.temporal_strategy} chooses among the neighbors "
                               "that --temporal allows; add --temporal or drop it")


@dataclass(frozen=True)
class FeatureSettings:
    """Where the node features live and what caches them (neither changes the batches: a resume may change them)."""

    placement: str = field(default="auto", metadata={**RESUMABLE, "choices": FEATURE_PLACEMENTS})
    """Feature placement: auto (on a GPU, in its memory when they fit, else pinned host memory read zero-copy; on a
    CPU, mmap), mmap (ranks share the page cache), disk (O_DIRECT reads of the rows a batch needs, for features larger
    than memory; give it a --cache-gb), memory, device, pinned, or sharded across ranks."""
    cache_gb: float = field(default=0.0, metadata=RESUMABLE)
    """GiB of feature cache in front of the features (0: no cache), at most the memory available (a cache larger than
    the table is capped at the table); on a GPU the cache is in GPU memory in front of pinned host features (mmap when
    they do not fit in host memory), and the progress bar shows its hit rate and the PCIe MB read a batch."""
    cache_policy: str | None = field(default=None, metadata={**RESUMABLE, "choices": POLICIES})
    """The cache's replacement policy; None: hybrid (the rows most often drawn as neighbors (out-degree) plus a scored
    dynamic part). Refused without --cache-gb (no cache) and on a partitioned folder (its halo cache is static)."""

    def __post_init__(self) -> None:
        _check_types(self, SettingError)
        _number(SettingError, "cache_gb", self.cache_gb, low=0, rule="a number >= 0")


@dataclass(frozen=True)
class ModelSettings:
    """The model trained."""

    name: str | None = field(default=None, metadata={"choices": (*MODELS, *TYPED_MODELS)})
    """The model; None: sage, rgcn on a typed dataset, which trains only rgcn or rgat (MLPerf's R-GAT: a 4-head GAT
    per relation); gt = graph transformer with sparse + cluster attention (a graph without clusters.npy is partitioned
    at start, up to 1M nodes)."""
    hidden: int | None = None
    """Hidden size; None: the model's default (128; gt 64)."""
    heads: int | None = None
    """Attention heads of gat, gt and rgat, which split the hidden width (a divisor of it); None: 4 (MLPerf's R-GAT)."""
    dropout: float = field(default=0.5, metadata=RESUMABLE)
    """Dropout probability between layers, in [0, 1); a resume applies a new one and reports it."""
    decoder: str = field(default="dot", metadata={"choices": DECODERS})
    """Link task: score a pair by the dot product of its embeddings or an MLP."""

    def __post_init__(self) -> None:
        _check_types(self, SettingError)
        _integer(SettingError, "hidden", self.hidden, low=1, rule="a positive integer", optional=True)
        _integer(SettingError, "heads", self.heads, low=1, rule="a positive integer", optional=True)
        _number(SettingError, "dropout", self.dropout, low=0, high=1, high_open=True,
                rule="a probability in [0, 1)")


@dataclass(frozen=True)
class OptimSettings:
    """The optimizer and how long it runs (a resume may change any of them: a new learning rate applies from the
    resumed step on, more epochs continue the run)."""

    lr: float | None = field(default=None, metadata=RESUMABLE)
    """Adam learning rate; None: the model's default (0.01; gt 0.005)."""
    weight_decay: float | None = field(default=None, metadata=RESUMABLE)
    """L2 weight decay; None: the model's default (5e-4; gt 5e-3)."""
    epochs: int | None = field(default=None, metadata=RESUMABLE)
    """Epochs to train; None: about 2000 optimizer steps, at most 200 epochs (200 full-batch epochs on Cora, ~11 on
    products; the test accuracy reported is the one at the best validation epoch)."""
    max_steps: int | None = field(default=None, metadata=RESUMABLE)
    """Stop after this many optimizer steps, mid-epoch if need be (a partial epoch is not evaluated)."""
    patience: int | None = field(default=None, metadata=RESUMABLE)
    """Early stopping: stop after this many evaluations in a row without a better validation metric (the task's
    ``select_metric``: val_acc; link task val_auc); the summary says at which epoch; a resume keeps the count; None:
    train every epoch."""

    def __post_init__(self) -> None:
        _check_types(self, SettingError)
        _integer(SettingError, "patience", self.patience, low=1, rule="a positive integer", optional=True)
        _number(SettingError, "lr", self.lr, low=0, low_open=True, rule="a positive number", optional=True)
        _number(SettingError, "weight_decay", self.weight_decay, low=0, rule="a number >= 0", optional=True)
        _integer(SettingError, "epochs", self.epochs, low=1, high=MAX_EPOCHS,
                 rule=f"a positive integer, at most {MAX_EPOCHS:,}", optional=True)
        _integer(SettingError, "max_steps", self.max_steps, low=1, rule="a positive integer", optional=True)


@dataclass(frozen=True)
class RunSettings:
    """Where the run executes, its randomness and its evaluation."""

    device: str = field(default="auto", metadata=RESUMABLE)
    """cpu, cuda, cuda:N or auto (a GPU when one is visible); checked against the machine by the run's plan."""
    precision: str = field(default="fp32", metadata={**RESUMABLE, "choices": PRECISIONS})
    """fp32 or bf16 mixed precision (autocast, weights and optimizer in fp32): ~1.4x a step on CPUs with AVX-512 BF16
    (benchmarks/RESULTS.md); GPUs need bfloat16 support."""
    seed: int = 0
    """Seed of every random choice (weights, shuffle, sampling): same seed, same run; its magnitude below 2**43."""
    eval: str = field(default="auto", metadata={**RESUMABLE, "choices": EVALUATIONS})
    """Evaluation after each epoch: full = exact, every neighbor (layer-wise inference); sampled = the training
    fanouts; auto (default) = full on graphs up to 100K nodes or where it visits fewer edges than sampled, else
    sampled (gt always sampled)."""
    step: str = field(default="eager", metadata={**RESUMABLE, "choices": STEPS})
    """eager, or static: batches padded to their bounds from --batch-size and --fanout so every step has the same
    shapes, replayed as one CUDA graph on a GPU, where each batch's sampling is captured and replayed too (GraphSAGE,
    node task; :mod:`sparsetrain.engine.static`)."""

    def __post_init__(self) -> None:
        _check_types(self, SettingError)
        device_syntax(self.device)
        if not -SEED_LIMIT <= self.seed < SEED_LIMIT:
            raise SettingError(f"seed={self.seed}: must be an integer in [-2**43, 2**43) (an epoch's shuffle seed, "
                               "seed * 1000003 + epoch, must fit torch's 64-bit seeds)")


def device_syntax(device: str) -> None:
    """``device`` spelled as ``--device`` takes it: auto, cpu, cuda or cuda:N (whether the machine has it is the plan's
    check, :func:`sparsetrain.engine.plan.choose_device`)."""
    if device == "auto":
        return
    try:
        parsed = torch.device(device)
    except RuntimeError:
        parsed = None
    if parsed is None or parsed.type not in DEVICE_TYPES or (parsed.type == "cpu" and parsed.index is not None):
        raise SettingError(f"device={device!r}: choose auto, cpu, cuda or cuda:N (N a GPU's index)")


@dataclass(frozen=True)
class CheckpointSettings:
    """Where checkpoints go and whether the run continues from them (a resume may change these)."""

    dir: Path | None = field(default=None, metadata=RESUMABLE)
    """Write checkpoints here (every --checkpoint-every steps and each epoch; the newest 3 are kept), beside the run's
    resolved settings (config.json). One folder per run: a run without --resume refuses a folder that already holds
    checkpoints."""
    every: int = field(default=0, metadata=RESUMABLE)
    """Optimizer steps between checkpoints; 0: epoch ends only."""
    resume: bool = field(default=False, metadata=RESUMABLE)
    """Continue from the newest intact checkpoint in --checkpoint-dir (start fresh if it has none); refused when that
    checkpoint belongs to another run (model, dataset, seed, batch size, fanout or world size differ); a different
    --lr, --weight-decay or --dropout applies from the resumed step on, and is reported."""

    def __post_init__(self) -> None:
        _as_paths(self, "dir")
        _check_types(self, SettingError)
        _integer(SettingError, "every", self.every, low=0, rule="an integer >= 0")
        if self.resume and self.dir is None:
            raise SettingError("--resume continues from the checkpoints of --checkpoint-dir; give the "
                               "folder (checkpoint_dir=)")


@dataclass(frozen=True)
class ReportSettings:
    """What the run reports and where (a resume may change these)."""

    # not --log first: torchrun reads any prefix of its own --log-dir/--logs-specs, so `torchrun ... train --log F`
    # fails there
    log: Path | None = field(default=None, metadata={**RESUMABLE, "flags": ("--metrics-log",),
                                                              "hidden_flags": ("--log",)})
    """Append per-step and per-epoch metrics here as JSON lines; the same records are written beside it as CSV, the
    log's name with ``.csv`` for its suffix (``runs/m.jsonl`` -> ``runs/m.csv``), rewritten after each epoch
    (Lightning's ``CSVLogger`` layout: a header of every field, one row a record, empty where absent)."""
    tensorboard: Path | None = field(default=None, metadata=RESUMABLE)
    """Write TensorBoard event files into this folder (``tensorboard --logdir DIR``; needs ``pip install tensorboard``):
    every number of the metrics log as a scalar of the same name at the record's step."""
    summary_json: Path | None = field(default=None, metadata=RESUMABLE)
    """Write the final metrics (val_acc, test_acc, epochs, seconds; link task: val_auc, test_auc, test_mrr,
    test_hits@K_per_positive or _shared_pool, negatives_per_positive) and the run's resolved settings (config) here."""
    quiet: bool = field(default=False, metadata=RESUMABLE)
    """No progress bar."""

    def __post_init__(self) -> None:
        _as_paths(self, "log", "summary_json", "tensorboard")
        _check_types(self, SettingError)
        if self.log is not None and self.log.suffix == ".csv":
            raise SettingError(f"--metrics-log {self.log}: the metrics log is JSON lines and its CSV is written "
                               "beside it under the same name with .csv; name the log .jsonl")


PARTS = {"data": DataSettings, "sampling": SamplingSettings, "features": FeatureSettings, "model": ModelSettings,
         "optim": OptimSettings, "run": RunSettings, "checkpoint": CheckpointSettings, "report": ReportSettings}
_RENAMED = {("data", "path"): "data", ("features", "placement"): "features", ("model", "name"): "model",
            ("checkpoint", "dir"): "checkpoint_dir", ("checkpoint", "every"): "checkpoint_every"}
FLAGS = {_RENAMED.get((part, f.name), f.name): (part, f.name) for part, cls in PARTS.items() for f in fields(cls)}
"""A flat keyword (the ``train`` flag's name, ``--cache-gb`` -> ``cache_gb``) -> (part, field)."""


def flag_names(flat: str) -> tuple[str, ...]:
    """The ``train`` flags of the flat keyword ``flat``: ``metadata["flags"]`` where the field names them, else
    ``--`` and ``flat`` with dashes (``cache_gb`` -> ``--cache-gb``)."""
    part, key = FLAGS[flat]
    return fields_of(PARTS[part])[key].metadata.get("flags", ("--" + flat.replace("_", "-"),))


def field_docs(cls) -> dict[str, str]:
    """The docstring written under each field of the dataclass ``cls`` (its help), by field name; {} where its
    module's source cannot be read."""
    return _docs_of_module(cls.__module__).get(cls.__qualname__, {})


@functools.cache
def _docs_of_module(module: str) -> dict[str, dict[str, str]]:
    """Every class's field docstrings in ``module``, its source parsed once."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (OSError, TypeError):
        return {}
    docs: dict[str, dict[str, str]] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node, after in zip(cls.body, cls.body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs.setdefault(cls.name, {})[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


@dataclass(init=False)
class TrainSettings:
    """Every part of one run: ``TrainSettings(data=DataSettings(...), sampling=SamplingSettings(...), ...)``.

    Parts left out take their defaults. The ``train`` flags' names are accepted as flat keywords too, each routed to
    its part (``TrainSettings(data="cora", fanouts=[15, 10], lr=0.01)``).
    """

    data: DataSettings
    sampling: SamplingSettings
    features: FeatureSettings
    model: ModelSettings
    optim: OptimSettings
    run: RunSettings
    checkpoint: CheckpointSettings
    report: ReportSettings

    def __init__(self, data=None, sampling=None, features=None, model=None, optim=None, run=None, checkpoint=None,
                 report=None, **flags) -> None:
        given = {"data": data, "sampling": sampling, "features": features, "model": model, "optim": optim, "run": run,
                 "checkpoint": checkpoint, "report": report}
        parts = {name: value for name, value in given.items() if isinstance(value, PARTS[name])}
        flat = {name: value for name, value in given.items() if value is not None and name not in parts}
        flat.update(flags)
        per_part: dict[str, dict] = {name: {} for name in PARTS}
        for name, value in flat.items():
            if name not in FLAGS:
                raise SettingTypeError(f"TrainSettings got an unexpected keyword argument {name!r} ({value!r}); "
                                       f"give the parts ({', '.join(PARTS)}) or the flat names {', '.join(FLAGS)}")
            part, key = FLAGS[name]
            if part in parts:
                raise SettingTypeError(f"TrainSettings: {name}= and {part}= both given; set {key} in the {part} part")
            per_part[part][key] = value
        for name, cls in PARTS.items():
            setattr(self, name, parts[name] if name in parts else cls(**per_part[name]))


def batch_record(settings: TrainSettings) -> dict:
    """What a checkpoint records of the settings, by the ``train`` flags' names: every field not marked
    ``RESUMABLE``, whatever its value (a new field is recorded unless marked), so that a resume with any setting
    that changes the batches or the model (temporal on or off, the fanouts, the seed, ...) is refused."""
    return {flat: plain_value(getattr(getattr(settings, part), key)) for flat, (part, key) in FLAGS.items()
            if not fields_of(PARTS[part])[key].metadata.get("resumable")}


def fields_of(cls) -> dict:
    return {f.name: f for f in fields(cls)}


def plain_value(value):
    """A setting's ``value`` as what a checkpoint (and a config file) loads with ``weights_only=True`` and compares
    with ``==``: fanouts as lists, paths as strings."""
    if isinstance(value, Fanouts):
        per_hop = value.values
        return {",".join(et): list(v) for et, v in per_hop.items()} if isinstance(per_hop, dict) else list(per_hop)
    return str(value) if isinstance(value, Path) else value
