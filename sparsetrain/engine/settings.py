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
"""

from __future__ import annotations

import math
import os
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from sparsetrain.engine.precision import PRECISIONS
from sparsetrain.errors import SettingError, SettingTypeError
from sparsetrain.nn.link import DECODERS
from sparsetrain.nn.models import MODELS
from sparsetrain.sampling.errors import SamplingError
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


class DataSettingError(SettingError):
    """A :class:`DataSettings` field has a value the run cannot use."""


class SamplingSettingError(SettingError):
    """A :class:`SamplingSettings` field has a value the run cannot use."""


class FeatureSettingError(SettingError):
    """A :class:`FeatureSettings` field has a value the run cannot use."""


class ModelSettingError(SettingError):
    """A :class:`ModelSettings` field has a value the run cannot use."""


class OptimSettingError(SettingError):
    """An :class:`OptimSettings` field has a value the run cannot use."""


class RunSettingError(SettingError):
    """A :class:`RunSettings` field has a value the run cannot use."""


class CheckpointSettingError(SettingError):
    """A :class:`CheckpointSettings` field has a value the run cannot use."""


class ReportSettingError(SettingError):
    """A :class:`ReportSettings` field has a value the run cannot use."""


RESUMABLE = {"resumable": True}
"""A field's ``metadata``: a resumed run may change it (it changes neither the batches nor the model's shape)."""
SEED_LIMIT = 2**43
"""``--seed`` lies in [-SEED_LIMIT, SEED_LIMIT): an epoch's shuffle seed is ``seed * 1_000_003 + epoch``
(``sampling/seeds.py``), which must stay within torch's 64-bit seeds."""
DEVICE_TYPES = ("cpu", "cuda")
_TYPE_NAMES = {bool: "True or False", int: "an integer", float: "a number", str: "a string", Path: "a path",
               type(None): "None", Fanouts: "fanouts (a list of ints)"}


def _check_types(part, error: type[SettingError]) -> None:
    """Every field of the dataclass ``part`` holds a value of its annotated type: a bool is not an int nor an int a
    bool, an int is a float; ``X | None`` takes None. NumPy scalars (``np.int64(64)``, ``np.float32(0.01)``,
    ``np.bool_``, what a computed setting often is) count as their Python type and are stored as it, so the checkpoint
    record holds plain values; a float is not an int (``1024.0``: pass ``1024``). One line naming the field and the
    types it takes."""
    for f in fields(part):
        allowed = _annotation(type(part), f.name)
        value = _python_scalar(getattr(part, f.name), allowed)
        object.__setattr__(part, f.name, value)
        if not any(_is_a(value, kind) for kind in allowed):
            raise error(f"{f.name}={value!r}: must be {' or '.join(_TYPE_NAMES[kind] for kind in allowed)}")


def _python_scalar(value, allowed: tuple[type, ...]):
    """A NumPy scalar as the Python type it stands for, where the field takes that type; any other value as it is."""
    for np_kind, kind in ((np.bool_, bool), (np.integer, int), (np.floating, float)):
        if isinstance(value, np_kind) and kind in allowed:
            return kind(value)
    if isinstance(value, np.integer) and float in allowed:
        return int(value)
    return value


def _annotation(cls, name: str) -> tuple[type, ...]:
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


def _integer(error: type[SettingError], name: str, value, *, low: int, rule: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
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
    """Dataset folder, or a built-in name (``cora``, ``synthetic``); None: cora (``--data``). A resume compares the
    dataset's contents, not its path."""
    task: str = "node"
    """``node`` classification or ``link`` prediction on the dataset's link split (``--task``)."""
    target_type: str | None = None
    """Typed datasets: the node type to train on; None: the dataset's target type (``--target-type``)."""
    verify: bool = field(default=False, metadata=RESUMABLE)
    """Check every file's sha256 and the graph's structure before training (``--verify``)."""

    def __post_init__(self) -> None:
        _as_paths(self, "path")
        _check_types(self, DataSettingError)
        _choice(DataSettingError, "task", self.task, TASKS)


@dataclass(frozen=True)
class SamplingSettings:
    """How batches are drawn."""

    fanouts: Fanouts = field(default_factory=lambda: Fanouts([10, 10]))
    """Neighbours per hop from the seeds outward, -1 = all (a :class:`Fanouts` or a list; ``--fanout``)."""
    batch_size: int = 1024
    """Seed nodes (link task: seed edges) per batch (``--batch-size``)."""
    exclude: str = "auto"
    """Link task: the batch's seed edges left out of its blocks, ``none``/``self``/``reverse``; ``auto``: reverse on
    symmetric graphs, else self (``--exclude``)."""
    temporal: bool = False
    """No neighbour later than its seed's time, a seed's time being its node time (the dataset's edge times, else its
    node times; ``--temporal``)."""
    temporal_strategy: str | None = None
    """With ``temporal``: ``uniform`` (default) among the allowed neighbours, or ``last``, the most recent
    (``--temporal-strategy``)."""
    fuse_last_hop: bool = field(default=False, metadata=RESUMABLE)
    """Training batches leave the outermost hop out: it is drawn (the same draws) and its sources' features averaged
    in one pass for GraphSAGE's first layer, by the fetch stage (by the GPU sampler itself with ``--step static`` on a
    GPU): no dedupe or gather of that hop's nodes (:mod:`sparsetrain.sampling.fused_mean`; ``--fuse-last-hop``). Same
    batches and model, so a resume may switch it."""

    def __post_init__(self) -> None:
        if not isinstance(self.fanouts, str):  # a string is refused by the type check, not read as a sequence
            try:
                object.__setattr__(self, "fanouts", Fanouts.of(self.fanouts))
            except SamplingError as exc:
                raise SamplingSettingError(str(exc)) from None
        _check_types(self, SamplingSettingError)
        _integer(SamplingSettingError, "batch_size", self.batch_size, low=1, rule="a positive integer")
        _choice(SamplingSettingError, "exclude", self.exclude, EXCLUDE_CHOICES)
        if self.temporal_strategy is not None:
            _choice(SamplingSettingError, "temporal_strategy", self.temporal_strategy, TEMPORAL_STRATEGIES)
            if not self.temporal:
                raise SamplingSettingError(f"--temporal-strategy {self.temporal_strategy} chooses among the neighbors "
                                           "that --temporal allows; add --temporal or drop it")


@dataclass(frozen=True)
class FeatureSettings:
    """Where the node features live and what caches them (neither changes the batches: a resume may change them)."""

    placement: str = field(default="auto", metadata=RESUMABLE)
    """``auto`` (on a GPU: its memory when they fit, else pinned host memory; on a CPU: mmap), ``mmap``, ``disk``,
    ``memory``, ``device``, ``pinned`` or ``sharded`` across ranks (``--features``)."""
    cache_gb: float = field(default=0.0, metadata=RESUMABLE)
    """GiB of feature cache in front of the store; 0: none (``--cache-gb``)."""
    cache_policy: str = field(default="hybrid", metadata=RESUMABLE)
    """The cache's replacement policy (``--cache-policy``)."""

    def __post_init__(self) -> None:
        _check_types(self, FeatureSettingError)
        _choice(FeatureSettingError, "placement", self.placement, FEATURE_PLACEMENTS)
        _number(FeatureSettingError, "cache_gb", self.cache_gb, low=0, rule="a number >= 0")
        _choice(FeatureSettingError, "cache_policy", self.cache_policy, POLICIES)


@dataclass(frozen=True)
class ModelSettings:
    """The model trained."""

    name: str | None = None
    """sage, gcn, gat, gt, rgcn or rgat; None: sage (rgcn on a typed dataset) (``--model``)."""
    hidden: int | None = None
    """Hidden size; None: the model's default (``--hidden``)."""
    dropout: float = field(default=0.5, metadata=RESUMABLE)
    """Dropout probability between layers, in [0, 1) (``--dropout``); a resume applies a new one and reports it."""
    decoder: str = "dot"
    """Link task: score a pair by the dot product of its embeddings or an MLP (``--decoder``)."""

    def __post_init__(self) -> None:
        _check_types(self, ModelSettingError)
        if self.name is not None:
            _choice(ModelSettingError, "name", self.name, (*MODELS, *TYPED_MODELS))
        _integer(ModelSettingError, "hidden", self.hidden, low=1, rule="a positive integer", optional=True)
        _number(ModelSettingError, "dropout", self.dropout, low=0, high=1, high_open=True,
                rule="a probability in [0, 1)")
        _choice(ModelSettingError, "decoder", self.decoder, DECODERS)


@dataclass(frozen=True)
class OptimSettings:
    """The optimizer and how long it runs (a resume may change any of them: a new learning rate applies from the
    resumed step on, more epochs continue the run)."""

    lr: float | None = field(default=None, metadata=RESUMABLE)
    """Adam's learning rate; None: the model's default (``--lr``)."""
    weight_decay: float | None = field(default=None, metadata=RESUMABLE)
    """L2 weight decay; None: the model's default (``--weight-decay``)."""
    epochs: int | None = field(default=None, metadata=RESUMABLE)
    """Epochs; None: about 2000 optimizer steps (``--epochs``)."""
    max_steps: int | None = field(default=None, metadata=RESUMABLE)
    """Stop after this many optimizer steps, mid-epoch if need be (``--max-steps``)."""

    def __post_init__(self) -> None:
        _check_types(self, OptimSettingError)
        _number(OptimSettingError, "lr", self.lr, low=0, low_open=True, rule="a positive number", optional=True)
        _number(OptimSettingError, "weight_decay", self.weight_decay, low=0, rule="a number >= 0", optional=True)
        _integer(OptimSettingError, "epochs", self.epochs, low=1, rule="a positive integer", optional=True)
        _integer(OptimSettingError, "max_steps", self.max_steps, low=1, rule="a positive integer", optional=True)


@dataclass(frozen=True)
class RunSettings:
    """Where the run executes, its randomness and its evaluation."""

    device: str = field(default="auto", metadata=RESUMABLE)
    """cpu, cuda, cuda:N or auto (``--device``); checked against the machine by the run's plan."""
    precision: str = field(default="fp32", metadata=RESUMABLE)
    """fp32 or bf16 mixed precision (``--precision``)."""
    seed: int = 0
    """Seed of every random choice: same seed, same run (``--seed``), in [-2**43, 2**43)."""
    eval: str = field(default="auto", metadata=RESUMABLE)
    """Evaluation after each epoch: ``full`` (layer-wise, exact), ``sampled`` or ``auto`` (``--eval``)."""
    step: str = field(default="eager", metadata=RESUMABLE)
    """``eager``, or ``static``: each batch padded to its bounds so every step has the same shapes, replayed as one
    CUDA graph on a GPU (GraphSAGE node classification; :mod:`sparsetrain.engine.static_step`; ``--step``)."""

    def __post_init__(self) -> None:
        _check_types(self, RunSettingError)
        device_syntax(self.device)
        _choice(RunSettingError, "precision", self.precision, PRECISIONS)
        if not -SEED_LIMIT <= self.seed < SEED_LIMIT:
            raise RunSettingError(f"seed={self.seed}: must be an integer in [-2**43, 2**43) (an epoch's shuffle seed, "
                                  "seed * 1000003 + epoch, must fit torch's 64-bit seeds)")
        _choice(RunSettingError, "eval", self.eval, EVALUATIONS)
        _choice(RunSettingError, "step", self.step, STEPS)


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
        raise RunSettingError(f"device={device!r}: choose auto, cpu, cuda or cuda:N (N a GPU's index)")


@dataclass(frozen=True)
class CheckpointSettings:
    """Where checkpoints go and whether the run continues from them (a resume may change these)."""

    dir: Path | None = field(default=None, metadata=RESUMABLE)
    """Write checkpoints here (``--checkpoint-dir``)."""
    every: int = field(default=0, metadata=RESUMABLE)
    """Optimizer steps between checkpoints; 0: epoch ends only (``--checkpoint-every``)."""
    resume: bool = field(default=False, metadata=RESUMABLE)
    """Continue from the newest intact checkpoint in ``dir`` (``--resume``)."""

    def __post_init__(self) -> None:
        _as_paths(self, "dir")
        _check_types(self, CheckpointSettingError)
        _integer(CheckpointSettingError, "every", self.every, low=0, rule="an integer >= 0")
        if self.resume and self.dir is None:
            raise CheckpointSettingError("--resume continues from the checkpoints of --checkpoint-dir; give the "
                                         "folder (checkpoint_dir=)")


@dataclass(frozen=True)
class ReportSettings:
    """What the run reports and where (a resume may change these)."""

    log: Path | None = field(default=None, metadata=RESUMABLE)
    """Append per-step and per-epoch metrics here as JSON lines (``--metrics-log``)."""
    summary_json: Path | None = field(default=None, metadata=RESUMABLE)
    """The CLI writes the final metrics here (``--summary-json``)."""
    quiet: bool = field(default=False, metadata=RESUMABLE)
    """No progress bar (``--quiet``)."""

    def __post_init__(self) -> None:
        _as_paths(self, "log", "summary_json")
        _check_types(self, ReportSettingError)


PARTS = {"data": DataSettings, "sampling": SamplingSettings, "features": FeatureSettings, "model": ModelSettings,
         "optim": OptimSettings, "run": RunSettings, "checkpoint": CheckpointSettings, "report": ReportSettings}
_RENAMED = {("data", "path"): "data", ("features", "placement"): "features", ("model", "name"): "model",
            ("checkpoint", "dir"): "checkpoint_dir", ("checkpoint", "every"): "checkpoint_every"}
FLAGS = {_RENAMED.get((part, f.name), f.name): (part, f.name) for part, cls in PARTS.items() for f in fields(cls)}
"""A flat keyword (the ``train`` flag's name, ``--cache-gb`` -> ``cache_gb``) -> (part, field)."""


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
    return {flat: _plain(getattr(getattr(settings, part), key)) for flat, (part, key) in FLAGS.items()
            if not fields_of(PARTS[part])[key].metadata.get("resumable")}


def fields_of(cls) -> dict:
    return {f.name: f for f in fields(cls)}


def _plain(value):
    """``value`` as what a checkpoint loads with ``weights_only=True`` and compares with ``==``: fanouts as lists."""
    if isinstance(value, Fanouts):
        per_hop = value.values
        return {",".join(et): list(v) for et, v in per_hop.items()} if isinstance(per_hop, dict) else list(per_hop)
    return str(value) if isinstance(value, Path) else value
