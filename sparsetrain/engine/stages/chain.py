"""The stage chain: every batch goes through the loader's stages in list order, written once.

A stage is a callable ``batch -> batch``; a stage that needs to see the next batch early (the fetch stage starts a
cache's reads of batch k + 1 before it gathers batch k) defines ``over(batches) -> batches`` instead, an iterator
transform. Adding a stage is one entry in the list :class:`~sparsetrain.engine.Loader` passes here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from sparsetrain._phases import phase


def run_chain(stages: Sequence, batches: Iterable) -> Iterator:
    """``batches`` through every stage in order, lazily (each item is pulled through the chain when asked for). Each
    stage's work runs in its named profiler range (:mod:`sparsetrain._phases`; an ``over`` stage's range also holds
    the stages before it, which pulling its next item runs)."""
    items = iter(batches)
    for stage in stages:
        name = getattr(stage, "phase", type(stage).__name__)  # (a user's stage: its class name)
        over = getattr(stage, "over", None)
        items = _in_phase(name, over(items) if over is not None else map(stage, items))
    return items


def _in_phase(name: str, items: Iterator) -> Iterator:
    try:
        while True:
            with phase(name):
                item = next(items, _END)
            if item is _END:
                return
            yield item
    finally:  # (a chain left early closes the stages' generators now, not when collected)
        close = getattr(items, "close", None)
        if close is not None:
            close()


_END = object()
