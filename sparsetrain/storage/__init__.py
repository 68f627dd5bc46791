"""Feature tiers behind one gather contract (device, pinned host, memory-mapped disk) and the caches in front of them.

Every store answers ``gather(ids, out=None) -> Tensor`` with the rows of ``ids`` in order:

- :class:`TensorFeatures`: a tensor in CPU or GPU memory.
- :class:`MmapFeatures`: a ``.npy`` file; reads only the requested rows (parallel ``pread``).
- :class:`PinnedFeatures`: page-locked host memory read zero-copy by a GPU kernel (or gathered by the CPU).
- :class:`CachedFeatures`: a cache (``static``/``lru``/``clock``/``hybrid``) in front of any of them.

GPU code (numba.cuda, CUDA runtime calls) is imported only when a GPU path runs.
"""

from sparsetrain.storage.base import FeatureStore, GatherStats
from sparsetrain.storage.belady import belady_hit_rate
from sparsetrain.storage.cache import CachedFeatures, as_feature_store
from sparsetrain.storage.errors import CacheBudgetError, FeatureFileError, FeatureIdError, FeatureOutputError, PinnedMemoryError
from sparsetrain.storage.mmap import MmapFeatures
from sparsetrain.storage.pinned import PinnedFeatures
from sparsetrain.storage.policies import POLICIES, access_counts, make_policy, replay
from sparsetrain.storage.tensor import TensorFeatures

__all__ = [
    "FeatureStore",
    "GatherStats",
    "TensorFeatures",
    "MmapFeatures",
    "PinnedFeatures",
    "CachedFeatures",
    "as_feature_store",
    "POLICIES",
    "make_policy",
    "replay",
    "access_counts",
    "belady_hit_rate",
    "FeatureIdError",
    "FeatureOutputError",
    "FeatureFileError",
    "CacheBudgetError",
    "PinnedMemoryError",
]
