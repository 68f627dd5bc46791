"""sparsetrain: a GPU-centric data path for large graph models and mixture-of-experts layers.

Subpackages are imported on first use (``sparsetrain.datasets``, ``.storage``,
``.sampling``, ``.collective``, ``.nn``, ``.moe``, ``.engine``) so the CLI starts fast.
"""

import importlib

from sparsetrain._version import __version__

_SUBPACKAGES = ("datasets", "storage", "sampling", "collective", "nn", "moe", "engine", "errors")

__all__ = ["__version__", *_SUBPACKAGES]


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"sparsetrain.{name}")
    raise AttributeError(f"module 'sparsetrain' has no attribute {name!r}")
