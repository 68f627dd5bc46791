"""Read a dataset's CSC in chunks of columns with ``pread``: nothing is mapped, so the resident set holds one chunk,
however large the graph (a mapped file's pages would count in the RSS as they are read)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.errors import DatasetError

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


_DAMAGED = "the file changed after import, re-run `sparsetrain preprocess` (`sparsetrain info DIR` checks every file)"


class CSCChunks:
    """The columns of a homogeneous dataset's CSC, ``(first column, indptr[c0 : c1 + 1], indices of those columns,
    weights or None)`` a chunk at a time."""

    def __init__(self, ds: GraphDataset, chunk_edges: int = CHUNK_EDGES, chunk_columns: int = CHUNK_COLUMNS,
                 weights: bool = False) -> None:
        files = ds.meta["files"]
        self.indptr = NpyFile.open(ds.path / fmt.INDPTR)
        self.indices = NpyFile.open(ds.path / fmt.INDICES)
        self.weights = NpyFile.open(ds.path / fmt.EDGE_WEIGHT) if weights and fmt.EDGE_WEIGHT in files else None
        self.num_nodes = self.indptr.shape[0] - 1
        self.num_edges = self.indices.shape[0]
        self.chunk_edges = chunk_edges
        self.chunk_columns = chunk_columns

    def _check_ptr(self, c0: int, ptr: np.ndarray) -> None:
        """The kernels index by these offsets unchecked: they start at 0, never decrease and end at the edge count."""
        first_ok = c0 > 0 or ptr[0] == 0
        last_ok = c0 + len(ptr) - 1 < self.num_nodes or ptr[-1] == self.num_edges
        if not (first_ok and last_ok and bool((np.diff(ptr) >= 0).all()) and ptr[-1] <= self.num_edges):
            raise DatasetError(f"{self.indptr.path}: column offsets near column {c0} are not the non-decreasing "
                               f"0..{self.num_edges} of {self.num_edges} edges; {_DAMAGED}")

    def __iter__(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        fds = [os.open(f.path, os.O_RDONLY) for f in (self.indptr, self.indices, self.weights) if f is not None]
        try:
            c0 = 0
            while c0 < self.num_nodes:
                ptr = self.indptr.read(fds[0], c0, min(self.num_nodes, c0 + self.chunk_columns) + 1)
                # as many columns as fit in chunk_edges, at least one
                c1 = c0 + max(1, int(np.searchsorted(ptr, ptr[0] + self.chunk_edges, side="right")) - 1)
                ptr = ptr[: c1 - c0 + 1]
                self._check_ptr(c0, ptr)
                lo, hi = int(ptr[0]), int(ptr[-1])
                idx = self.indices.read(fds[1], lo, hi)
                if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.num_nodes):
                    bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
                    raise DatasetError(f"{self.indices.path}: holds node id {bad}, outside [0, {self.num_nodes}); "
                                       f"{_DAMAGED}")
                w = self.weights.read(fds[2], lo, hi) if self.weights is not None else None
                yield c0, ptr, idx, w
                c0 = c1
        finally:
            for fd in fds:
                os.close(fd)
