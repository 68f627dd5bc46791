"""Page-locked, device-mapped host memory: allocate it, or register an existing buffer (chunked on failure).

Everything CUDA is imported lazily: this module loads on CPU-only machines.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Callable

import torch

from sparsetrain.errors import BackendError

CUDA_HOST_REGISTER_PORTABLE = 1
CUDA_HOST_REGISTER_MAPPED = 2
DEFAULT_CHUNK_BYTES = 1 << 30
MIN_CHUNK_BYTES = 64 << 20
PAGE = mmap.PAGESIZE


def cuda_available() -> bool:
    """True when torch sees a CUDA device."""
    try:
        return torch.cuda.is_available()
    except Exception:  # a broken driver install must not break CPU use
        return False


def pinned_empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor, page-locked when CUDA is present (so ``.to("cuda", non_blocking=True)`` is
    async)."""
    return torch.empty(shape, dtype=dtype, pin_memory=cuda_available())


def register_chunks(
    address: int,
    nbytes: int,
    register: Callable[[int, int], bool],
    unregister: Callable[[int], None],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    min_chunk_bytes: int = MIN_CHUNK_BYTES,
) -> list[tuple[int, int]]:
    """Register ``[address, address + nbytes)`` in one call, else in page-aligned chunks that halve on failure.

    ``register(addr, size) -> ok`` and ``unregister(addr)`` do the actual work (``cudaHostRegister`` on a GPU).
    Returns the registered ``(address, size)`` pieces; on failure unregisters them and raises
    :class:`BackendError`.
    """
    if nbytes <= 0:
        return []
    if register(address, nbytes):
        return [(address, nbytes)]
    done: list[tuple[int, int]] = []
    end = address + nbytes
    at = address
    size = max(PAGE, (min(chunk_bytes, nbytes) // PAGE) * PAGE)
    while at < end:
        boundary = min(end, (at // PAGE) * PAGE + size)
        if register(at, boundary - at):
            done.append((at, boundary - at))
            at = boundary
        elif size > min_chunk_bytes:
            size = max(min_chunk_bytes, (size // 2 // PAGE) * PAGE, PAGE)
        else:
            for piece, _ in done:
                unregister(piece)
            raise BackendError(
                f"could not page-lock {nbytes / 2**30:.2f} GiB of host memory even in {min_chunk_bytes >> 20} MiB "
                f"chunks (failed at offset {at - address}); raise the locked-memory limit (ulimit -l / container "
                "memlock), free host memory, or keep the features on disk with MmapFeatures + CachedFeatures"
            )
    return done


def _clear_last_cuda_error() -> None:
    """A failed cudaHostRegister leaves a runtime error that the next torch launch check would report."""
    for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.11.0"):
        try:
            ctypes.CDLL(name).cudaGetLastError()
            return
        except OSError:
            continue


class HostRegistration:
    """``cudaHostRegister`` (portable + mapped) of an existing buffer, undone by :meth:`close`."""

    def __init__(self, address: int, nbytes: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        cudart = torch.cuda.cudart()
        flags = CUDA_HOST_REGISTER_PORTABLE | CUDA_HOST_REGISTER_MAPPED

        def register(addr: int, size: int) -> bool:
            err = cudart.cudaHostRegister(addr, size, flags)
            ok = int(getattr(err, "value", err)) == 0
            if not ok:
                _clear_last_cuda_error()
            return ok

        self._unregister = lambda addr: cudart.cudaHostUnregister(addr)
        self.pieces = register_chunks(address, nbytes, register, self._unregister, chunk_bytes)

    def close(self) -> None:
        pieces, self.pieces = self.pieces, []
        for address, _ in pieces:
            self._unregister(address)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def host_pointer_usable_on_device() -> bool:
    """Whether kernels may use a registered host pointer as is (UVA and CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM)."""
    try:
        from sparsetrain._numba_cuda import cuda

        return bool(cuda.get_current_device().CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM)
    except Exception:
        return False
