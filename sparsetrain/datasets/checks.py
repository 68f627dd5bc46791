"""Structure checks of a dataset's files: an array's dtype and shape as the format needs, streamed range and order
checks, mapping a file."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.errors import DatasetError, SparsetrainError
from sparsetrain.sampling.graph import MappedFile
from sparsetrain.storage.mmap import read_npy_header

_REBUILD = "the dataset is damaged, re-run `sparsetrain preprocess`"


SMALL_FILE_BYTES = 64 << 20
"""Files up to this size have their sha256 checked each time training opens the dataset (~0.1 s per 64 MiB)."""

_REIMPORT = "the file changed after import; re-run `sparsetrain preprocess` (`sparsetrain info DIR` checks every file)"


def check_files(folder: Path, meta: dict, small_file_bytes: int | None = None, fix: str = _REIMPORT,
                record: str = fmt.META_FILE) -> None:
    """Every array file of ``meta['files']`` has the shape and dtype meta.json recorded and the size its header
    promises; those up to ``small_file_bytes`` (default ``SMALL_FILE_BYTES``; 0: none)
    match their recorded sha256 (``record``: the file that records them, for the message). Raises
    :class:`~sparsetrain.errors.DatasetError` naming the file and ``fix``."""
    small_file_bytes = SMALL_FILE_BYTES if small_file_bytes is None else small_file_bytes
    for name, entry in meta["files"].items():
        path = folder / name
        if not path.is_file():
            raise DatasetError(f"{path}: missing; {fix}")
        try:
            shape, dtype, offset = read_npy_header(path)
        except SparsetrainError:
            raise DatasetError(f"{path}: not a readable .npy file; {fix}") from None
        if isinstance(entry, dict) and entry.get("shape") is not None and (
                list(shape) != list(entry["shape"]) or str(dtype) != entry.get("dtype", str(dtype))):
            raise DatasetError(f"{path}: holds {str(dtype)} {list(shape)} where {record} records "
                               f"{entry.get('dtype')} {list(entry['shape'])}; {fix}")
        size, expected = path.stat().st_size, offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size != expected:
            raise DatasetError(f"{path}: {size} bytes where its header describes {expected}; {fix}")
        if size <= small_file_bytes and fmt.sha256_file(path) != entry["sha256"]:
            raise DatasetError(f"{path}: sha256 does not match {record}; {fix}")


def _file_position(array: np.ndarray) -> tuple[str, int] | None:
    """``(file, byte position of array[0])`` when ``array`` is a C-contiguous slice of a read-only map of a file (its
    chunks are then read with positioned reads), else None."""
    a = array
    while isinstance(a, np.ndarray):
        if isinstance(a, np.memmap) and isinstance(a.base, mmap.mmap):
            if a.mode != "r" or not a.filename or not array.flags.c_contiguous:
                return None
            return a.filename, a.offset + (array.ctypes.data - a.ctypes.data)
        a = a.base
    return None


def array_chunks(array: np.ndarray, chunk: int, check=None):
    """``(start, entries)`` in memory one chunk at a time; ``check()`` first, before each (a mapped file may
    shrink meanwhile). A slice of a read-only map (``open_array(..., readonly=True)``) is read with positioned reads:
    a check streaming tens of GB leaves none of the file's pages mapped into the process's resident set."""
    where = _file_position(array) if len(array) else None
    row = int(np.prod(array.shape[1:], dtype=np.int64))
    for lo in range(0, len(array), chunk):
        if check is not None:
            check()
        if where is None:
            yield lo, np.asarray(array[lo : lo + chunk])
            continue
        count = (min(len(array), lo + chunk) - lo) * row
        part = np.fromfile(where[0], dtype=array.dtype, count=count, offset=where[1] + lo * row * array.dtype.itemsize)
        if len(part) != count:
            raise DatasetError(f"{where[0]}: ended while reading entries {lo}..{lo + count // row - 1}; the file was "
                               f"truncated, {_REBUILD}")
        yield lo, part.reshape((-1, *array.shape[1:]))


def format_array(folder: Path, meta: dict, name: str, dtypes: tuple[str, ...], shape: tuple, *, mmap: bool = True,
                 readonly: bool = False) -> np.ndarray:
    """Open one listed array (:func:`~sparsetrain.datasets.format.open_array`) and check that it is one of ``dtypes`` of
    ``shape`` (``None``: any length on that axis)."""
    a = fmt.open_array(folder, name, meta, mmap=mmap, readonly=readonly)
    fits = a.ndim == len(shape) and all(s is None or s == n for s, n in zip(shape, a.shape))
    if str(a.dtype) not in dtypes or not fits:
        want = f"{' or '.join(dtypes)}[{', '.join('*' if s is None else str(s) for s in shape)}]"
        raise DatasetError(f"{folder / name}: holds {a.dtype}{list(a.shape)} but the format needs {want}; {_REBUILD}")
    return a


def check_range(path: Path, array: np.ndarray, low: int, high: int | None, what: str, chunk: int, check=None,
                first: int = 0) -> None:
    """Every entry in ``[low, high)`` (``high=None``: no upper end), one chunk in memory at a time.

    ``array`` may be a part of the file starting at entry ``first`` (messages count entries of the file).
    """
    for lo, part in array_chunks(array, chunk, check):
        lo += first
        if len(part) == 0:
            continue
        bad = part < low if high is None else (part < low) | (part >= high)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            allowed = f">= {low}" if high is None else f"in [{low}, {high})"
            raise DatasetError(f"{path}: entry {lo + i} is {what} {part[i]}, which must be {allowed}; {_REBUILD}")


def check_increasing(path: Path, array: np.ndarray, strict: bool, what: str, chunk: int, check=None) -> None:
    previous = None
    for lo, part in array_chunks(array, chunk, check):
        if len(part) == 0:
            continue
        joined = part if previous is None else np.concatenate([[previous], part])
        step = np.diff(joined)
        bad = step <= 0 if strict else step < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0]) + (lo if previous is None else lo - 1)
            order = "increase" if strict else "not decrease"
            raise DatasetError(f"{path}: entry {i + 1} is {array[i + 1]} after {array[i]}; {what} must {order}; "
                               f"{_REBUILD}")
        previous = part[-1]


def mapped_file(folder: Path, name: str) -> MappedFile:
    try:
        return MappedFile(folder / name)
    except FileNotFoundError:
        raise DatasetError(f"{folder / name}: missing; the dataset is incomplete, re-run `sparsetrain "
                           "preprocess`") from None
    except OSError as exc:
        raise DatasetError(f"{folder / name}: cannot be opened ({exc.strerror}); check its permissions") from None


def check_split_labels(where: str, labels: torch.Tensor, split: dict[str, torch.Tensor],
                       num_classes: int | None) -> None:
    """Every node of every split has a label in ``[0, num_classes)``; raises :class:`~sparsetrain.errors.DatasetError`
    naming ``where`` (the labels), a few nodes and their labels."""
    if num_classes is None:
        raise DatasetError(f"{where}: meta.json records no class count for these labels; "
                           "re-run `sparsetrain preprocess`")
    for name, idx in split.items():
        picked = labels[idx]
        bad = ((picked < 0) | (picked >= num_classes)).nonzero().flatten()
        if len(bad):
            shown = ", ".join(f"node {int(idx[i])}: {int(picked[i])}" for i in bad[:3])
            raise DatasetError(f"{where}: {len(bad)} {name} node(s) have a label outside [0, {num_classes}) ({shown}); "
                               "fix the labels (or --num-classes) and re-run `sparsetrain preprocess`")


def check_eval_splits(folder: Path, split: dict[str, torch.Tensor]) -> None:
    """The dataset's val and test splits, when stored, hold nodes: training reports the test accuracy at the best
    validation epoch, which an empty one makes NaN. Raises :class:`~sparsetrain.errors.DatasetError` naming the file."""
    for name in ("val", "test"):
        if name in split and len(split[name]) == 0:
            raise DatasetError(f"{folder / fmt.split_file(name)}: holds no nodes, so training has no {name} accuracy "
                               "to report; re-import with --val-idx and --test-idx files that list nodes, or with no "
                               "split files for a random split (--split)")


def check_trainable_labels(ds) -> None:
    """What ``train`` checks of a node-classification dataset's labels and splits before training (``sparsetrain
    info`` runs it too, so a folder re-signed after an edit is reported by both): the target type's val and test
    splits hold nodes, and every split node's label is a class."""
    target = ds.target_type
    if target is None or target not in ds.labels_by_type or not ds.split:
        return
    check_eval_splits(ds.path, ds.split)
    where = str(ds.path / ds.meta["labels"][target]["file"])
    where += "" if target == fmt.NODE else f" (node type {target!r})"
    check_split_labels(where, ds.labels_by_type[target], ds.split, ds.num_classes_of(target))
