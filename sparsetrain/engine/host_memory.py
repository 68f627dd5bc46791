"""Keep freed host memory in the process heap so each minibatch reuses warm pages.

A CPU training step allocates and frees tensors of hundreds of MB (a batch's
features, each layer's activations and gradients). glibc serves allocations
above its mmap threshold (at most 32 MiB by default) with a fresh ``mmap`` and
gives them back with ``munmap`` on free, so every batch page-faults and zeroes
those pages again: on the products-scale benchmark that was 45% of the step
(1127 -> 673 ms/batch with the settings below). This is what the PyTorch CPU
tuning guide gets by preloading jemalloc or tcmalloc; here it is two
``mallopt`` calls, applied once per process, and the price is that the heap
keeps its peak size instead of shrinking between batches. (Blocks allocated by
other threads live in per-thread arenas that glibc still maps fresh; setting
``MALLOC_ARENA_MAX=1`` in the environment before start-up also covers those,
617 ms/batch in the same benchmark.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_LARGEST = 2**31 - 1  # mallopt takes an int

_applied: bool | None = None


def retain_freed_host_memory() -> bool:
    """Serve large allocations from the heap and keep freed memory for reuse (glibc only; idempotent).

    Returns whether the settings are in effect. Set ``SPARSETRAIN_KEEP_MALLOC=1``
    to leave the allocator alone (e.g. when jemalloc or tcmalloc is preloaded).
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("SPARSETRAIN_KEEP_MALLOC") == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, _LARGEST)) and bool(mallopt(_M_TRIM_THRESHOLD, _LARGEST))
    return _applied
