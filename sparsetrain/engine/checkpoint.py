"""Checkpoints: atomic, checksummed, loadable with ``weights_only=True``, newest intact one wins.

A checkpoint is ``step-<global step>.pt`` (a ``torch.save`` of tensors and plain
Python values only) plus ``step-<global step>.pt.sha256``. Both are written to a
temp name, fsynced and renamed, checksum last: a checkpoint without a matching
checksum file is incomplete or damaged and is skipped, with a warning, in
favour of the previous one.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from pathlib import Path

import torch

from sparsetrain.errors import SparsetrainError

_NAME = re.compile(r"^step-(\d+)\.pt$")


class CheckpointError(SparsetrainError, RuntimeError):
    """No usable checkpoint where one was asked for."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, write) -> None:
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


def save_checkpoint(folder: str | os.PathLike, step: int, state: dict, keep: int = 3) -> Path:
    """Write ``state`` as the checkpoint of ``step``; keep the newest ``keep`` checkpoints."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{step:010d}.pt"
    _write_atomic(path, lambda f: torch.save(state, f))
    digest = _sha256(path)
    _write_atomic(path.with_name(path.name + ".sha256"), lambda f: f.write(f"{digest}  {path.name}\n".encode()))
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    for old in list_checkpoints(folder)[keep:]:
        old.unlink(missing_ok=True)
        old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    return path


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
    for path in candidates:
        if not _intact(path):
            warnings.warn(f"{path}: checksum missing or wrong (damaged or interrupted write); falling back to the previous checkpoint", stacklevel=2)
            continue
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a file that hashes right but will not unpickle safely
            warnings.warn(f"{path}: cannot be loaded safely ({exc}); falling back to the previous checkpoint", stacklevel=2)
    if candidates:
        raise CheckpointError(f"{folder}: none of the {len(candidates)} checkpoints is intact; delete the folder to start over")
    return None
