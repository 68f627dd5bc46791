"""Atomic creation of a dataset folder.

Everything is written into a hidden temp folder beside the target
(``.<name>.tmp-<pid>-<random>``); only a complete, checksummed, fsynced folder
is renamed into place. A failed or interrupted run leaves the target as it was.

Replacing a dataset (``--overwrite``) swaps the two folders in one atomic step
(Linux ``renameat2(RENAME_EXCHANGE)``), so the path holds the old or the new
dataset at every instant; the old one, now under the temp name, is then deleted.
Where the filesystem cannot swap, the old folder is first renamed aside
(``.<name>.old-<pid>-<random>``) and the new one renamed in; a run killed between
the two renames leaves no dataset at the path, and the next writer for that path
restores the old one (see :func:`recover_interrupted`).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import re
import secrets
import shutil
from pathlib import Path

import numpy as np

from sparsetrain._process import pid_alive
from sparsetrain._sigbus import watch
from sparsetrain._version import __version__
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.outputs import DATASET, check_output_path
from sparsetrain.errors import OutputExistsError


def check_output(out_dir: Path, overwrite: bool) -> None:
    """Refuse, before any work, to write over something we must not replace, or into a data folder
    (:func:`~sparsetrain.datasets.outputs.check_output_path`)."""
    check_output_path("--out", out_dir, creates=DATASET)
    if not out_dir.exists():
        if out_dir.parent.exists() and not out_dir.parent.is_dir():
            raise OutputExistsError(f"{out_dir.parent}: is a file, so --out cannot be created inside it; choose "
                                    "another --out")
        return
    if not overwrite:
        raise OutputExistsError(f"{out_dir}: already exists; pass --overwrite (overwrite=True) to replace it, or "
                                "choose another --out")
    is_dataset = (out_dir / fmt.META_FILE).is_file()
    if not out_dir.is_dir() or (not is_dataset and any(out_dir.iterdir())):
        raise OutputExistsError(
            f"{out_dir}: exists and is not a sparsetrain dataset; refusing to replace it even with --overwrite, choose "
            "another --out"
        )


def leftovers(out_dir: Path, kind: str) -> list[Path]:
    """``.<name>.<kind>-<pid>-<random>`` folders beside ``out_dir`` whose writer is dead. Matched by name, not by a
    glob: an ``--out`` named ``p*`` or ``p[1]`` must not take ``p2``'s or ``p1``'s (nor ``a**b`` be a bad pattern)."""
    pattern = re.compile(re.escape(f".{out_dir.name}.{kind}-") + r"(\d+)(?:-.*)?")
    found = []
    for entry in os.scandir(out_dir.parent):
        match = pattern.fullmatch(entry.name)
        if match and not pid_alive(int(match.group(1))):
            found.append(Path(entry.path))
    return sorted(found)


def _complete(folder: Path) -> bool:
    """``folder`` has a readable meta.json and every file it lists (a partly deleted folder lacks some)."""
    try:
        meta = fmt.read_meta(folder)
        return all((folder / name).is_file() for name in meta["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _remove(path: Path) -> None:
    """Delete a replaced dataset: the link itself when ``--out`` was a symlink to a folder, else the folder."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def recover_interrupted(out_dir: str | os.PathLike) -> None:
    """Undo what a killed writer for ``out_dir`` left beside it.

    A dataset moved aside (``.old-*``) is renamed back when nothing is at ``out_dir``,
    else deleted; unfinished temp folders (``.tmp-*``) are deleted. Only leftovers of dead
    processes are touched.
    """
    out_dir = Path(out_dir).absolute()
    for old in leftovers(out_dir, "old"):
        if not out_dir.exists() and _complete(old):
            os.rename(old, out_dir)
            fmt.fsync_path(out_dir.parent)
        else:
            _remove(old)
    for tmp in leftovers(out_dir, "tmp"):
        _remove(tmp)


_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.cache
def _renameat2():
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError, TypeError):  # not Linux / glibc < 2.28
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries in one atomic step; False where the platform or filesystem cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` only if nothing is at ``dst`` (Linux ``RENAME_NOREPLACE``: two writers racing for
    one path cannot both win, and the later never replaces the earlier's result); :class:`OutputExistsError` if
    something is."""
    renameat2 = _renameat2()
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise OutputExistsError(f"{dst}: appeared while this run worked (another run writing there?); pass "
                                    "--overwrite to replace it, or choose another --out")
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(src), None, str(dst))
    if dst.exists() or dst.is_symlink():  # no RENAME_NOREPLACE here: the check and the rename are two steps
        raise OutputExistsError(f"{dst}: appeared while this run worked (another run writing there?); pass "
                                "--overwrite to replace it, or choose another --out")
    os.rename(src, dst)


def move_into_place(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished folder ``tmp`` to ``out``. Without ``overwrite`` only if nothing is at ``out``; with it,
    what is there is swapped out in one atomic step where the filesystem can (else moved aside, then renamed over)
    and deleted: a symlinked ``out`` loses the link, never the folder it pointed to, and nothing is left beside it."""
    if not (out.exists() or out.is_symlink()):
        try:
            _rename_noreplace(tmp, out)
            fmt.fsync_path(out.parent)
            return
        except OutputExistsError:
            if not overwrite:
                raise
    elif not overwrite:
        raise OutputExistsError(f"{out}: already exists; pass --overwrite to replace it, or choose another --out")
    if _exchange(tmp, out):
        old = tmp  # now holds what was at out; if killed while deleting it, a dead pid's .tmp-* goes next time
    else:
        old = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(out, old)
        os.rename(tmp, out)
    fmt.fsync_path(out.parent)
    _remove(old)


def _npy_header(dtype: np.dtype, shape: tuple[int, ...], length: int | None = None) -> bytes:
    """A version 1.0 .npy header, padded to a multiple of 64 bytes or to exactly ``length``."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}).encode("latin1")
    fixed = 10 + len(text) + 1  # magic, version, 2-byte length, dict, newline
    total = length if length is not None else -(-fixed // 64) * 64
    return b"\x93NUMPY\x01\x00" + (total - 10).to_bytes(2, "little") + text + b" " * (total - fixed) + b"\n"


class ArrayFile:
    """A .npy file of a fixed shape filled with ``pwrite`` (rows at given positions, or appended).

    Nothing is memory-mapped, so written pages sit in the page cache, never in
    this process's resident set: writing a 28 GiB feature file costs one chunk of RSS.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        # room for a row count of 20 digits, so that shrink() can rewrite the header in place
        self.offset = len(_npy_header(self.dtype, (10**19, *self.shape[1:])))
        with open(self.path, "wb") as f:
            f.write(_npy_header(self.dtype, self.shape, self.offset))
            f.truncate(self.offset + self.row_bytes * self.shape[0])
        self._fd = os.open(self.path, os.O_WRONLY)
        self.rows_appended = 0

    def write_rows(self, first_row: int, rows: np.ndarray) -> None:
        """Write ``rows`` (of the file's row shape) starting at row ``first_row``."""
        data = memoryview(np.ascontiguousarray(rows, dtype=self.dtype)).cast("B")
        at = self.offset + first_row * self.row_bytes
        while data:
            done = os.pwrite(self._fd, data, at)
            data, at = data[done:], at + done

    def append(self, rows: np.ndarray) -> None:
        """Write ``rows`` after the last appended row."""
        self.write_rows(self.rows_appended, rows)
        self.rows_appended += len(rows)

    def shrink(self, num_rows: int) -> None:
        """Keep only the first ``num_rows`` rows (the header is rewritten in place)."""
        self.shape = (int(num_rows), *self.shape[1:])
        os.pwrite(self._fd, _npy_header(self.dtype, self.shape, self.offset), 0)
        os.ftruncate(self._fd, self.offset + self.row_bytes * self.shape[0])

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ArrayFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DatasetWriter:
    """Builds a dataset in a temp folder; :meth:`commit` checksums it and renames it into place.

    Use as a context manager: leaving the block by an exception removes the temp folder.
    """

    def __init__(self, out_dir: str | os.PathLike, overwrite: bool = False):
        self.out_dir = Path(out_dir).absolute()
        self.overwrite = overwrite
        if self.out_dir.parent.is_dir():
            recover_interrupted(self.out_dir)
        check_output(self.out_dir, overwrite)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = self.out_dir.parent / f".{self.out_dir.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        self.tmp_dir.mkdir()
        self._arrays: list[str] = []

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.tmp_dir.exists():
            shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def scratch(self, name: str) -> Path:
        """A path for intermediate files; removed with the temp folder, never part of the dataset."""
        return self.tmp_dir / f"scratch-{name}"

    def new_array(self, name: str, shape: tuple[int, ...], dtype) -> np.memmap:
        """A writable memory-mapped .npy that becomes part of the dataset."""
        self._arrays.append(name)
        array = np.lib.format.open_memmap(self.tmp_dir / name, mode="w+", dtype=np.dtype(dtype),
                                          shape=tuple(int(s) for s in shape))
        watch(array, self.tmp_dir / name, fix="run again")
        return array

    def adopt(self, scratch: Path, name: str) -> None:
        """Make a finished scratch .npy part of the dataset as ``name`` (a rename, no copy)."""
        os.replace(scratch, self.tmp_dir / name)
        self._arrays.append(name)

    def stream_array(self, name: str, shape: tuple[int, ...], dtype, *, scratch: bool = False) -> ArrayFile:
        """A .npy filled by plain writes (see :class:`ArrayFile`); part of the dataset unless ``scratch``."""
        if scratch:
            return ArrayFile(self.scratch(name), shape, dtype)
        self._arrays.append(name)
        return ArrayFile(self.tmp_dir / name, shape, dtype)

    def save_array(self, name: str, array: np.ndarray) -> None:
        self._arrays.append(name)
        np.save(self.tmp_dir / name, np.ascontiguousarray(array), allow_pickle=False)

    def commit(self, meta: dict) -> Path:
        """Checksum every array, write meta.json (the current format version), fsync, and rename the folder into
        place."""
        for scratch in self.tmp_dir.glob("scratch-*"):
            scratch.unlink()
        files = {}
        for name in self._arrays:
            path = self.tmp_dir / name
            header = np.load(path, mmap_mode="r", allow_pickle=False)
            files[name] = {"dtype": str(header.dtype), "shape": list(header.shape), "sha256": fmt.sha256_file(path)}
            del header
            fmt.fsync_path(path)
        meta = {"format": fmt.FORMAT_NAME, "format_version": fmt.FORMAT_VERSION,
                "created_by": f"sparsetrain {__version__}", **meta, "files": files}
        meta_path = self.tmp_dir / fmt.META_FILE
        with open(meta_path, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        fmt.fsync_path(self.tmp_dir)

        if self.out_dir.exists():
            check_output(self.out_dir, self.overwrite)  # it may have appeared while we worked
        move_into_place(self.tmp_dir, self.out_dir, self.overwrite)
        return self.out_dir
