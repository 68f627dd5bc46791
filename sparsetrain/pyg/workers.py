"""Sampling threads: what ``num_workers > 0`` starts in :mod:`sparsetrain.pyg`'s loaders.

PyG's loaders fork worker processes. sparsetrain samples with Numba kernels on Numba's OpenMP threading layer,
which terminates a forked child that launches a parallel kernel (GNU OpenMP is not fork-safe), and
forkserver/spawn workers re-import the user's script (a crash without an ``if __name__ == "__main__":`` guard)
and take seconds to start. The kernels release the GIL, so ``num_workers`` threads sample side by side in the
loader's own process instead: nothing to start, pickle or leak, and each batch is the one ``num_workers=0``
gives: batch ``p`` of an epoch is made under the key reserved for position ``p`` when the epoch started
(:mod:`sparsetrain.pyg.keys`), so batches prefetched, then dropped with an epoch left early, use up nothing.
``benchmarks/pyg_loader.py --workers`` measures this against forked workers on Numba's fork-safe ``workqueue``
layer and against PyG's own forked workers.
"""

from __future__ import annotations

import itertools
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import numba
import torch
from torch.utils.data._utils.fetch import _MapDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory

from sparsetrain.errors import LoaderError, SettingError
from sparsetrain.pyg.keys import batch_key
from sparsetrain.pyg.sampler import PyGNeighborSampler

FORK_SAFE_LAYERS = ("tbb", "workqueue", "forksafe", "safe")
"""``NUMBA_THREADING_LAYER`` values under which a forked worker may run Numba's parallel kernels."""


def uses_threads(num_workers: int, multiprocessing_context) -> bool:
    """Whether a loader samples in threads: ``num_workers > 0`` and no ``multiprocessing_context`` asked for.

    An explicit context keeps PyG's worker processes; ``"fork"`` is refused unless Numba's threading layer is
    fork-safe, since a forked worker would be terminated at its first batch and the loader would wait on it forever.
    """
    if num_workers <= 0 or multiprocessing_context is None:
        return num_workers > 0
    context = multiprocessing_context
    method = context if isinstance(context, str) else context.get_start_method()
    if method == "fork" and numba.config.THREADING_LAYER not in FORK_SAFE_LAYERS:
        raise SettingError("multiprocessing_context='fork' kills the workers at their first batch: Numba's "
                           "OpenMP threading layer is not fork-safe; leave multiprocessing_context unset (sampling "
                           "threads), pass 'forkserver', or set NUMBA_THREADING_LAYER=workqueue (or tbb, if "
                           "installed) before importing sparsetrain")
    return False


class SamplingThreads:
    """Iterate a PyG loader's batches (its ``collate_fn`` over each index batch), made by ``num_workers`` threads.

    Batches come out in order, at most ``num_workers * prefetch_factor`` in flight. A failure in a thread is raised
    here; ``loader.timeout`` (> 0) bounds the wait for one batch, as in torch's ``DataLoader``. Each thread gets an
    equal share of Numba's threads and runs ``loader.worker_init_fn(worker_id)`` first, if set. ``sampler``: the
    loader's :class:`~sparsetrain.pyg.PyGNeighborSampler` (each epoch reserves its batch keys at its start), or None.
    """

    def __init__(self, loader: torch.utils.data.DataLoader, sampler) -> None:
        self._sampler = sampler if isinstance(sampler, PyGNeighborSampler) else None
        self._workers = loader.num_workers
        self._depth = loader.num_workers * (loader.prefetch_factor or 2)
        self._pool: ThreadPoolExecutor | None = None
        self._reset(loader, first_iter=True)

    def _reset(self, loader: torch.utils.data.DataLoader, first_iter: bool = False) -> None:
        """Start an epoch of ``loader`` (torch's ``DataLoader`` calls this for ``persistent_workers``)."""
        self.close()
        self._index_sampler = loader._index_sampler
        self._indices = enumerate(self._index_sampler)
        if self._sampler is not None:
            self._sampler.keys.start_epoch(epoch_length(self._index_sampler))
        # torch's iterators draw a base seed for their workers here: drawing it too keeps the shuffles of num_workers=0
        torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
        self._fetcher = _MapDatasetFetcher(loader.dataset, loader._auto_collation, loader.collate_fn, loader.drop_last)
        self._pin = loader.pin_memory and torch.accelerator.is_available()
        self._timeout = loader.timeout if loader.timeout > 0 else None
        self._pending: deque[Future] = deque()
        ids = itertools.count()
        share = max(1, numba.config.NUMBA_NUM_THREADS // self._workers)
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="sparsetrain-pyg-worker",
                                        initializer=_start_thread, initargs=(ids, share, loader.worker_init_fn))

    def __iter__(self) -> SamplingThreads:
        return self

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __next__(self):
        self._fill()
        if not self._pending:
            self.close()
            raise StopIteration
        try:
            batch = self._pending.popleft().result(timeout=self._timeout)
        except FutureTimeout:
            self.close()
            raise LoaderError(f"DataLoader timed out after {self._timeout} seconds; "
                              "raise timeout= or lower the batch cost") from None
        except BaseException:
            self.close()
            raise
        self._fill()
        return batch

    def _fill(self) -> None:
        while self._pool is not None and len(self._pending) < self._depth:
            position, index = next(self._indices, (None, None))
            if index is None:
                return
            key = None if self._sampler is None else self._sampler.keys.at(position)
            self._pending.append(self._pool.submit(self._make, index, key))

    def _make(self, index, key: int | None):
        with batch_key(key):
            batch = self._fetcher.fetch(index)
        return pin_memory(batch) if self._pin else batch

    def close(self) -> None:
        """Drop the batches not started; the threads end after the ones in hand."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            self._pending.clear()

    def __del__(self) -> None:
        self.close()


def epoch_length(index_sampler) -> int | None:
    """The number of batches of an epoch, or None for an index sampler without a length."""
    try:
        return len(index_sampler)
    except TypeError:
        return None


def _start_thread(ids: itertools.count, numba_threads: int, worker_init_fn) -> None:
    numba.set_num_threads(min(numba_threads, numba.get_num_threads()))
    if worker_init_fn is not None:
        worker_init_fn(next(ids))
