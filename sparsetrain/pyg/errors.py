"""Errors raised by :mod:`sparsetrain.pyg`."""

from sparsetrain.errors import SparsetrainError


class PyGOptionError(SparsetrainError, ValueError):
    """A PyG loader or sampler option that sparsetrain's sampler does not support (it names the option and the way
    out)."""


class LoaderTimeoutError(SparsetrainError, RuntimeError):
    """A sampling thread did not hand over its batch within the loader's ``timeout`` (a RuntimeError, as torch's)."""


class PyGNotImplementedError(SparsetrainError, NotImplementedError):
    """An option combination PyG's own sampler raises ``NotImplementedError`` for (``except NotImplementedError``
    catches it)."""
