"""The stage chain: every batch goes through the loader's stages in list order, written once.

A stage is a callable ``batch -> batch``; a stage that needs to see the next batch early (the fetch stage starts a
cache's reads of batch k + 1 before it gathers batch k) defines ``over(batches) -> batches`` instead, an iterator
transform. Adding a stage is one entry in the list :class:`~sparsetrain.engine.Loader` passes here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence


def run_chain(stages: Sequence, batches: Iterable) -> Iterator:
    """``batches`` through every stage in order, lazily (each item is pulled through the chain when asked for)."""
    items = iter(batches)
    for stage in stages:
        over = getattr(stage, "over", None)
        items = over(items) if over is not None else map(stage, items)
    return items
