"""Zero-copy GPU gather (numba.cuda): device threads read the requested rows straight from mapped host memory.

Thread ``g`` copies word ``g % W`` of sorted row ``g // W`` (``W`` words per row), so a warp reads
consecutive words of consecutive rows: every request over PCIe is a full, aligned line and the
rows are visited in address order (ids sorted first). The word is the widest of 16/8/4/2/1 bytes
that divides the row and both base addresses; 16-byte words are moved as ``complex128`` (one
vector load/store, bits untouched). Import this module only when a GPU (or the Numba CUDA
simulator, ``NUMBA_ENABLE_CUDASIM=1``) is in use.
"""

from __future__ import annotations

import math

from sparsetrain._numba_cuda import cuda

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 65535
WORD_TYPESTR = {16: "<c16", 8: "<u8", 4: "<u4", 2: "<u2", 1: "|u1"}


@cuda.jit(cache=True)
def zero_copy_gather_kernel(src, sorted_ids, positions, out):
    """``out[positions[k], :] = src[sorted_ids[k], :]`` with one thread per word."""
    words = src.shape[1]
    total = sorted_ids.shape[0] * words
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for g in range(start, total, step):
        k = g // words
        w = g - k * words
        out[positions[k], w] = src[sorted_ids[k], w]


def word_bytes(row_bytes: int, *addresses: int) -> int:
    """Widest load (16, 8, 4, 2 or 1 bytes) dividing the row length and every base address."""
    for size in (16, 8, 4, 2):
        if row_bytes % size == 0 and all(a % size == 0 for a in addresses):
            return size
    return 1


def launch_gather(src, sorted_ids, positions, out, stream=0) -> None:
    """Launch the kernel over 2-D word arrays ``src``/``out`` and int64 ``sorted_ids``/``positions``."""
    total = sorted_ids.shape[0] * src.shape[1]
    if total == 0:
        return
    blocks = min(MAX_BLOCKS, math.ceil(total / THREADS_PER_BLOCK))
    zero_copy_gather_kernel[blocks, THREADS_PER_BLOCK, stream](src, sorted_ids, positions, out)


class CudaArrayView:
    """A ``__cuda_array_interface__`` over raw memory (device or mapped host), keeping ``owner`` alive."""

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str, owner=None) -> None:
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}
        self._owner = owner


def word_view(address: int, rows: int, row_bytes: int, word: int, owner=None):
    """A numba device array ``[rows, row_bytes // word]`` of ``word``-byte elements at ``address``."""
    view = CudaArrayView(address, (rows, row_bytes // word), WORD_TYPESTR[word], owner)
    return cuda.as_cuda_array(view, sync=False)
