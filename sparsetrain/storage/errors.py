"""Errors raised by the feature stores and caches (all :class:`~sparsetrain.errors.SparsetrainError`)."""

from sparsetrain.errors import SparsetrainError


class FeatureIdError(SparsetrainError, ValueError):
    """Row ids passed to ``gather``/``prefetch`` are not a 1-D integer tensor inside ``[0, num_rows)``."""


class FeatureOutputError(SparsetrainError, ValueError):
    """The ``out=`` tensor given to ``gather`` has the wrong shape, dtype, device or layout."""


class FeatureFileError(SparsetrainError, RuntimeError):
    """The feature file behind an open store shrank, vanished, was replaced, or cannot be read."""


class CacheBudgetError(SparsetrainError, ValueError):
    """A cache budget cannot hold even one row, or a policy was misconfigured."""


class PinnedMemoryError(SparsetrainError, RuntimeError):
    """Host memory could not be page-locked / mapped for zero-copy GPU access."""
