"""The settings of one training run, one small dataclass per concern, each checking itself when built.

``sparsetrain train`` builds them from its flags (:mod:`sparsetrain.engine.cli`); a library user builds the same
objects and calls :func:`sparsetrain.engine.run.train`::

    train(TrainSettings(data=DataSettings(path="cora"), sampling=SamplingSettings(fanouts=[15, 10], batch_size=256)))

Each function of the run receives the part it uses (the feature stores :class:`FeatureSettings`, the sampler
:class:`SamplingSettings`, ...), never the whole. A field left ``None`` is filled by the run (the model's defaults,
the epochs from optimizer steps). Every check here is one line naming the field and the values it takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from sparsetrain.engine.precision import PRECISIONS
from sparsetrain.errors import SettingError, SettingTypeError
from sparsetrain.nn.link import DECODERS
from sparsetrain.nn.models import MODELS
from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.storage.policies import POLICIES

TASKS = ("node", "link")
TYPED_MODELS = ("rgcn",)
"""Models that train on a typed (heterogeneous) dataset."""
EXCLUDE_CHOICES = ("auto", "none", "self", "reverse")
TEMPORAL_STRATEGIES = ("uniform", "last")
FEATURE_PLACEMENTS = ("auto", "mmap", "disk", "memory", "device", "pinned", "sharded")
EVALUATIONS = ("auto", "full", "sampled")


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


def _path(value) -> Path | None:
    return None if value is None else Path(value)


@dataclass(frozen=True)
class DataSettings:
    """What to train on."""

    path: Path | None = None
    """Dataset folder, or a built-in name (``cora``, ``synthetic``); None: cora (``--data``)."""
    task: str = "node"
    """``node`` classification or ``link`` prediction on the dataset's link split (``--task``)."""
    target_type: str | None = None
    """Typed datasets: the node type to train on; None: the dataset's target type (``--target-type``)."""
    verify: bool = False
    """Check every file's sha256 and the graph's structure before training (``--verify``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _path(self.path))
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

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "fanouts", Fanouts.of(self.fanouts))
        except SamplingError as exc:
            raise SamplingSettingError(str(exc)) from None
        _integer(SamplingSettingError, "batch_size", self.batch_size, low=1, rule="a positive integer")
        _choice(SamplingSettingError, "exclude", self.exclude, EXCLUDE_CHOICES)
        if self.temporal_strategy is not None:
            _choice(SamplingSettingError, "temporal_strategy", self.temporal_strategy, TEMPORAL_STRATEGIES)
            if not self.temporal:
                raise SamplingSettingError(f"--temporal-strategy {self.temporal_strategy} chooses among the neighbors "
                                           "that --temporal allows; add --temporal or drop it")


@dataclass(frozen=True)
class FeatureSettings:
    """Where the node features live and what caches them."""

    placement: str = "auto"
    """``auto`` (on a GPU: its memory when they fit, else pinned host memory; on a CPU: mmap), ``mmap``, ``disk``,
    ``memory``, ``device``, ``pinned`` or ``sharded`` across ranks (``--features``)."""
    cache_gb: float = 0.0
    """GiB of feature cache in front of the store; 0: none (``--cache-gb``)."""
    cache_policy: str = "hybrid"
    """The cache's replacement policy (``--cache-policy``)."""

    def __post_init__(self) -> None:
        _choice(FeatureSettingError, "placement", self.placement, FEATURE_PLACEMENTS)
        _number(FeatureSettingError, "cache_gb", self.cache_gb, low=0, rule="a number >= 0")
        _choice(FeatureSettingError, "cache_policy", self.cache_policy, POLICIES)


@dataclass(frozen=True)
class ModelSettings:
    """The model trained."""

    name: str | None = None
    """sage, gcn, gat, gt or rgcn; None: sage (rgcn on a typed dataset) (``--model``)."""
    hidden: int | None = None
    """Hidden size; None: the model's default (``--hidden``)."""
    dropout: float = 0.5
    """Dropout probability between layers, in [0, 1) (``--dropout``)."""
    decoder: str = "dot"
    """Link task: score a pair by the dot product of its embeddings or an MLP (``--decoder``)."""

    def __post_init__(self) -> None:
        if self.name is not None:
            _choice(ModelSettingError, "name", self.name, (*MODELS, *TYPED_MODELS))
        _integer(ModelSettingError, "hidden", self.hidden, low=1, rule="a positive integer", optional=True)
        _number(ModelSettingError, "dropout", self.dropout, low=0, high=1, high_open=True,
                rule="a probability in [0, 1)")
        _choice(ModelSettingError, "decoder", self.decoder, DECODERS)


@dataclass(frozen=True)
class OptimSettings:
    """The optimizer and how long it runs."""

    lr: float | None = None
    """Adam's learning rate; None: the model's default (``--lr``)."""
    weight_decay: float | None = None
    """L2 weight decay; None: the model's default (``--weight-decay``)."""
    epochs: int | None = None
    """Epochs; None: about 2000 optimizer steps (``--epochs``)."""
    max_steps: int | None = None
    """Stop after this many optimizer steps, mid-epoch if need be (``--max-steps``)."""

    def __post_init__(self) -> None:
        _number(OptimSettingError, "lr", self.lr, low=0, low_open=True, rule="a positive number", optional=True)
        _number(OptimSettingError, "weight_decay", self.weight_decay, low=0, rule="a number >= 0", optional=True)
        _integer(OptimSettingError, "epochs", self.epochs, low=1, rule="a positive integer", optional=True)
        _integer(OptimSettingError, "max_steps", self.max_steps, low=1, rule="a positive integer", optional=True)


@dataclass(frozen=True)
class RunSettings:
    """Where and how the run executes, evaluates, checkpoints and reports."""

    device: str = "auto"
    """cpu, cuda or auto (``--device``)."""
    precision: str = "fp32"
    """fp32 or bf16 mixed precision (``--precision``)."""
    seed: int = 0
    """Seed of every random choice: same seed, same run (``--seed``)."""
    eval: str = "auto"
    """Evaluation after each epoch: ``full`` (layer-wise, exact), ``sampled`` or ``auto`` (``--eval``)."""
    checkpoint_dir: Path | None = None
    """Write checkpoints here (``--checkpoint-dir``)."""
    checkpoint_every: int = 0
    """Optimizer steps between checkpoints; 0: epoch ends only (``--checkpoint-every``)."""
    resume: bool = False
    """Continue from the newest intact checkpoint in ``checkpoint_dir`` (``--resume``)."""
    log: Path | None = None
    """Append per-step and per-epoch metrics here as JSON lines (``--metrics-log``)."""
    summary_json: Path | None = None
    """The CLI writes the final metrics here (``--summary-json``)."""
    quiet: bool = False
    """No progress bar (``--quiet``)."""

    def __post_init__(self) -> None:
        for name in ("checkpoint_dir", "log", "summary_json"):
            object.__setattr__(self, name, _path(getattr(self, name)))
        _choice(RunSettingError, "precision", self.precision, PRECISIONS)
        _integer(RunSettingError, "seed", self.seed, low=-(2**63), rule="an integer")
        _choice(RunSettingError, "eval", self.eval, EVALUATIONS)
        _integer(RunSettingError, "checkpoint_every", self.checkpoint_every, low=0, rule="an integer >= 0")


PARTS = {"data": DataSettings, "sampling": SamplingSettings, "features": FeatureSettings, "model": ModelSettings,
         "optim": OptimSettings, "run": RunSettings}
_RENAMED = {("data", "path"): "data", ("features", "placement"): "features", ("model", "name"): "model"}
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

    def __init__(self, data=None, sampling=None, features=None, model=None, optim=None, run=None, **flags) -> None:
        given = {"data": data, "sampling": sampling, "features": features, "model": model, "optim": optim, "run": run}
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
