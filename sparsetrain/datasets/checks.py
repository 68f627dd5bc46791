"""Structure checks of a dataset's files: an array's dtype and shape as the format needs, streamed range and order
checks, mapping a file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sparsetrain.datasets import format as fmt
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.graph import MappedFile

_REBUILD = "the dataset is damaged, re-run `sparsetrain preprocess`"


def array_chunks(array: np.ndarray, chunk: int, check=None):
    """``(start, entries)`` in memory one chunk at a time; ``check()`` first, before each (a mapped file may
    shrink meanwhile)."""
    for lo in range(0, len(array), chunk):
        if check is not None:
            check()
        yield lo, np.asarray(array[lo : lo + chunk])


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
