"""Named ranges around a training step's phases, for ``torch.profiler``: off unless asked for.

The loader's stages (``sample``, ``fetch``, ``to_device``), the drop-in's sampling and batch cutting, and the trainer's
optimizer ``step`` each run inside ``phase(name)``, a ``record_function("sparsetrain.<name>")`` range once
:func:`record_phases` turned them on, a shared no-op otherwise (a range costs a few microseconds of Python, paid only
while someone profiles). A profile then splits each step's host time and the GPU work it launched by phase
(``benchmarks/step_timeline.py``); the producer thread's ranges are recorded when the profiler is asked to follow every
thread.
"""

from __future__ import annotations

import contextlib

import torch

PREFIX = "sparsetrain."
_NOTHING = contextlib.nullcontext()
_on = False


def record_phases(on: bool = True) -> None:
    """Turn the ranges on (or off) for every thread."""
    global _on
    _on = bool(on)


def phase(name: str):
    """A ``with`` range named ``sparsetrain.<name>`` while :func:`record_phases` is on, else nothing."""
    return torch.profiler.record_function(PREFIX + name) if _on else _NOTHING
