"""Errors raised for bad input or bad state.

Every error the library raises on purpose subclasses :class:`SparsetrainError`
plus the matching builtin (``ValueError`` for bad input, ``RuntimeError`` for
bad state), so ``except ValueError`` keeps working for callers who do not know
this module. Messages name the file, the row or field, and the fix; the CLI
prints them on one line without a traceback.
"""


class SparsetrainError(Exception):
    """Base of every error the library raises deliberately."""


class DatasetError(SparsetrainError, ValueError):
    """An input file or dataset folder is malformed (bad id, shape, value, dtype)."""


class ChecksumError(DatasetError):
    """An array file does not match the sha256 recorded in ``meta.json``."""


class OutputExistsError(SparsetrainError, ValueError):
    """The output folder exists and overwriting it was not asked for."""


class SettingError(SparsetrainError, ValueError):
    """An argument or setting has a value the library cannot use (an unknown name, a number out of range)."""


class SettingTypeError(SparsetrainError, TypeError):
    """An argument has the wrong type (e.g. a list where a tensor is needed)."""


class UsageError(SettingError):
    """The command line cannot be parsed: an unknown flag, a missing or malformed value."""


class InputNote(UserWarning):
    """How an importer read an ambiguous input (e.g. edge columns taken by position); the CLI prints it as one
    ``warning:`` line."""
