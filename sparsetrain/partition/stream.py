"""Read a dataset's arrays in chunks of rows with ``pread``: nothing is mapped, so the resident set holds one chunk,
however large the graph (a mapped file's pages would count in the RSS as they are read)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CHUNK_EDGES = 1 << 24  # in-edges read at once (64 MiB of int32 ids)
CHUNK_COLUMNS = 1 << 21  # columns read at once


@dataclass
class NpyFile:
    """A .npy file's data: where it starts, its dtype and its length (first axis)."""

    path: Path
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @classmethod
    def open(cls, path: Path) -> NpyFile:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        info = cls(Path(path), int(mapped.offset), mapped.dtype, tuple(mapped.shape))
        del mapped
        return info

    def read(self, fd: int, lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` read into memory."""
        row = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        out = np.empty((hi - lo, *self.shape[1:]), self.dtype)
        view = memoryview(out.reshape(-1).view(np.uint8))
        at, done = self.offset + lo * row, 0
        while done < len(view):
            n = os.preadv(fd, [view[done:]], at + done)
            if n <= 0:
                raise OSError(f"{self.path}: short read at byte {at + done}")
            done += n
        return out
