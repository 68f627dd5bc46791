"""Feature tiers behind one gather contract (device, pinned host, memory-mapped disk) and the caches in front of them.

Every :class:`FeatureSource` answers ``gather(ids, out=None) -> Tensor`` with the rows of ``ids`` in order:

- :class:`TensorFeatures`: a tensor in CPU or GPU memory.
- :class:`MmapFeatures`: a ``.npy`` file; reads only the requested rows (mapped, parallel ``pread``, or ``O_DIRECT``
blocks).
- :class:`PinnedFeatures`: page-locked host memory read zero-copy by a GPU kernel (or gathered by the CPU).
- :class:`CachedFeatures`: a cache (``static``/``lru``/``clock``/``sieve``/``hybrid``) in front of any of them.

Access-trace tools (``access_counts``, ``replay``, ``make_policy``) live in :mod:`sparsetrain.storage.policies`,
Belady's optimum in :mod:`sparsetrain.storage.belady`.
GPU code (numba.cuda, CUDA runtime calls) is imported only when a GPU path runs.
"""

from sparsetrain.errors import BackendError, DamagedFileError, InputError, SettingError
from sparsetrain.storage.base import FeatureSource, GatherStats
from sparsetrain.storage.cache import CachedFeatures
from sparsetrain.storage.mmap import MmapFeatures
from sparsetrain.storage.pinned import PinnedFeatures
from sparsetrain.storage.tensor import TensorFeatures

__all__ = [
    "FeatureSource",
    "GatherStats",
    "TensorFeatures",
    "MmapFeatures",
    "PinnedFeatures",
    "CachedFeatures",
    "InputError",
    "DamagedFileError",
    "SettingError",
    "BackendError",
]
