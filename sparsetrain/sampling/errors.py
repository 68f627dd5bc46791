"""Errors raised by :mod:`sparsetrain.sampling`."""

from sparsetrain.errors import SparsetrainError


class SamplingError(SparsetrainError, ValueError):
    """Bad sampler input: seeds out of range or repeated, bad fanouts, weights missing or negative."""


class UnknownEdgeTypeError(SparsetrainError, KeyError):
    """A graph's ``edges`` mapping was asked for an edge type the graph does not have."""


class SamplingBackendError(SparsetrainError, RuntimeError):
    """An optional backend (CUDA, DGL) that the call needs is not available."""


class CaptureError(SparsetrainError, RuntimeError):
    """A CUDA graph capture the run was planned with failed (the sampler's padded batch or the static step); never
    a silent eager run: the message names why and how to run without capture."""
