"""The one GPU-residency rule: whether data of some size lives in GPU memory or stays on the host.

The engine's plan (:mod:`sparsetrain.engine.plan`: ``--features auto``, the sampler's graph) and the PyG drop-in's
``device=`` (:func:`sparsetrain.pyg.device.placement_plan`) both ask :func:`fits_on_gpu`, so a graph or a feature table
that the engine keeps on the GPU is the one the drop-in keeps there.
"""

from __future__ import annotations

GPU_RESIDENT_FRACTION = 0.4
"""Of the GPU's free memory, the share one table (the features, then the graph) may take to live there; past it the
features stay in pinned host memory, read zero-copy, and the graph on the host."""


def fits_on_gpu(nbytes: int, free_bytes: int) -> bool:
    """Whether ``nbytes`` of data should live on a GPU with ``free_bytes`` free: at most
    :data:`GPU_RESIDENT_FRACTION` of it."""
    return nbytes <= GPU_RESIDENT_FRACTION * free_bytes
