"""The one place that decides how long work is shown: tqdm bars and the kernel-compile notice."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from tqdm.auto import tqdm

FALLBACK_SIZE = {"ncols": 80, "nrows": 24}
"""Bar width and screen height on a terminal that reports a size of 0 (``script``, some tmux panes and ssh sessions):
tqdm would draw nothing there (it counts the bar's row as off screen)."""
SCALED_TOTAL = 100_000
"""Totals from here up count in k/M/G (``12.3M/1.60G edge``); smaller ones count whole items (``3/12 batch``)."""


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):  # stderr replaced by an object without a file descriptor
        return 0


def progress(total=None, desc: str = "", unit: str = "it", quiet: bool = False, **kwargs) -> tqdm:
    """A tqdm bar on stderr; silent when ``quiet`` or when stderr is not a terminal."""
    disable = quiet or not sys.stderr.isatty()
    size = {"dynamic_ncols": True} if disable or _columns() > 0 else FALLBACK_SIZE
    scale = total is not None and total >= SCALED_TOTAL
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, unit_scale=scale, file=sys.stderr, **size, **kwargs)


COMPILING = ("compiling kernels for these settings (once per variant: Numba caches each, so a later run with the same "
             "dtypes and fanout depth loads them)...")
"""What :func:`compile_notice` says: a new variant (another dtype, another number of hops) compiles once more."""


class _CompileNotice:
    """A ``numba:compile`` listener: one line the first time a kernel compiles (a cache hit fires no event)."""

    def __init__(self) -> None:
        from numba.core import event

        class Listener(event.Listener):
            def on_start(listener, ev) -> None:
                self._announce()

            def on_end(listener, ev) -> None:
                pass

        self.listener = Listener()
        self._lock = threading.Lock()
        self.said = False

    def _announce(self) -> None:
        with self._lock:
            if self.said:
                return
            self.said = True
        tqdm.write(COMPILING, file=sys.stderr)


@contextlib.contextmanager
def compile_notice(quiet: bool = False):
    """While the block runs, the first Numba compile (a cold cache: first run, or changed code) says so in one line."""
    if quiet:
        yield
        return
    from numba.core import event

    notice = _CompileNotice()
    with event.install_listener("numba:compile", notice.listener):
        yield
