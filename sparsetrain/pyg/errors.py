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


class PyGIdDtypeError(SparsetrainError, TypeError, NotImplementedError):
    """An id tensor (``input_nodes``, ``edge_index``, ``edge_label_index``, ...) that is not integers (or, where masks
    are taken, a bool mask). PyG's own loader fails on it with a ``RuntimeError`` (``NotImplementedError`` for a float
    ``edge_index``), which this is too, as well as a ``TypeError``."""


class PyGIndexError(SparsetrainError, IndexError, ValueError):
    """An index that does not fit the data: ids outside ``[0, num_nodes)``, a bool mask or a per-seed tensor of the
    wrong length, a node type the data lacks. PyG's loader fails on these with an ``IndexError`` (when it notices);
    ``except IndexError`` and ``except ValueError`` both catch this one."""
