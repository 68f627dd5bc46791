"""Errors of the loader's stages."""

from sparsetrain.errors import SparsetrainError


class LoaderError(SparsetrainError, RuntimeError):
    """The loader cannot hand out a batch: its thread died or is stuck, or a stage broke its contract."""
