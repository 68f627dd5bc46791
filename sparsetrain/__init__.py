"""sparsetrain: a GPU-centric data path for large graph models and mixture-of-experts layers.

The nouns a PyG / DGL / Hugging Face user looks for are here (``st.load``, ``st.NeighborSampler``,
``st.Loader``, ``st.CachedFeatures``, ``st.MoE``...); the rest lives in the subpackages
(``sparsetrain.datasets``, ``.storage``, ``.sampling``, ``.collective``, ``.nn``, ``.moe``, ``.engine``, ``.pyg``).
Everything is imported on first use, so ``import sparsetrain`` and the CLI start fast.
"""

import importlib

from sparsetrain._version import __version__

_SUBPACKAGES = ("datasets", "storage", "sampling", "collective", "nn", "moe", "engine", "pyg", "dgl", "errors")

_NOUNS = {
    "load": "datasets",
    "from_pyg": "datasets",
    "synthesize": "datasets",
    "CSCGraph": "sampling",
    "NeighborSampler": "sampling",
    "ClusterSampler": "sampling",
    "SamplerInput": "sampling",
    "MiniBatch": "sampling",
    "FeatureSource": "storage",
    "TensorFeatures": "storage",
    "MmapFeatures": "storage",
    "PinnedFeatures": "storage",
    "CachedFeatures": "storage",
    "ShardedFeatures": "collective",
    "sparse_all_gather": "collective",
    "sparse_reduce_scatter": "collective",
    "Loader": "engine",
    "Trainer": "engine",
    "fit": "engine",
    "load_model": "engine",
    "GraphSAGE": "nn",
    "GCN": "nn",
    "GAT": "nn",
    "GraphTransformer": "nn",
    "MoE": "moe",
    "FSSDP": "moe",
}
"""Public name -> the subpackage that exports it."""

__all__ = ["__version__", *_SUBPACKAGES, *_NOUNS]


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"sparsetrain.{name}")
    package = _NOUNS.get(name)
    if package is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sparsetrain.{package}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
