"""Arrays inside an ``.npz`` file, streamed in chunks without loading them.

``np.load`` of an ``.npz`` reads a whole member into memory (``mmap_mode`` does not
apply to zip members, and OGB's are deflated). Here a member is decompressed
sequentially from any element offset, so memory is one chunk whatever its size.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sparsetrain.errors import DatasetError

_DAMAGED = "the file is truncated or damaged; download or extract it again"


class NpzMember:
    """One array of an ``.npz`` file: dtype and shape from its header, elements streamed on demand."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = Path(path), name
        self.label = f"{self.path}[{name}]"
        try:
            with zipfile.ZipFile(self.path) as archive:
                self.info = archive.getinfo(f"{name}.npy")
                with archive.open(self.info) as f:
                    version = np.lib.format.read_magic(f)
                    fmt = np.lib.format
                    reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                    self.shape, fortran, self.dtype = reader(f)
                    self.data_offset = f.tell()
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as exc:
            raise DatasetError(f"{self.path}: member {name}.npy cannot be read ({exc}); {_DAMAGED}") from None
        if fortran and len(self.shape) > 1:
            raise DatasetError(f"{self.label}: stored in Fortran order; save it with np.ascontiguousarray(...) first")
        if self.dtype.hasobject:
            raise DatasetError(f"{self.label}: holds Python objects; it must be a numeric array")
        expected = self.data_offset + self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))
        if self.info.file_size != expected:
            raise DatasetError(f"{self.label}: holds {self.info.file_size} bytes but its header says "
                               f"{self.dtype}{list(self.shape)} ({expected} bytes); {_DAMAGED}")

    @staticmethod
    def names(path: Path) -> list[str]:
        """The array names an ``.npz`` holds."""
        try:
            with zipfile.ZipFile(path) as archive:
                return [n.removesuffix(".npy") for n in archive.namelist() if n.endswith(".npy")]
        except (zipfile.BadZipFile, OSError) as exc:
            raise DatasetError(f"{path}: not a readable .npz file ({exc}); {_DAMAGED}") from None

    def elements(self, first: int, count: int, chunk: int) -> Iterator[np.ndarray]:
        """Elements ``first ... first + count`` of the flattened array, ``chunk`` at a time."""
        size = self.dtype.itemsize
        try:
            with zipfile.ZipFile(self.path) as archive, archive.open(self.info) as f:
                f.seek(self.data_offset + first * size)
                for lo in range(0, count, chunk):
                    n = min(chunk, count - lo)
                    block = np.empty(n, dtype=self.dtype)
                    if f.readinto(memoryview(block).cast("B")) != n * size:
                        raise EOFError(f"ends before element {first + lo + n}")
                    yield block
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise DatasetError(f"{self.label}: cannot be read ({exc}); {_DAMAGED}") from None

    def rows(self, chunk_rows: int) -> Iterator[np.ndarray]:
        """The array in blocks of ``chunk_rows`` rows (the first axis)."""
        width = int(np.prod(self.shape[1:], dtype=np.int64))
        rows = self.shape[0] if self.shape else 1
        for block in self.elements(0, rows * width, chunk_rows * max(width, 1)):
            yield block.reshape(-1, *self.shape[1:])

    def read(self) -> np.ndarray:
        """The whole array (for small members)."""
        if not (self.shape and self.shape[0]):
            return np.zeros(self.shape, self.dtype)
        return np.concatenate(list(self.rows(1 << 20))).reshape(self.shape)
