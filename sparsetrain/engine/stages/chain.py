"""The stage chain: every batch goes through the loader's stages in list order, written once.

A stage is a callable ``batch -> batch``; a stage that needs to see the next batch early (the fetch stage starts a
cache's reads of batch k + 1 before it gathers batch k) defines ``over(batches) -> batches`` instead, an iterator
transform. Adding a stage is one entry in the list :class:`~sparsetrain.engine.Loader` passes here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

from sparsetrain._phases import phase


def run_chain(stages: Sequence, batches: Iterable, seconds: dict[str, float] | None = None) -> Iterator:
    """``batches`` through every stage in order, lazily (each item is pulled through the chain when asked for). Each
    stage's work runs in its named profiler range (:mod:`sparsetrain._phases`; an ``over`` stage's range also holds
    the stages before it, which pulling its next item runs). ``seconds``, when given, sums each range's wall time by
    its name, the stages before it included (:func:`own_seconds` takes them out)."""
    items = iter(batches)
    for stage in stages:
        over = getattr(stage, "over", None)
        items = _in_phase(stage_name(stage), over(items) if over is not None else map(stage, items), seconds)
    return items


def stage_name(stage) -> str:
    """A stage's profiler range: its ``phase`` (a user's stage: its class name)."""
    return getattr(stage, "phase", type(stage).__name__)


def own_seconds(names: Sequence[str], seconds: dict[str, float]) -> dict[str, float]:
    """Each stage's own time from :func:`run_chain`'s ``seconds``: a stage's pulls run every pull of the stage before
    it, so its own time is its range's time less that stage's."""
    own, before = {}, 0.0
    for name in names:
        total = seconds.get(name, 0.0)
        own[name] = max(total - before, 0.0)
        before = total
    return own


def _in_phase(name: str, items: Iterator, seconds: dict[str, float] | None = None) -> Iterator:
    try:
        while True:
            t0 = time.perf_counter()
            with phase(name):
                item = next(items, _END)
            if seconds is not None:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
            if item is _END:
                return
            yield item
    finally:  # (a chain left early closes the stages' generators now, not when collected)
        close = getattr(items, "close", None)
        if close is not None:
            close()


_END = object()
