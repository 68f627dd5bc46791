"""Errors raised for bad input or bad state: one class per way a caller responds.

Every error the library raises on purpose subclasses :class:`SparsetrainError` plus the matching builtin
(``ValueError`` for bad input, ``RuntimeError`` for bad state, ...), so ``except ValueError`` keeps working for
callers who do not know this module. Messages name the file, the row or field, and the fix; the CLI prints them on
one line without a traceback.
"""


class SparsetrainError(Exception):
    """Base of every error the library raises deliberately."""


class SettingError(SparsetrainError, ValueError):
    """An argument, setting or flag has a value the library cannot use: an unknown name, a number out of range,
    options that contradict each other, an option this path does not support (the message names the option and the
    way out)."""


class SettingTypeError(SettingError, TypeError):
    """An argument or setting of the wrong type (``top_k=2.0``, ``renormalize='no'``, a list where a tensor is
    needed): a ``TypeError`` and a :class:`SettingError`."""


class InputError(SparsetrainError, ValueError, IndexError):
    """A call got data it cannot take: ids outside ``[0, num_rows)`` or repeated, a tensor of the wrong shape,
    dtype, device or layout, seeds a rank does not own, ranks that disagree (a collective raises it on every rank of
    the group). ``except ValueError`` and ``except IndexError`` (PyG's loader's error for these) both catch it."""


class DatasetError(SparsetrainError, ValueError):
    """An input file, dataset or partitioned folder is malformed (bad id, shape, value, dtype, a checksum that does
    not match, missing or foreign parts)."""


class OutputExistsError(SparsetrainError, ValueError):
    """The output folder exists and overwriting it was not asked for."""


class DamagedFileError(SparsetrainError, RuntimeError):
    """A file behind an open store or part shrank, vanished, was replaced, cannot be read, or points outside its own
    arrays."""


class CheckpointError(SparsetrainError, RuntimeError):
    """A checkpoint cannot be used: none where one was asked for, a damaged or foreign file, a
    ``torch.distributed.checkpoint`` folder refused before it is built (its ``CheckpointException`` too, which
    ``except Exception`` would miss), a state or placement that does not match the layer it is loaded into."""


class CollectiveError(SparsetrainError, RuntimeError):
    """A peer rank died, timed out, disagreed or called a different collective; this rank cannot go on. The process
    group is unusable after this error: end the process (``destroy_process_group`` itself can block after a
    timed-out gloo operation on torch 2.2) and restart the job."""


class LoaderError(SparsetrainError, RuntimeError):
    """The loader cannot hand out a batch: its thread died, is stuck past its ``timeout``, or a stage broke its
    contract."""


class BackendError(SparsetrainError, RuntimeError, ImportError):
    """The machine or environment lacks what the call needs: an optional package (the message names the ``pip
    install``) or backend (CUDA, DGL), page-locked host memory, a CUDA graph capture the run was planned with (never
    a silent eager run: the message says how to run without it)."""


class NotSupportedError(SparsetrainError, NotImplementedError, TypeError):
    """An option combination or id dtype that PyG's own loader raises ``NotImplementedError`` for (``except
    NotImplementedError`` catches it; a non-integer id tensor is a ``TypeError`` too)."""


class TrainingDivergedError(SparsetrainError, FloatingPointError):
    """The loss became NaN or infinite: the training diverged (or the data holds extreme values)."""


class TrainingOutOfMemoryError(SparsetrainError, RuntimeError):
    """This rank ran out of (GPU or host) memory while training."""


class UnknownEdgeTypeError(SparsetrainError, KeyError):
    """A graph's ``edges`` mapping was asked for an edge type the graph does not have."""


class InputNote(UserWarning):
    """How an importer read an ambiguous input (e.g. edge columns taken by position); the CLI prints it as one
    ``warning:`` line."""
