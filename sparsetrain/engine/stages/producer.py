"""`Producer`: the one background thread that runs the loader's stages ahead of the training loop.

Its heavy work (Numba sampling and gather kernels, torch copies) releases the GIL, so it
runs beside the model's compute; there are no forked workers, so CUDA keeps working.
Items come out in order, at most ``depth`` ahead. A failure in the thread is raised in
the consumer; a thread that dies silently or makes no progress for ``timeout`` seconds
(a peer rank stopped in a collective, a hung read) is an error, not a hang.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable

import numba

from sparsetrain.errors import LoaderError, SettingError

POLL_SECONDS = 0.1
JOIN_SECONDS = 10.0


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


_DONE = object()


class Producer:
    """Iterate ``items`` in a thread named ``name``, ``depth`` items ahead of the consumer.

    ``context`` is entered in the thread around the whole run (e.g. the CUDA side stream);
    ``numba_threads`` caps the Numba threads of the producer only (Numba's count is per
    calling thread), leaving cores to the model. Use as a context manager; :meth:`get`
    returns the next item or raises ``StopIteration`` after the last.
    """

    def __init__(self, items: Iterable, *, depth: int, timeout: float | None,
                 context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 numba_threads: int | None = None, name: str = "sparsetrain-loader") -> None:
        if depth < 1:
            raise SettingError(f"depth={depth} must be at least 1")
        self._items = items
        self._context = context
        self._numba_threads = numba_threads
        self._timeout = timeout
        self._ready: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._stuck = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the thread (it finishes the item in hand); a stuck thread is left behind, it is a daemon."""
        self._stop.set()
        if not self._stuck and self._thread.is_alive():
            self._thread.join(timeout=JOIN_SECONDS)

    def _emit(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._ready.put(item, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        if self._numba_threads is not None:
            numba.set_num_threads(min(self._numba_threads, numba.config.NUMBA_NUM_THREADS))
        try:
            with self._context():
                for item in self._items:
                    if not self._emit(item):
                        return
        except BaseException as exc:  # hand any failure to the consumer
            self._emit(_Failure(exc))
            return
        self._emit(_DONE)

    def get(self):
        """The next item; raises the producer's exception, ``StopIteration`` at the end, ``LoaderError`` on a dead or
        stuck thread."""
        waited_since = time.monotonic()
        while True:
            try:
                item = self._ready.get(timeout=POLL_SECONDS)
                break
            except queue.Empty:
                pass
            if not self._thread.is_alive():
                try:  # it may have handed over its last item just before ending
                    item = self._ready.get_nowait()
                    break
                except queue.Empty:
                    raise LoaderError("the loader thread ended without handing over a batch or an error; "
                                      "this is a bug in a loader stage, please report it") from None
            if self._timeout is not None and time.monotonic() - waited_since > self._timeout:
                self._stuck = True
                raise LoaderError(f"the loader thread produced no batch for {self._timeout:g} s; it is stuck "
                                  "(a stopped peer rank in a collective, a hung read): check the other ranks and the "
                                  "storage, "
                                  "or pass a larger Loader(timeout=...) if batches legitimately take that long")
        if item is _DONE:
            raise StopIteration
        if isinstance(item, _Failure):
            raise item.exc
        return item
