"""Checks of a public constructor's arguments, when it is built: type and range, the parameter named in one line.

One small set used by the MoE layers, the PyG drop-in loaders and the partitioned stores, so that a value a caller
got wrong (``top_k=2.0``, ``aux_loss_weight=nan``, ``renormalize='no'``, ``batch_size=2.5``, ``seed=True``) is
refused where it is given, never read loosely (``bool('no')`` is True, ``int(1.9)`` is 1) or failing at a later
forward. Each check returns the value as the plain Python type (a NumPy integer becomes an ``int``).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from sparsetrain.errors import SettingError, SettingTypeError


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def _fail(where: str, name: str, value, rule: str, error: type[Exception]) -> None:
    raise error(f"{where}: {name}={value!r}; give {rule}")


def integer(where: str, name: str, value, *, low: int | None = None, high: int | None = None,
            optional: bool = False, error: type[Exception] = SettingError,
            type_error: type[Exception] = SettingTypeError) -> int | None:
    """``value`` an integer (a NumPy integer counts; a bool, a float or a string does not) in ``[low, high]``; None
    passes where ``optional``."""
    if value is None and optional:
        return None
    rule = _integer_rule(low, high)
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        _fail(where, name, value, rule, type_error)
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        _fail(where, name, value, rule, error)
    return value


def _integer_rule(low, high) -> str:
    if low is not None and high is not None:
        return f"an integer from {low} to {high}"
    if low is not None:
        return f"an integer >= {low}"
    return "an integer" if high is None else f"an integer <= {high}"


def number(where: str, name: str, value, *, low: float = -math.inf, high: float = math.inf, low_open: bool = False,
           high_open: bool = False, optional: bool = False, error: type[Exception] = SettingError,
           type_error: type[Exception] = SettingTypeError) -> float | None:
    """``value`` a finite real number (an int, a float or a NumPy scalar; not a bool, a string or a tensor) within
    ``low``..``high`` (ends open as asked); None passes where ``optional``."""
    if value is None and optional:
        return None
    rule = _number_rule(low, high, low_open, high_open)
    if _is_bool(value) or not isinstance(value, numbers.Real):
        _fail(where, name, value, rule, type_error)
    value = float(value)
    if not math.isfinite(value) or value < low or value > high or (low_open and value == low) \
            or (high_open and value == high):
        _fail(where, name, value, rule, error)
    return value


def _number_rule(low, high, low_open, high_open) -> str:
    parts = []
    if low > -math.inf:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high < math.inf:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    return "a finite number" + (f" {' and '.join(parts)}" if parts else "")


def boolean(where: str, name: str, value, *, optional: bool = False,
            type_error: type[Exception] = SettingTypeError) -> bool | None:
    """``value`` True or False (a NumPy bool counts; ``'no'``, 0 or 1 do not); None passes where ``optional``."""
    if value is None and optional:
        return None
    if not _is_bool(value):
        _fail(where, name, value, "True or False" + (" (or None)" if optional else ""), type_error)
    return bool(value)


def choice(where: str, name: str, value, choices, *, error: type[Exception] = SettingError) -> str:
    """``value`` one of ``choices`` (compared as given: ``'Softmax'`` is not ``'softmax'``)."""
    if not isinstance(value, str) or value not in choices:
        _fail(where, name, value, f"one of {', '.join(map(repr, choices))}", error)
    return value
