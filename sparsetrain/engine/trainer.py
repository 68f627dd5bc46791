"""The training loop: epochs, progress, evaluation, JSON-lines metrics, checkpoints and exact resume."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sparsetrain._phases import phase
from sparsetrain._progress import compile_notice, progress
from sparsetrain.engine.checkpoint import (
    RECORD_VERSION,
    check_same_run,
    list_checkpoints,
    load_latest_checkpoint,
    refuse_foreign_checkpoints,
    save_best,
    save_checkpoint,
)
from sparsetrain.engine.host_memory import retain_freed_host_memory
from sparsetrain.engine.late_loss import LossRing
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.precision import autocast, check_precision
from sparsetrain.engine.run_config import write_config
from sparsetrain.engine.run_log import TensorBoardLog, csv_beside, summary_writer_class, write_csv
from sparsetrain.engine.settings import CheckpointSettings, ReportSettings
from sparsetrain.errors import DatasetError, SettingError, TrainingDivergedError
from sparsetrain.storage.base import GatherStats


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during :meth:`Trainer.fit`; its message says what the run had written and how to go on."""


def node_forward(model: torch.nn.Module, mb) -> tuple[torch.Tensor, torch.Tensor]:
    """Node classification's batch forward: ``model(mb.x, mb.to_pyg())`` and the seeds' labels (a fused last hop's
    batch passes its first layer's ``neighbor_mean`` too)."""
    mean = getattr(mb, "neighbor_mean", None)
    if mean is not None:
        return model(mb.x, mb.to_pyg(), neighbor_mean=mean), mb.y
    return model(mb.x, mb.to_pyg()), mb.y


@dataclass(frozen=True)
class Task:
    """What a task plugs into the loop: its loss, its ``batch_forward(model, mb) -> (output, target)`` and
    ``select_metric``, the validation metric that picks the reported epoch. The default is node classification;
    link prediction's is :data:`sparsetrain.engine.link_task.LINK_TASK`."""

    loss_fn: Callable = F.cross_entropy
    batch_forward: Callable = node_forward
    select_metric: str = "val_acc"


class Trainer:
    """Train ``model`` on minibatches from ``loader``.

    ``evaluate(model) -> {"val_acc": .., "test_acc": ..}`` runs after every epoch;
    the reported result is the test accuracy at the epoch with the best
    validation accuracy. Checkpoints (every ``checkpoints.every`` steps and at
    every epoch end) hold model, optimizer, scheduler, RNG state and the position
    in the epoch (``checkpoints``: a :class:`~sparsetrain.engine.settings.CheckpointSettings`, its folder,
    frequency and ``resume``); resuming continues from the newest intact one exactly. Checkpoints record
    which run wrote them (parameter names and shapes, the loader's seed and batching, and
    ``record``, e.g. the dataset and fanouts): resuming another run's checkpoint, or starting
    without ``resume`` in a folder that holds checkpoints, raises :class:`CheckpointError`.
    ``report`` (a :class:`~sparsetrain.engine.settings.ReportSettings`): the JSON-lines metrics log (and its CSV twin
    beside it, rewritten after each epoch), the TensorBoard folder and ``quiet`` (:mod:`sparsetrain.engine.run_log`).
    ``patience``: early stopping, after that many evaluations in a row without a better ``select_metric`` (the count
    is the history's, which a checkpoint holds, so a resumed run keeps it); the summary then says
    ``stopped_early`` and ``stopped_epoch``.
    ``precision="bf16"`` runs forward, loss and evaluation under bfloat16 autocast
    (see :mod:`sparsetrain.engine.precision`). ``retain_host_memory`` (on by default) keeps
    freed host memory in the process heap so each step reuses warm pages: 1127 -> 673 ms a
    products-scale step on 2 cores (see :func:`~sparsetrain.engine.host_memory.retain_freed_host_memory`;
    ``SPARSETRAIN_KEEP_MALLOC=1`` opts out). ``max_steps`` stops training after that many optimizer steps,
    mid-epoch if need be (a partial epoch is not evaluated). ``static_step`` (a
    :class:`~sparsetrain.engine.static.step.StaticStep` over this model and optimizer) takes each batch's step instead
    of the eager forward, loss, backward and optimizer step (labels are the dataset checks' to bound, not the step's).

    Other tasks plug in a :class:`Task`: the loss, ``batch_forward(model, mb) -> (output, target)`` (default
    ``model(mb.x, mb.to_pyg()), mb.y``; link prediction passes ``mb.edge_label_index`` too) and
    ``select_metric``, the validation metric that picks the reported epoch (``"val_acc"``; ``"val_auc"``).

    Settings a resumed run may change: the optimizer's hyperparameters (``lr``, ``weight_decay``, ...; with a
    ``scheduler`` the learning rate follows the checkpoint's schedule) and ``hyperparameters``, values the caller
    built the model with (e.g. ``{"dropout": 0.5}``), recorded in each checkpoint. On resume this run's values
    apply, and each that differs from the checkpoint's is reported in one line (``lr 0.01 -> 0.001``).
    Class targets outside ``[0, classes)`` raise :class:`~sparsetrain.errors.DatasetError` naming the seeds, and a
    NaN or infinite loss :class:`TrainingDivergedError` naming the step. Both are read with no host wait a step: each
    step's loss reaches host memory through :attr:`loss_ring` (:class:`~sparsetrain.engine.late_loss.LossRing`) and is
    read when it has arrived, a few steps later on a GPU, and every step before a checkpoint is written (a failed
    check raises and writes nothing), before the epoch's record and evaluation, and at ``max_steps``.
    Ctrl-C (SIGTERM in the CLI) raises :class:`TrainingInterrupted`, whose message names the newest checkpoint and the
    step ``--resume`` continues from.
    """

    def __init__(self, model: torch.nn.Module, loader: Loader, optimizer: torch.optim.Optimizer, *,
                 epochs: int, max_steps: int | None = None, scheduler=None,
                 evaluate: Callable[[torch.nn.Module], dict] | None = None, task: Task = Task(),
                 checkpoints: CheckpointSettings = CheckpointSettings(), report: ReportSettings = ReportSettings(),
                 precision: str = "fp32", record: dict | None = None, hyperparameters: dict | None = None,
                 is_main: bool = True, retain_host_memory: bool = True, static_step=None, patience: int | None = None,
                 config: dict | None = None):
        if epochs < 1:
            raise SettingError(f"epochs={epochs} must be at least 1")
        if patience is not None and (evaluate is None or isinstance(patience, bool) or not isinstance(patience, int)
                                     or patience < 1):
            raise SettingError(f"patience={patience} must be a positive integer, with an evaluate function (early "
                               "stopping watches the validation metric)")
        check_precision(precision, loader.device)
        if retain_host_memory:
            retain_freed_host_memory()
        self.precision = precision
        self.model = model
        self.loader = loader
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.task = task
        self.static_step = static_step
        self.evaluate = evaluate
        self.epochs = epochs
        self.max_steps = max_steps
        self.checkpoints = checkpoints
        self.record = dict(record or {})
        self.hyperparameters = dict(hyperparameters or {})
        self.config = config  # the run's settings (run_config.config_of), written beside each checkpoint
        self.log_path = report.log
        self.tensorboard_dir = report.tensorboard
        if self.tensorboard_dir is not None and is_main:
            summary_writer_class()  # a missing tensorboard package is said before training, not after
        self._tensorboard: TensorBoardLog | None = None
        self.patience = patience
        self.stopped_early = False
        self.quiet = report.quiet or not is_main
        self.is_main = is_main
        self.epoch = 0
        self.batch = 0
        self.step = 0
        self.history: list[dict] = []
        self.loss_ring = LossRing()
        self._losses: list[float] = []  # the losses of this epoch read so far
        self._run_reads = _FeatureReads(None)
        self._best: dict | None = None  # the epoch best.pt is written for at the next checkpoint

    # ------------------------------------------------------------ state
    def run_identity(self) -> dict:
        """What makes a checkpoint this run's: a checkpoint that differs in any of these cannot be resumed here."""
        batches = self.loader.seed_batches
        return {
            "parameters": {name: list(t.shape) for name, t in _unwrap(self.model).state_dict().items()},
            "seed": batches.seed, "batch_size": batches.batch_size, "shuffle": batches.shuffle,
            "drop_last": batches.drop_last,
            "world_size": batches.world_size, "train_seeds": len(batches.seeds), "record_version": RECORD_VERSION,
            **self.record,
        }

    def state_dict(self) -> dict:
        state = {
            "run": self.run_identity(),
            "model": _unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": {"torch": torch.get_rng_state()},
            "position": {"epoch": self.epoch, "batch": self.batch, "step": self.step},
            "history": self.history,
            "hyperparameters": self.hyperparameters,
        }
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if torch.cuda.is_available():
            state["rng"]["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore a checkpoint's state, keeping this run's optimizer hyperparameters (see :meth:`changed_settings`)."""
        _unwrap(self.model).load_state_dict(state["model"])
        own = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state["optimizer"])
        self._changed = self._keep_own_hyperparameters(own)
        recorded = state.get("hyperparameters", {})
        self._changed.update({k: (recorded[k], v) for k, v in self.hyperparameters.items()
                              if k in recorded and recorded[k] != v})
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch"])
        if "cuda" in state["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        position = state["position"]
        self.epoch, self.batch, self.step = position["epoch"], position["batch"], position["step"]
        self.history = list(state.get("history", []))

    def _keep_own_hyperparameters(self, own: list[dict]) -> dict:
        """Put this run's optimizer hyperparameters back over the checkpoint's; ``{name: (old, new)}`` of changed
        ones."""
        changed = {}
        scheduled = {"lr", "initial_lr"} if self.scheduler is not None else set()
        for group, mine in zip(self.optimizer.param_groups, own):
            for key, value in mine.items():
                if key in scheduled or key not in group or group[key] == value:
                    continue
                changed.setdefault(key, (group[key], value))
                group[key] = value
        return changed

    def changed_settings(self) -> dict:
        """``{name: (checkpoint's value, this run's value)}`` of the settings a resume changed (empty before one)."""
        return dict(getattr(self, "_changed", {}))

    def _report_changes(self) -> None:
        changes = self.changed_settings()
        if changes and self.is_main:
            shown = ", ".join(f"{k} {_fmt_setting(old)} -> {_fmt_setting(new)}" for k, (old, new) in changes.items())
            print(f"resuming at step {self.step} with {shown} (this run's values apply from here)", file=sys.stderr,
                  flush=True)

    def _save(self) -> None:
        self.loss_ring.drain()  # a checkpoint never holds weights a non-finite step updated: every step read first
        if self.checkpoints.dir is not None and self.is_main:
            self._check_weights()
            self.saved = save_checkpoint(self.checkpoints.dir, self.step, self.state_dict())
            if self.config is not None:
                write_config(self.config, self.checkpoints.dir)
            if self._best is not None:
                save_best(self.checkpoints.dir, {"run": self.run_identity(), "model": _unwrap(self.model).state_dict(),
                                                 "hyperparameters": self.hyperparameters, **self._best})
                self._best = None

    def _save_best(self, record: dict) -> None:
        """Mark this epoch for ``best.pt`` when its validation metric beats every earlier one's: the weights the run's
        reported test metric comes from (``sparsetrain predict``'s default), written by the next :meth:`_save`, after
        the step checkpoint."""
        key = self.task.select_metric
        if self.checkpoints.dir is None or not self.is_main or record.get(key) is None:
            return
        if not any(r.get(key) is not None and r[key] >= record[key] for r in self.history[:-1]):
            self._best = {"position": {"epoch": self.epoch + 1, "step": self.step}, "metrics": record}

    def _check_weights(self) -> None:
        """Refuse to save non-finite weights: with several ranks another rank's non-finite step reaches these weights
        through the gradients' all-reduce while this rank's losses were finite (one host wait a checkpoint)."""
        params = [p.detach() for p in self.model.parameters()]
        if params and not torch.stack([torch.isfinite(p).all() for p in params]).all().item():
            raise TrainingDivergedError(
                f"the weights became NaN or infinite by step {self.step} while this rank's losses were finite (another "
                "rank's loss, or an overflowing update): the training diverged; lower the learning rate (--lr) or "
                "check the features for extreme values")

    def _log(self, record: dict) -> None:
        if not self.is_main:
            return
        if self._tensorboard is not None:
            self._tensorboard.add(record)
        if self.log_path is None:
            return
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as exc:  # a write's error may name no file: name the log
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.log_path)) from None

    def _flush_logs(self) -> None:
        """The CSV twin rewritten from the metrics log, and TensorBoard's events flushed (main rank)."""
        if not self.is_main:
            return
        if self.log_path is not None and self.log_path.is_file():
            write_csv(self.log_path, csv_beside(self.log_path))
        if self._tensorboard is not None:
            self._tensorboard.flush()

    def _trim_log(self) -> None:
        """After a resume, drop log lines written after the checkpoint (they are about to be redone)."""
        if self.log_path is None or not self.log_path.is_file() or not self.is_main:
            return
        kept = [line for line in self.log_path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= self.step]
        tmp = self.log_path.with_name(self.log_path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.log_path)

    # ------------------------------------------------------------ loop
    def fit(self) -> dict:
        """Train for the remaining epochs; returns the summary (``val_acc``, ``test_acc`` or the task's metrics,
        ``epochs``, ``seconds``)."""
        folder = self.checkpoints.dir
        resumed = False
        if self.checkpoints.resume:
            state = load_latest_checkpoint(folder)
            if state is not None:
                check_same_run(folder, state, self.run_identity())
                self.load_state_dict(state)
                self._report_changes()
                self._trim_log()
                resumed = True
        elif folder is not None:
            refuse_foreign_checkpoints(folder)
        if self.tensorboard_dir is not None and self.is_main:  # a resumed run's events replace those after its step
            self._tensorboard = TensorBoardLog(self.tensorboard_dir, purge_step=self.step + 1 if resumed else None)
        started = time.perf_counter()
        self._run_reads = _FeatureReads(self.loader.features)
        try:
            with compile_notice(self.quiet):
                while self.epoch < self.epochs and not self._step_limit_reached() and not self._patience_spent():
                    if not self._train_epoch():
                        self._save()
                        break
                    self.epoch += 1
                    self.batch = 0
                    if self.scheduler is not None:
                        self.scheduler.step()
                    self._save()
                    if self._patience_spent() and self.epoch < self.epochs:
                        self._stop_early()
        except KeyboardInterrupt:
            self.loss_ring.drain()  # the steps run so far are logged (a failed check raises its own error instead)
            raise TrainingInterrupted(self._written()) from None
        finally:
            self._close_logs()
        return self.summary(time.perf_counter() - started)

    def _close_logs(self) -> None:
        try:
            self._flush_logs()
        finally:
            if self._tensorboard is not None:
                self._tensorboard.close()
                self._tensorboard = None

    def evaluations_without_improvement(self) -> int:
        """Evaluations since the best ``select_metric`` so far (ties are no improvement), from the history."""
        key = self.task.select_metric
        values = [r[key] for r in self.history if r.get(key) is not None]
        if not values:
            return 0
        return len(values) - 1 - values.index(max(values))

    def _patience_spent(self) -> bool:
        return self.patience is not None and self.evaluations_without_improvement() >= self.patience

    def _stop_early(self) -> None:
        """Say and log that ``patience`` evaluations passed without a better validation metric."""
        self.stopped_early = True
        key = self.task.select_metric
        self._log({"step": self.step, "epoch": self.epoch, "stopped": "patience"})
        if not self.quiet:
            print(f"stopped early after epoch {self.epoch}: no better {key} in {self.patience} evaluations "
                  f"(--patience {self.patience})", flush=True)

    def _written(self) -> str:
        """What an interrupted run leaves: its newest checkpoint and how to continue from it, and its metrics log."""
        if not self.is_main:  # the main rank says what the run wrote
            return f"interrupted at step {self.step}"
        folder = self.checkpoints.dir
        newest = list_checkpoints(folder) if folder is not None else []
        if newest:
            step = int(newest[0].name.removeprefix("step-").removesuffix(".pt"))
            said = (f"checkpoints are in {folder} (newest {newest[0].name}); rerun the same command with --resume "
                    f"(resume=True) to continue from step {step}")
        else:
            said = "no checkpoint was written" + ("" if folder is not None else " (--checkpoint-dir keeps progress)")
        if self.log_path is not None and self.log_path.is_file():
            said += f"; metrics up to step {self.step} are in {self.log_path}"
        return f"interrupted at step {self.step}; {said}"

    def _step_limit_reached(self) -> bool:
        return self.max_steps is not None and self.step >= self.max_steps

    def _train_epoch(self) -> bool:
        """Train one epoch (evaluate and log it); False when ``max_steps`` cut it short."""
        model, loader = self.model, self.loader
        model.train()
        self._losses = []
        seen = 0
        epoch_start = time.perf_counter()
        reads = _FeatureReads(loader.features)
        bar = progress(len(loader), f"epoch {self.epoch + 1}/{self.epochs}", "batch", self.quiet, initial=self.batch)
        with bar:
            for mb in loader.epoch(self.epoch, self.batch):
                with phase("step"):
                    if self.static_step is not None:
                        loss, targets = self.static_step.step(mb), None  # (labels bounded by the dataset checks)
                    else:
                        loss, targets = self._eager_step(model, mb)
                self.step += 1
                self.batch += 1
                seen += len(mb.seeds)
                self._queue(loss, targets)
                elapsed = time.perf_counter() - epoch_start
                stats = loader.last_epoch_stats
                shown = f"{self._losses[-1]:.4f}" if self._losses else "-"  # the newest loss read
                bar.set_postfix(loss=shown, seeds_s=f"{seen / max(elapsed, 1e-9):.0f}",
                                stall=f"{stats.wait_seconds / max(elapsed, 1e-9):.0%}", **reads.postfix(),
                                refresh=False)
                bar.update(1)
                if self.checkpoints.every and self.step % self.checkpoints.every == 0:
                    self._save()
                if self._step_limit_reached() and self.batch < len(loader):
                    break
        self.loss_ring.drain()  # every step's loss, logged, before the epoch's record and evaluation
        losses = self._losses
        if self._step_limit_reached() and self.batch < len(loader):
            self._log({"step": self.step, "epoch": self.epoch, "stopped": "max_steps", **reads.totals()})
            if not self.quiet:
                print(f"stopped after {self.step} steps (--max-steps)", flush=True)
            return False
        stats = loader.last_epoch_stats
        record = {
            "step": self.step,
            "epoch": self.epoch + 1,
            "train_loss": sum(losses) / len(losses) if losses else None,
            "seconds": round(stats.total_seconds, 4),
            "stall_fraction": round(stats.stall_fraction, 4),
            "seeds_per_second": round(stats.seeds / stats.total_seconds, 1) if stats.total_seconds else None,
            **_split(stats),
            **(reads.totals() if reads.shown else {}),
        }
        if self.evaluate is not None:
            with autocast(self.precision, loader.device):
                record.update(self.evaluate(_unwrap(model)))
        self.history.append(record)
        self._log(record)
        self._flush_logs()
        self._save_best(record)
        if not self.quiet:
            shown = "  ".join(f"{k} {_fmt(k, v)}" for k, v in record.items() if k != "step" and k not in NOT_PRINTED)
            print(shown, flush=True)
        return True

    def _eager_step(self, model: torch.nn.Module, mb) -> tuple[torch.Tensor, _Targets | None]:
        """Forward, loss, backward and optimizer step; the loss and the batch's targets out of range, unread.

        Nothing is read before ``backward``, as on the static path: a check there would cost a host wait a step and
        protect only the weights in memory, which a run that raises does not keep; what is kept (a checkpoint, the
        log, an evaluation) is written only once every step before it was read (:meth:`_save` drains first)."""
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.precision, self.loader.device):
            out, target = self.task.batch_forward(model, mb)
            out_of_range = _class_targets_out_of_range(out, target)
            if out_of_range is not None:  # a valid class in their place (a device-side assert ends the process)
                target = target.masked_fill(out_of_range, 0)
            loss = self.task.loss_fn(out.float(), target)
        loss.backward()
        self.optimizer.step()
        if out_of_range is None:
            return loss, None
        return loss, _Targets(out_of_range, out.shape[1], getattr(mb, "seeds", None), getattr(mb, "y", None))

    def _queue(self, loss: torch.Tensor, targets: _Targets | None) -> None:
        """Queue the step just taken for :meth:`_read`: its loss, and its count of targets out of range."""
        at = (self.step, self.epoch, self.batch)
        loss = loss.detach().double()
        values = loss.reshape(1) if targets is None else torch.stack([loss, targets.mask.sum().double()])
        self.loss_ring.push(values, lambda read: self._read(at, read, targets))

    def _read(self, at: tuple[int, int, int], values: list[float], targets: _Targets | None) -> None:
        """A step's values, arrived: raise on targets out of range or a non-finite loss, else log the loss."""
        step, epoch, batch = at
        late = f", read at step {self.step}" if self.step > step else ""
        if targets is not None and values[1]:
            raise _target_error(targets, step)
        loss = values[0]
        if not math.isfinite(loss):
            raise TrainingDivergedError(
                f"the loss became {loss} at step {step} (epoch {epoch + 1}, batch {batch}{late}): the training "
                "diverged; lower the learning rate (--lr) or check the features for extreme values")
        self._losses.append(loss)
        self._log({"step": step, "epoch": epoch, "loss": loss})

    def summary(self, seconds: float) -> dict:
        """The validation and test metrics of the epoch with the best ``select_metric``, and the run's totals."""
        key, ring = self.task.select_metric, self.loss_ring
        best = max((r for r in self.history if r.get(key) is not None), key=lambda r: r[key], default=None)
        metrics = {k: None for k in (key, key.replace("val_", "test_", 1))}
        if best is not None:
            metrics.update({k: v for k, v in best.items() if k.startswith(("val_", "test_"))})
        early = {} if self.patience is None else {
            "stopped_early": self.stopped_early or (self._patience_spent() and self.epoch < self.epochs),
            "stopped_epoch": self.epoch}
        return {
            **metrics,
            "best_epoch": None if best is None else best["epoch"],
            **early,
            "epochs": self.epoch,
            "steps": self.step,
            "seconds": round(seconds, 3),
            "stall_fraction": self.history[-1]["stall_fraction"] if self.history else None,
            "loss_waits_per_step": ring.step_waits / ring.pushed if ring.pushed else None,
            **(self._run_reads.totals() if self._run_reads.shown else {}),
        }


class _FeatureReads:
    """What the progress bar shows of the feature store: a cache's hit rate, the disk tier's read rate and the bytes a
    batch reads over PCIe from pinned host memory (zero-copy), since start."""

    def __init__(self, features) -> None:
        if isinstance(features, dict) and features and all(hasattr(f, "bytes_exchanged") for f in features.values()):
            features = _SummedStores(features)  # a typed partitioned run: a store per node type, read as one
        # a partitioned run's store: its static halo cache's hits, and the bytes it exchanges with peers
        self.net = features if hasattr(features, "bytes_exchanged") else None
        self.cache = features if hasattr(features, "backing") or self.net is not None else None
        bottom = features
        while hasattr(bottom, "backing"):
            bottom = bottom.backing
        self.disk = bottom if getattr(bottom, "mode", None) in ("direct", "pread") else None
        on_gpu = getattr(getattr(bottom, "device", None), "type", None) == "cuda"
        self.pcie = bottom if on_gpu and getattr(bottom, "pinned", False) else None
        self.start = time.perf_counter()
        self.batches = 0
        self.hits, self.misses = self._counts()
        self.bytes = self.disk.stats.bytes_moved if self.disk is not None else 0
        self.pcie_bytes = self.pcie.stats.bytes_moved if self.pcie is not None else 0
        self.net_bytes = self.net.bytes_exchanged if self.net is not None else 0

    @property
    def shown(self) -> bool:
        """Whether there is a cache, a disk tier or a PCIe tier to report on."""
        return self.cache is not None or self.disk is not None or self.pcie is not None

    def _pcie_mb(self) -> float:
        return (self.pcie.stats.bytes_moved - self.pcie_bytes) / 1e6 if self.pcie is not None else 0.0

    def _counts(self) -> tuple[int, int]:
        return (self.cache.stats.hits, self.cache.stats.misses) if self.cache is not None else (0, 0)

    def totals(self) -> dict:
        """Hit rate and disk megabytes read since start (for the log)."""
        hits, misses = self._counts()
        looked_up = hits + misses - self.hits - self.misses
        disk = (self.disk.stats.bytes_moved - self.bytes) if self.disk is not None else 0
        totals = {"hit_rate": (hits - self.hits) / looked_up if looked_up else None}
        if self.disk is not None:  # no disk tier (a partitioned run's part, memory): nothing was read from disk
            totals["disk_mb"] = round(disk / 1e6, 1)
        if self.pcie is not None:
            totals["pcie_mb"] = round(self._pcie_mb(), 1)
        return {**totals, **self.network()}

    def network(self) -> dict:
        """A partitioned run's feature exchange since start: halo cache hit rate, megabytes this rank sent and received
        and, over the batches shown, kilobytes per step (empty for other stores)."""
        if self.net is None:
            return {}
        hits, misses = self._counts()
        looked_up = hits + misses - self.hits - self.misses
        shown = {"hit_rate": round((hits - self.hits) / looked_up, 4) if looked_up else None,
                 "net_mb": round(self._net_kb() / 1e3, 3)}
        if self.batches:
            shown["net_kb_per_step"] = round(self._net_kb() / self.batches, 1)
        return shown

    def _net_kb(self) -> float:
        return (self.net.bytes_exchanged - self.net_bytes) / 1e3

    def postfix(self) -> dict:
        """The progress bar's fields after one more batch."""
        self.batches += 1
        shown = {}
        hits, misses = self._counts()
        if hits + misses > self.hits + self.misses:
            shown["hit"] = f"{(hits - self.hits) / (hits + misses - self.hits - self.misses):.0%}"
        if self.disk is not None:
            seconds = max(time.perf_counter() - self.start, 1e-9)
            shown["disk_MB_s"] = f"{(self.disk.stats.bytes_moved - self.bytes) / seconds / 1e6:.0f}"
        if self.pcie is not None:
            shown["pcie_MB_batch"] = f"{self._pcie_mb() / self.batches:.1f}"
        if self.net is not None:
            shown["net_KB_batch"] = f"{self._net_kb() / self.batches:.0f}"
        return shown


class _SummedStores:
    """A typed partitioned run's feature stores (a dict by node type) read as one by :class:`_FeatureReads`: their
    halo caches' hits and misses and their exchanged bytes summed over the node types."""

    def __init__(self, stores: dict) -> None:
        self.stores = list(stores.values())

    @property
    def bytes_exchanged(self) -> int:
        return sum(store.bytes_exchanged for store in self.stores)

    @property
    def stats(self) -> GatherStats:
        return GatherStats(hits=sum(store.stats.hits for store in self.stores),
                           misses=sum(store.stats.misses for store in self.stores))


def _class_targets_out_of_range(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor | None:
    """For class-index targets of ``[batch, classes]`` logits, the mask of those outside ``[0, classes)``; else None."""
    if out.dim() != 2 or target.dim() != 1 or target.dtype.is_floating_point or target.dtype == torch.bool:
        return None
    return (target < 0) | (target >= out.shape[1])


@dataclass(frozen=True)
class _Targets:
    """What a step's error about its class targets names, kept until its count is read (not the batch: its
    features)."""

    mask: torch.Tensor  # the targets outside [0, classes)
    classes: int
    seeds: torch.Tensor | None
    labels: torch.Tensor | None


def _target_error(targets: _Targets, step: int) -> DatasetError:
    rows = targets.mask.nonzero().flatten()[:5].cpu()
    seeds, labels = targets.seeds, targets.labels
    ids = rows if not isinstance(seeds, torch.Tensor) else seeds.cpu()[rows]
    shown = ", ".join(f"{int(i)}" + ("" if labels is None else f" (label {int(labels.cpu()[r])})")
                      for i, r in zip(ids, rows))
    return DatasetError(
        f"{int(targets.mask.sum())} seed(s) of the batch of step {step} have a label outside [0, {targets.classes}), "
        f"the model's classes: nodes {shown}; fix the labels (or their class count) and re-import the dataset with "
        "`sparsetrain preprocess`")


def _split(stats) -> dict:
    """An epoch's time split (log, CSV and TensorBoard; not the epoch line): seconds a step, each loader stage's own
    seconds (``sample``, ``fetch``, ``to_device``; in the producer thread they overlap compute), and ``compute``, the
    loop's time not spent waiting for a batch."""
    batches = getattr(stats, "batches", 0)
    split = {"step_seconds": round(stats.total_seconds / batches, 6) if batches else None}
    for name, seconds in getattr(stats, "stage_seconds", {}).items():
        split[f"{name}_seconds"] = round(seconds, 6)
    split["compute_seconds"] = round(max(stats.total_seconds - stats.wait_seconds, 0.0), 6)
    return split


NOT_PRINTED = ("step_seconds", "sample_seconds", "fetch_seconds", "to_device_seconds", "compute_seconds", "disk_mb",
               "pcie_mb")
"""Epoch record fields the epoch line leaves out (they are in the metrics log, its CSV and TensorBoard)."""

EPOCH_FORMATS = {"epoch": "{:d}", "seconds": "{:.2f}", "seeds_per_second": "{:,.0f}", "net_mb": "{:,.1f}",
                 "net_kb_per_step": "{:,.0f}"}
"""How an epoch line shows a field; any other number (losses, accuracies, fractions) with 4 decimals."""


def _fmt(key: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return EPOCH_FORMATS.get(key, "{:.4f}").format(value)


def _fmt_setting(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    wrapped = hasattr(model, "module") and isinstance(model, torch.nn.parallel.DistributedDataParallel)
    return model.module if wrapped else model


def fit(model: torch.nn.Module, loader: Loader, *, epochs: int, lr: float = 0.01, weight_decay: float = 0.0,
        **kwargs) -> dict:
    """Train with Adam and return the summary; a shortcut for :class:`Trainer`."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    return Trainer(model, loader, optimizer, epochs=epochs, **kwargs).fit()
