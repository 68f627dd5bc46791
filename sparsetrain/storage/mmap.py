"""`MmapFeatures`: a feature table in a ``.npy`` file on disk; a gather reads only the rows asked for."""

from __future__ import annotations

import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from sparsetrain._sigbus import watch
from sparsetrain.errors import DamagedFileError, SettingError
from sparsetrain.storage.base import FeatureSource, torch_dtype_of, widen
from sparsetrain.storage.file_reads import (
    DIRECT_BLOCK_BYTES,
    MAX_RUN_BYTES,
    RESIDENCY_SAMPLE,
    advise_random,
    advise_rows,
    aligned_empty,
    plan_block_runs,
    read_block_runs,
    read_rows,
    resident_fraction,
)
from sparsetrain.storage.gather_kernels import gather_rows


def read_npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data_offset)`` of a C-ordered ``.npy`` file, without reading its data."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                shape, fortran, dtype = np.lib.format._read_array_header(f, version)
            offset = f.tell()
    except FileNotFoundError:
        raise DamagedFileError(f"{path}: no such feature file; pass the path of a .npy file (a dataset's "
                               "features.npy)") from None
    except (ValueError, OSError) as exc:
        raise DamagedFileError(f"{path}: not a readable .npy file ({exc}); re-create it with numpy.save") from None
    if fortran and len(shape) > 1:
        raise DamagedFileError(f"{path}: stored in Fortran order; re-save it C-ordered with np.save(path, "
                               "np.ascontiguousarray(a))")
    if dtype.hasobject or len(shape) < 1:
        raise DamagedFileError(f"{path}: holds {dtype}{list(shape)}; a feature file needs a numeric array with one row "
                               "per node")
    return tuple(shape), dtype, offset


class MmapFeatures(FeatureSource):
    """A feature table in a ``.npy`` file; ``gather`` reads the requested rows only, returning CPU tensors.

    ``mode="mmap"`` (default): the file is mapped read-only once and rows are copied by a parallel Numba
    gather with software prefetch. ``mode="pread"``: rows are read with parallel ``pread`` calls on
    sorted ids, merging reads whose gap is at most ``coalesce_bytes``; slower on a warm page cache, but
    no memory access ever touches the file's pages, so even a file truncated in the middle of a gather
    yields an error rather than a SIGBUS. In both modes the file is checked against what was opened
    before every gather (size, inode), so a file that shrinks, vanishes or is replaced raises
    :class:`~sparsetrain.errors.DamagedFileError` instead of crashing the process; a mapped read that
    races a truncation (after the check) ends the process with one line naming the file (``sparsetrain._sigbus``).
    ``advise``: ``POSIX_FADV_WILLNEED`` on the rows before reading them, so the kernel reads them all
    at once; ``"auto"`` does it when a sample of the rows is not in the page cache. Off by default:
    it costs a sort and a system call per run of rows, and paid off only on slow disks.

    ``mode="direct"``: for files larger than memory. The file is opened with ``O_DIRECT`` and read in
    aligned blocks (``block_bytes``: the smallest the disk takes, 512 B to 4 KiB) holding the requested rows only
    (readahead off, ``POSIX_FADV_RANDOM``), by
    ``io_threads`` threads each with one read in flight, so the page cache neither fills with the file
    nor decides what is read; the only memory is one 1 MiB buffer per thread. On a file system without
    ``O_DIRECT`` (tmpfs) it falls back to the same reads through the page cache (``direct`` is then False).
    ``stats.bytes_moved`` counts the bytes read from the file (whole blocks).
    """

    def __init__(self, path: str | os.PathLike, *, mode: str = "mmap", coalesce_bytes: int = 4096,
                 advise: bool | str = False, io_threads: int = 32) -> None:
        if mode not in ("mmap", "pread", "direct"):
            raise SettingError(f"MmapFeatures: mode must be 'mmap', 'pread' or 'direct', got {mode!r}")
        if int(io_threads) < 1:
            raise SettingError(f"MmapFeatures: io_threads must be at least 1, got {io_threads}")
        if advise not in (True, False, "auto"):
            raise SettingError(f"MmapFeatures: advise must be True, False or 'auto', got {advise!r}")
        self.path = Path(path)
        shape, np_dtype, self.data_offset = read_npy_header(self.path)
        super().__init__(shape, torch_dtype_of(np_dtype), "cpu")
        self.np_dtype = np_dtype
        self.mode = mode
        self.coalesce_bytes = int(coalesce_bytes)
        self.advise = advise
        self.io_threads = int(io_threads)
        self.direct = False
        self.block_bytes = DIRECT_BLOCK_BYTES
        self._run_bytes = max(MAX_RUN_BYTES, 2 * DIRECT_BLOCK_BYTES + self.row_bytes)  # one read; a row always fits
        self._expected_size = self.data_offset + self.nbytes
        self._map = None
        self._bytes = None
        self._read_fd = -1
        self._pool = None
        self._local = threading.local()
        self._open()

    def _open(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise DamagedFileError(f"{self.path}: no such feature file") from None
        info = os.fstat(self._fd)
        self._identity = (info.st_dev, info.st_ino)
        if info.st_size < self._expected_size:
            self.close()
            raise DamagedFileError(
                f"{self.path}: {info.st_size} bytes but its header promises {self._expected_size} "
                f"({self.num_rows} rows x {self.row_bytes} bytes); the file is truncated, re-create it"
            )
        if self.mode == "mmap" and self.nbytes:
            self._map = mmap.mmap(self._fd, self._expected_size, access=mmap.ACCESS_READ)
            raw = np.frombuffer(self._map, dtype=np.uint8, count=self.nbytes, offset=self.data_offset)
            watch(raw, self.path)  # a gather racing a truncation: one line naming the file, not a SIGBUS death
            self._bytes = raw.reshape(self.num_rows, self.row_bytes)
        if self.mode == "direct":
            self._read_fd = self._open_direct()
            advise_random(self._read_fd)

    def _open_direct(self) -> int:
        """An ``O_DIRECT`` descriptor when the file system takes one, else the plain one; sets ``block_bytes`` to the
        smallest read size and alignment ``O_DIRECT`` accepts here (probed: 512 B on most disks, 16x less to read
        per row than 4 KiB pages)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            return self._fd
        probe = aligned_empty(DIRECT_BLOCK_BYTES)
        for block in (512, 1024, 2048, DIRECT_BLOCK_BYTES):
            try:
                os.preadv(fd, [probe[:block]], block)
            except OSError:
                continue
            self.direct = True
            self.block_bytes = block
            return fd
        os.close(fd)
        return self._fd

    def close(self) -> None:
        """Close the file (and its mapping); later gathers raise."""
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.shutdown(wait=True)
        read_fd, self._read_fd = getattr(self, "_read_fd", -1), -1
        if read_fd >= 0 and read_fd != getattr(self, "_fd", -1):
            os.close(read_fd)
        self._bytes = None
        mapping, self._map = getattr(self, "_map", None), None
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:  # a view handed out by numpy() still uses it; it goes with that view
                pass
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_fd=-1, _read_fd=-1, _map=None, _bytes=None, _pool=None, _local=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
        self.direct = False
        self.block_bytes = DIRECT_BLOCK_BYTES
        self._open()

    def check_file(self) -> None:
        """Raise :class:`DamagedFileError` if the file is closed, gone, replaced or shorter than when opened."""
        if self._fd < 0:
            raise DamagedFileError(f"{self.path}: the store was closed; open a new MmapFeatures")
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            raise DamagedFileError(
                f"{self.path}: the feature file was deleted while the store was open; restore it and open a new "
                "MmapFeatures"
            ) from None
        if (info.st_dev, info.st_ino) != self._identity:
            raise DamagedFileError(
                f"{self.path}: the feature file was replaced by another file while the store was open; open a new "
                "MmapFeatures"
            )
        self._check_size(os.fstat(self._fd).st_size)

    def _check_size(self, size: int) -> None:
        if size < self._expected_size:
            raise DamagedFileError(
                f"{self.path}: the feature file shrank to {size} bytes while open (needs {self._expected_size} for "
                f"{self.num_rows} rows); it was truncated or rewritten in place, restore it and open a new MmapFeatures"
            )

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        self.check_file()
        rows = out.reshape(out.shape[0], -1).view(torch.uint8).numpy()
        ids_np = ids.cpu().numpy()
        if self._should_advise(ids_np):
            advise_rows(self._fd, self.data_offset, self.row_bytes, ids_np, self.coalesce_bytes)
        if self.mode == "mmap":
            gather_rows(*widen(self._bytes, rows), ids=ids_np)
            self.stats.bytes_moved += ids_np.size * self.row_bytes
            return
        if self.mode == "direct":
            self._read_direct(ids_np.astype(np.int64, copy=False), rows)
            return
        short, moved = read_rows(self._fd, self.data_offset, self.row_bytes, ids_np.astype(np.int64, copy=False), rows,
                                 coalesce_bytes=self.coalesce_bytes, advise=False)
        if short:
            self._check_size(os.fstat(self._fd).st_size)
            raise DamagedFileError(f"{self.path}: {short} read(s) came back short; the file is being modified, open a "
                                   "new MmapFeatures")
        self.stats.bytes_moved += moved

    def _read_direct(self, ids: np.ndarray, rows: np.ndarray) -> None:
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        gap = self.coalesce_bytes - self.coalesce_bytes % self.block_bytes
        start, length, need, first = plan_block_runs(sorted_ids, self.data_offset, self.row_bytes, self.block_bytes,
                                                     gap, self._run_bytes)
        args = (self._read_fd, start, length, need, first, sorted_ids, order, self.data_offset, self.row_bytes, rows)
        runs = start.size
        if runs < 2 * self.io_threads or self.io_threads == 1:
            short = read_block_runs(*args, self._buffer(), 0, runs)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.io_threads, thread_name_prefix="sparsetrain-disk")
            bounds = np.linspace(0, runs, 4 * self.io_threads + 1).astype(np.int64)
            parts = self._pool.map(lambda lo_hi: read_block_runs(*args, self._buffer(), *lo_hi),
                                   zip(bounds[:-1], bounds[1:]))
            short = sum(parts)
        if short:
            self._check_size(os.fstat(self._fd).st_size)
            raise DamagedFileError(f"{self.path}: {short} read(s) came back short; the file is being modified, open a "
                                   "new MmapFeatures")
        self.stats.bytes_moved += int(length.sum())

    def _buffer(self) -> np.ndarray:
        """This thread's aligned read buffer (one read's worth)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = aligned_empty(self._run_bytes)
        return buf

    def _direct_rows(self, ids: np.ndarray) -> np.ndarray | None:
        if self.mode != "mmap":
            return None
        self.check_file()
        if ids.size and self._should_advise(ids):
            advise_rows(self._fd, self.data_offset, self.row_bytes, ids, self.coalesce_bytes)
        return self._bytes

    def _should_advise(self, ids: np.ndarray) -> bool:
        if self.advise != "auto":
            return bool(self.advise)
        if self._map is None or ids.size < RESIDENCY_SAMPLE:
            return False
        base = np.frombuffer(self._map, dtype=np.uint8, count=1).ctypes.data
        return resident_fraction(base, self.data_offset, self.row_bytes, ids) < 0.5

    def numpy(self) -> np.ndarray:
        """The whole table as a read-only ``np.memmap`` (for whole-table work; gathers should use ``gather``)."""
        self.check_file()
        array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        watch(array, self.path)
        return array

    def tensor(self) -> torch.Tensor:
        """The whole table as a CPU tensor over a copy-on-write memory map (no read until touched)."""
        self.check_file()
        array = np.load(self.path, mmap_mode="c", allow_pickle=False)
        watch(array, self.path)
        return torch.from_numpy(array)

    def clone(self) -> torch.Tensor:
        """The whole table read into memory (what ``tensor.clone()`` gives for an in-memory table)."""
        return self.tensor().clone()

    def to(self, *args, **kwargs) -> torch.Tensor:
        """The whole table as a tensor on another device / dtype (reads the file)."""
        return self.tensor().to(*args, **kwargs)

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """Let torch functions (``torch.equal``, ``torch.cat``...) see the store as its whole table."""

        def unwrap(value):
            if isinstance(value, MmapFeatures):
                return value.tensor()
            if isinstance(value, (list, tuple)):
                return type(value)(unwrap(v) for v in value)
            return value

        return func(*unwrap(args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})

    def __getitem__(self, index) -> torch.Tensor:
        """``store[ids]`` gathers rows; slices and ints index the mapped table."""
        is_ids = isinstance(index, (torch.Tensor, np.ndarray)) and getattr(index, "ndim", 0) == 1
        if is_ids and index.dtype not in (torch.bool, np.bool_):
            return self.gather(index)
        return self.tensor()[index]

    def __repr__(self) -> str:
        return f"MmapFeatures({self.path}, shape={list(self.shape)}, dtype={self.dtype})"
