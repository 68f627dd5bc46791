"""The loader pipeline: seeds -> sample -> gather features -> device, overlapped with compute.

One producer thread runs ahead of the training loop by up to ``prefetch``
batches. Its heavy work (Numba sampling and gather kernels, torch copies)
releases the GIL, so it truly runs beside the model's compute; there are no
forked workers, so CUDA keeps working. Batches come out in order and are a pure
function of (seed, epoch, batch index): a run resumed mid-epoch sees exactly the
batches the uninterrupted run would have.
"""

from __future__ import annotations

import inspect
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numba
import torch

from sparsetrain.engine.host_memory import retain_freed_host_memory
from sparsetrain.storage.rows import gather_rows
from sparsetrain.storage.tensor import TensorFeatures

_DONE = object()


@dataclass
class EpochStats:
    """How one pass over the loader went: ``stall_fraction`` = time the loop waited on data / epoch time."""

    batches: int = 0
    seeds: int = 0
    wait_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def stall_fraction(self) -> float:
        return self.wait_seconds / self.total_seconds if self.total_seconds > 0 else 0.0


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Loader:
    """Iterate minibatches whose ``x`` (input-node features) and ``y`` (seed labels) are already on ``device``.

    ``sampler`` has ``sample(seeds) -> MiniBatch``; ``features`` is a feature store
    (``gather(ids)``, e.g. ``CachedFeatures``) or a tensor; ``labels`` a tensor;
    ``seeds`` the node ids to iterate (e.g. ``ds.split["train"]``). ``order`` is an
    optional callable ``(list of seed batches, sampler) -> reordered list`` (see
    the sampling package's batch ordering). ``loader_threads`` caps the Numba
    threads the background loader uses, leaving cores to the model's compute. ``set_epoch`` picks the shuffle of an
    epoch; ``start_batch`` in :meth:`epoch` resumes mid-epoch. ``retain_host_memory`` tunes the process's
    allocator so batches reuse freed host memory instead of page-faulting fresh memory each step (see
    :func:`~sparsetrain.engine.host_memory.retain_freed_host_memory`; the heap then keeps its peak size).

    ``prefetch=0`` loads each batch in the training thread instead. Overlap pays when the model runs on a
    GPU or leaves CPU cores free; when the model's CPU compute already keeps every core busy, the loader's
    threads only contend with it, and loading in between steps was 10% faster (2 cores, products-scale
    GraphSAGE: 506 vs 560 ms a step, benchmarks/RESULTS.md).
    """

    def __init__(self, sampler, features, labels: torch.Tensor | None, seeds: torch.Tensor, *, batch_size: int,
                 shuffle: bool = True, order=None, device: str | torch.device = "cpu", prefetch: int = 2,
                 seed: int = 0, drop_last: bool = False, rank: int = 0, world_size: int = 1,
                 loader_threads: int | None = None, retain_host_memory: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be positive")
        if prefetch < 0:
            raise ValueError(f"prefetch={prefetch} must be >= 0")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        seeds = torch.as_tensor(seeds, dtype=torch.int64)
        if seeds.dim() != 1:
            raise ValueError(f"seeds must be a 1-D tensor of node ids, got shape {list(seeds.shape)}")
        self.sampler = sampler
        if (isinstance(features, torch.Tensor) and features.device.type == "cpu" and features.is_contiguous()
                and not features.requires_grad):  # learnable features keep torch indexing, so gradients reach them
            features = TensorFeatures(features)  # a prefetching Numba gather: ~15% off a products-scale step vs x[ids]
        self.features = features
        self.labels = labels
        self.seeds = seeds
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.order = order
        self.device = torch.device(device)
        self.prefetch = prefetch
        self.seed = seed
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.loader_threads = loader_threads
        self._epoch = 0
        self._keyed = None
        if retain_host_memory:
            retain_freed_host_memory()
        self.last_epoch_stats = EpochStats()

    def __len__(self) -> int:
        n = len(self.seeds) // self.world_size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """This rank's seed batches of ``epoch``: a pure function of (seed, epoch, rank).

        With several ranks, every rank draws the same shuffle and takes its own
        equal share (the remainder is left out, so all ranks step together).
        """
        seeds = self.seeds
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            seeds = seeds[torch.randperm(len(seeds), generator=generator)]
        if self.world_size > 1:
            share = len(seeds) // self.world_size
            seeds = seeds[self.rank * share : (self.rank + 1) * share]
        parts = list(torch.split(seeds, self.batch_size))
        if self.drop_last and parts and len(parts[-1]) < self.batch_size:
            parts.pop()
        if self.order is not None:
            parts = self.order(parts, self.sampler)
        return parts

    def _sample(self, batch_seeds: torch.Tensor, key: int):
        """Sample with the batch's key when the sampler takes one (same batch on resume)."""
        if self._keyed is None:
            self._keyed = "batch" in inspect.signature(self.sampler.sample).parameters
        return self.sampler.sample(batch_seeds, batch=key) if self._keyed else self.sampler.sample(batch_seeds)

    def _finish(self, mb):
        """Gather the batch's features and labels and move them to the device."""
        mb.x = gather_rows(self.features, mb.input_nodes)
        mb.y = None if self.labels is None else self.labels[mb.seeds]
        return mb.to(self.device, non_blocking=self.device.type == "cuda") if mb.x.device != self.device else mb

    def __iter__(self) -> Iterator:
        return self.epoch(self._epoch)

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator:
        """Batches of ``epoch`` from ``start_batch`` on; stats land in ``last_epoch_stats`` when it ends."""
        parts = self.batches(epoch)
        per_epoch = -(-len(self.seeds) // self.batch_size)  # keys never collide across epochs or ranks
        keys = [(epoch * self.world_size + self.rank) * per_epoch + i for i in range(len(parts))]
        todo = list(zip(parts, keys))[start_batch:]
        stats = EpochStats()
        self.last_epoch_stats = stats
        started = time.perf_counter()
        if self.prefetch == 0:
            for part, key in todo:
                t0 = time.perf_counter()
                mb = self._finish(self._sample(part, key))
                stats.wait_seconds += time.perf_counter() - t0
                stats.batches += 1
                stats.seeds += len(part)
                yield mb
            stats.total_seconds = time.perf_counter() - started
            return

        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def emit(item) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce():
            if self.loader_threads is not None:  # Numba's thread count is per calling thread: this limits the loader only
                numba.set_num_threads(min(self.loader_threads, numba.config.NUMBA_NUM_THREADS))
            # sample batch k and start fetching its rows (cache prefetch) before gathering batch k - 1
            can_prefetch = hasattr(self.features, "prefetch")
            pending = None
            try:
                for part, key in todo:
                    if stop.is_set():
                        return
                    mb = self._sample(part, key)
                    if can_prefetch:
                        self.features.prefetch(mb.input_nodes)
                    if pending is not None and not emit(self._finish(pending)):
                        return
                    pending = mb
                if pending is not None and not emit(self._finish(pending)):
                    return
            except BaseException as exc:  # hand any failure to the training loop
                emit(_Failure(exc))
                return
            emit(_DONE)

        thread = threading.Thread(target=produce, name="sparsetrain-loader", daemon=True)
        thread.start()
        try:
            while True:
                t0 = time.perf_counter()
                item = ready.get()
                stats.wait_seconds += time.perf_counter() - t0
                if item is _DONE:
                    break
                if isinstance(item, _Failure):
                    raise item.exc
                stats.batches += 1
                stats.seeds += len(item.seeds)
                yield item
        finally:
            stop.set()
            thread.join(timeout=10)
            stats.total_seconds = time.perf_counter() - started
