"""Checkpoints: atomic, checksummed, loadable with ``weights_only=True``, newest intact one wins.

A checkpoint is ``step-<global step>.pt`` (a ``torch.save`` of tensors and plain
Python values only) plus ``step-<global step>.pt.sha256``. Both are written to a
temp name, fsynced and renamed, checksum last: a checkpoint without a matching
checksum file is incomplete or damaged and is skipped, with a warning, in
favour of the previous one.

A checkpoint records which run wrote it (``state["run"]``: parameter names and shapes,
dataset, batching and every setting that changes the batches or the model, whatever its value):
:func:`check_same_run` refuses to resume another run's checkpoint, a setting recorded on one
side only included, and :func:`refuse_foreign_checkpoints` refuses to start a new run in a folder
that already holds checkpoints (its keep-N pruning by step would delete the new run's).
Temp files of a write killed midway are removed by the next save or load.

Beside them, ``best.pt`` (and its ``.sha256``) holds the model weights of the epoch whose validation metric the run
reports (:func:`save_best`), what ``sparsetrain predict`` and :func:`~sparsetrain.engine.predict.load_model` read.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from pathlib import Path

import torch

from sparsetrain._process import pid_alive
from sparsetrain.errors import CheckpointError, SettingError

_NAME = re.compile(r"^step-(\d+)\.pt$")
RECORD_VERSION = 2
"""``state["run"]["record_version"]``: 2 records every batch-changing setting, always; a record without it was
written by sparsetrain 0.1 (see :func:`_from_version_1`)."""
_TEMP = re.compile(r"^\.(?:step-\d+|best)\.pt(?:\.sha256)?\.tmp-(\d+)$")
BEST = "best.pt"
"""The weights of the best epoch (by the task's validation metric), beside the step checkpoints."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path: Path, write) -> None:
    """``write(f)`` into a temp file beside ``path`` (binary), fsync, then rename it to ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _remove_stale_temps(folder: Path) -> None:
    """Temp files of checkpoint writes whose process is gone (killed midway)."""
    for path in folder.iterdir():
        if (m := _TEMP.match(path.name)) and not pid_alive(int(m.group(1))):
            path.unlink(missing_ok=True)


def save_checkpoint(folder: str | os.PathLike, step: int, state: dict, keep: int = 3) -> Path:
    """Write ``state`` as the checkpoint of ``step``; keep it and the ``keep - 1`` newest others."""
    if keep < 1:
        raise SettingError(f"keep={keep} must be at least 1 (the checkpoint just written is always kept)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(folder)
    path = folder / f"step-{step:010d}.pt"
    try:
        write_atomic(path, lambda f: torch.save(state, f))
        digest = _sha256(path)
        write_atomic(path.with_name(path.name + ".sha256"), lambda f: f.write(f"{digest}  {path.name}\n".encode()))
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:  # a full disk, a quota: the checkpoints written before stay intact (writes are atomic)
        if not path.with_name(path.name + ".sha256").is_file():
            path.unlink(missing_ok=True)  # written, but its checksum was not: never a candidate for resuming
        newest = [p.name for p in list_checkpoints(folder) if p != path][:1]
        kept = f"the newest intact one is {newest[0]}" if newest else "none was written before"
        raise CheckpointError(f"{folder}: writing the checkpoint of step {step} failed ({exc.strerror or exc}); "
                              f"{kept}; free space in the folder (or choose another --checkpoint-dir) and rerun with "
                              "--resume") from None
    for old in [p for p in list_checkpoints(folder) if p != path][keep - 1:]:
        old.unlink(missing_ok=True)
        old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    return path


def save_best(folder: str | os.PathLike, state: dict) -> Path:
    """Write ``state`` (the model's weights, the run's record, the epoch and its metrics) as ``best.pt``, atomically,
    checksum last."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / BEST
    try:
        write_atomic(path, lambda f: torch.save(state, f))
        digest = _sha256(path)
        write_atomic(path.with_name(path.name + ".sha256"), lambda f: f.write(f"{digest}  {path.name}\n".encode()))
    except OSError as exc:  # the step checkpoints stay intact; a best.pt without its checksum is never loaded
        raise CheckpointError(f"{folder}: writing {BEST} failed ({exc.strerror or exc}); free space in the folder (or "
                              "choose another --checkpoint-dir) and rerun with --resume") from None
    return path


def load_checkpoint_file(path: str | os.PathLike) -> dict:
    """One checkpoint file's state, checked against its ``.sha256`` and loaded with ``weights_only=True``."""
    path = Path(path)
    if not _intact(path):
        raise CheckpointError(f"{path}: checksum missing or wrong (damaged or interrupted write); use another "
                              "checkpoint of the run or train again")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # hashes right but will not unpickle safely
        raise CheckpointError(f"{path}: cannot be loaded safely ({str(exc).splitlines()[0]}); train again") from None


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """Checkpoint files in ``folder``, newest step first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def _intact(path: Path) -> bool:
    sidecar = path.with_name(path.name + ".sha256")
    if not sidecar.is_file():
        return False
    recorded = sidecar.read_text().split()[:1]
    return bool(recorded) and recorded[0] == _sha256(path)


def load_latest_checkpoint(folder: str | os.PathLike) -> dict | None:
    """The newest intact checkpoint's state (``None`` when the folder has none).

    Damaged or incomplete ones are skipped with a warning. Loading uses
    ``torch.load(weights_only=True)``: no pickled code from the file runs.
    """
    candidates = list_checkpoints(folder)
    if candidates:
        _remove_stale_temps(Path(folder))
    for path in candidates:
        if not _intact(path):
            warnings.warn(f"{path}: checksum missing or wrong (damaged or interrupted write); falling back to the "
                          "previous checkpoint", stacklevel=2)
            continue
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a file that hashes right but will not unpickle safely
            warnings.warn(f"{path}: cannot be loaded safely ({exc}); falling back to the previous "
                          "checkpoint", stacklevel=2)
    if candidates:
        raise CheckpointError(f"{folder}: none of the {len(candidates)} checkpoints is intact; delete the folder to "
                              "start over")
    return None


def refuse_foreign_checkpoints(folder: str | os.PathLike) -> None:
    """Raise :class:`CheckpointError` when a run that does not resume would write into a folder holding checkpoints."""
    found = list_checkpoints(folder)
    if found:
        raise CheckpointError(
            f"{folder}: already holds checkpoints (newest {found[0].name}) of an earlier run; pass --resume "
            "(resume=True) to continue that run, or choose a new --checkpoint-dir (or empty this one) to start a new "
            "run"
        )


def _describe(key: str, recorded, current) -> str:
    if _ABSENT in (recorded, current):
        return f"{key}: checkpoint {recorded!r}, this run {current!r}"
    if key == "parameters":
        names = [n for n in dict.fromkeys([*recorded, *current]) if recorded.get(n) != current.get(n)]
        first = names[0]
        return (f"model parameters differ ({len(names)} of them, e.g. {first!r}: checkpoint "
                f"{recorded.get(first, 'absent')}, this run {current.get(first, 'absent')})")
    if key == "dataset":
        return f"dataset contents differ (checkpoint {recorded['path']}, this run {current['path']})"
    return f"{key}: checkpoint {recorded!r}, this run {current!r}"


def _from_version_1(recorded: dict) -> dict:
    """A sparsetrain 0.1 record in today's terms: ``fanout`` is ``fanouts``, no ``task`` is node classification, and
    ``temporal`` (recorded only when on, holding the strategy) is ``temporal`` and ``temporal_strategy``. Settings it
    never recorded (hidden size, target type, ...) are not compared; the parameters' shapes still are."""
    record = dict(recorded)
    if "fanout" in record:
        record["fanouts"] = record.pop("fanout")
    record.setdefault("task", "node")
    strategy = record.pop("temporal", None)
    record.update(temporal=strategy is not None, temporal_strategy=strategy, record_version=RECORD_VERSION)
    return record


def check_same_run(folder: str | os.PathLike, state: dict, identity: dict) -> None:
    """Raise :class:`CheckpointError` naming what differs when ``state`` was written by a run other than ``identity``.

    ``identity`` maps a setting to its value (``"parameters"``: name -> shape; ``"dataset"``:
    ``{"path", "sha256"}``, compared by content). Every key is compared, and one recorded on one side only is a
    difference; a record of sparsetrain 0.1 (no ``record_version``) is read by :func:`_from_version_1` and compared on
    the keys both sides have.
    """
    recorded = state.get("run")
    step = state.get("position", {}).get("step", "?")
    if recorded is None:
        warnings.warn(f"{folder}: the checkpoint of step {step} does not record which run wrote it (an older "
                      "sparsetrain); resuming it without checking that its settings match this run", stacklevel=2)
        return
    if "record_version" in recorded:
        keys = list(dict.fromkeys([*identity, *recorded]))
    else:
        recorded = _from_version_1(recorded)
        keys = [key for key in identity if key in recorded]

    def same(key: str) -> bool:
        if key not in recorded or key not in identity:
            return False
        if key == "dataset":
            return recorded[key]["sha256"] == identity[key]["sha256"]
        return recorded[key] == identity[key]

    differs = [_describe(key, recorded.get(key, _ABSENT), identity.get(key, _ABSENT)) for key in keys if not same(key)]
    if differs:
        raise CheckpointError(
            f"{folder}: its newest checkpoint (step {step}) belongs to another run: {'; '.join(differs)}; "
            "resume it with that run's settings, or choose a new --checkpoint-dir (without --resume) for this run"
        )


class _Absent:
    def __repr__(self) -> str:
        return "not recorded"


_ABSENT = _Absent()
