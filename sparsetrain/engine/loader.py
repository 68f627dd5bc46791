"""The loader: seed batches -> sample -> fetch features -> to device, overlapped with compute.

:class:`Loader` composes the stages of :mod:`sparsetrain.engine.stages` and runs stages
2-4 in one producer thread up to ``prefetch`` batches ahead of the training loop (or in
line with ``prefetch=0``). Batches come out in order and are a pure function of (seed,
epoch, batch index): a run resumed mid-epoch sees exactly the batches the uninterrupted
run would have.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from sparsetrain.engine.host_memory import retain_freed_host_memory
from sparsetrain.engine.stages import CopyToDevice, FetchFeatures, Producer, Sample, Staged
from sparsetrain.engine.stages.chain import own_seconds, run_chain, stage_name
from sparsetrain.errors import SettingError
from sparsetrain.sampling.input import EdgeSamplerInput, EdgeSeeds, SamplerInput
from sparsetrain.sampling.seeds import SeedBatches

BATCH_TIMEOUT_S = 300.0
"""How long the training loop waits for one batch before calling the loader thread stuck."""


@dataclass
class EpochStats:
    """How one pass over the loader went: ``stall_fraction`` = time the loop waited on data / epoch time;
    ``stage_seconds``: each stage's own time by its name (``sample``, ``fetch``, ``to_device``), in the producer thread
    (overlapping the loop's compute) or in line."""

    batches: int = 0
    seeds: int = 0
    wait_seconds: float = 0.0
    total_seconds: float = 0.0
    stage_names: tuple[str, ...] = ()
    chain_seconds: dict = field(default_factory=dict)  # run_chain's sums, each stage's range with those before it

    @property
    def stage_seconds(self) -> dict[str, float]:
        return own_seconds(self.stage_names, self.chain_seconds)

    @property
    def stall_fraction(self) -> float:
        return self.wait_seconds / self.total_seconds if self.total_seconds > 0 else 0.0


class Loader:
    """Iterate minibatches whose ``x`` (input-node features) and ``y`` (seed labels) are already on ``device``.

    ``sampler`` has ``sample(SamplerInput) -> MiniBatch``; ``features`` is a feature store
    (``gather(ids)``, e.g. ``CachedFeatures``) or a tensor, or, for a typed sampler
    (a :class:`~sparsetrain.sampling.NeighborSampler` over a typed graph), a dict of them per node type (each type its
    own store
    and cache; ``x`` is then a dict); ``labels`` a tensor (of the seeds' type);
    ``seeds`` the node ids to iterate (e.g. ``ds.split["train"]``), or an :class:`~sparsetrain.sampling.EdgeSeeds`
    table for a :class:`~sparsetrain.sampling.LinkNeighborSampler` (``labels`` None; ``y`` is then the
    batch's ``edge_label``). ``order`` is an
    optional callable ``(list of seed batches, sampler) -> reordered list`` (see
    the sampling package's batch ordering). ``loader_threads`` caps the Numba
    threads the background loader uses, leaving cores to the model's compute. ``set_epoch`` picks the shuffle of an
    epoch; ``start_batch`` in :meth:`epoch` resumes mid-epoch. ``timeout``: seconds to wait for one batch before
    the loader thread counts as stuck (an error, not a hang). ``edge_features`` (e.g. ``ds.edge_features``) fills
    ``mb.edge_attr``: per block, the rows of its ``edge_ids``.

    ``retain_host_memory=True`` tunes this process's glibc allocator so batches reuse freed host memory instead
    of page-faulting fresh memory each step (:func:`~sparsetrain.engine.host_memory.retain_freed_host_memory`):
    a products-scale GraphSAGE step on 2 cores went from 1127 to 673 ms (benchmarks/RESULTS.md); the heap then
    keeps its peak size. It changes the whole process, so a plain ``Loader`` leaves it alone; ``Trainer``,
    ``fit`` and ``sparsetrain train`` turn it on.

    ``prefetch=0`` loads each batch in the training thread instead. Overlap pays when the model runs on a
    GPU or leaves CPU cores free; when the model's CPU compute already keeps every core busy, the loader's
    threads only contend with it, and loading in between steps was 10% faster (2 cores, products-scale
    GraphSAGE: 506 vs 560 ms a step, benchmarks/RESULTS.md). With learnable features on a GPU, use
    ``prefetch=0``, so each batch reads the rows after the previous step updated them.
    """

    def __init__(self, sampler, features, labels: torch.Tensor | None, seeds: torch.Tensor, *, batch_size: int,
                 shuffle: bool = True, order=None, device: str | torch.device = "cpu", prefetch: int = 2,
                 seed: int = 0, drop_last: bool = False, rank: int = 0, world_size: int = 1,
                 loader_threads: int | None = None, retain_host_memory: bool = False,
                 timeout: float | None = BATCH_TIMEOUT_S, edge_features=None):
        if prefetch < 0:
            raise SettingError(f"prefetch={prefetch} must be >= 0")
        if timeout is not None and not timeout > 0:
            raise SettingError(f"timeout={timeout} must be a positive number of seconds (or None to wait forever)")
        if not isinstance(seeds, EdgeSeeds):
            seeds = torch.as_tensor(seeds, dtype=torch.int64)
            if seeds.dim() != 1:
                raise SettingError("seeds must be a 1-D tensor of node ids (or EdgeSeeds), got shape "
                                   f"{list(seeds.shape)}")
        self.seed_batches = SeedBatches(seeds, batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed, order=order,
                                        sampler=sampler, rank=rank, world_size=world_size)
        self.sample_stage = Sample(sampler)
        self.fetch_stage = FetchFeatures(features, labels, edge_features)
        self.device_stage = CopyToDevice(device)
        self.stages = [self.sample_stage, self.fetch_stage, self.device_stage]  # stages 2-4, in order (stages/chain.py)
        self.sampler = sampler
        self.features = self.fetch_stage.features
        self.labels = labels
        self.seeds = seeds
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.prefetch = prefetch
        self.loader_threads = loader_threads
        self.timeout = timeout
        self._epoch = 0
        if retain_host_memory:
            retain_freed_host_memory()
        self.last_epoch_stats = EpochStats()

    def __len__(self) -> int:
        return len(self.seed_batches)

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def batches(self, epoch: int) -> list[torch.Tensor | EdgeSeeds]:
        """This rank's seed batches of ``epoch``: a pure function of (seed, epoch, rank) (see
        :class:`~sparsetrain.sampling.SeedBatches`)."""
        return self.seed_batches.batches(epoch)

    def _pipeline(self, todo: list[SamplerInput | EdgeSamplerInput], stats: EpochStats | None = None
                  ) -> Iterator[Staged]:
        """Stages 2-4 over this epoch's inputs: batch k is sampled and its rows' fetch started before batch k - 1 is
        gathered (each stage's time into ``stats``)."""
        if stats is None:
            return run_chain(self.stages, todo)
        stats.stage_names = tuple(stage_name(stage) for stage in self.stages)
        return run_chain(self.stages, todo, stats.chain_seconds)

    def __iter__(self) -> Iterator:
        return self.epoch(self._epoch)

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator:
        """Batches of ``epoch`` from ``start_batch`` on; stats land in ``last_epoch_stats`` when it ends."""
        todo = self.seed_batches.inputs(epoch)[start_batch:]
        stats = EpochStats()
        self.last_epoch_stats = stats
        started = time.perf_counter()
        to_device = self.device_stage
        if self.prefetch == 0:  # in line: each batch is pulled through the chain when the loop asks for it
            pipeline = self._pipeline(todo, stats)
            while True:
                t0 = time.perf_counter()
                to_device.follow_compute()
                with to_device.stream():
                    staged = next(pipeline, None)
                if staged is None:
                    break
                mb = to_device.ready(staged)
                stats.wait_seconds += time.perf_counter() - t0
                stats.batches += 1
                stats.seeds += len(mb.seeds)
                yield mb
            stats.total_seconds = time.perf_counter() - started
            return

        to_device.follow_compute()
        producer = Producer(self._pipeline(todo, stats), depth=self.prefetch, timeout=self.timeout,
                            context=to_device.stream,
                            numba_threads=self.loader_threads)
        try:
            with producer:
                while True:
                    t0 = time.perf_counter()
                    try:
                        staged = producer.get()
                    except StopIteration:
                        break
                    finally:
                        stats.wait_seconds += time.perf_counter() - t0
                    mb = to_device.ready(staged)
                    stats.batches += 1
                    stats.seeds += len(mb.seeds)
                    yield mb
        finally:
            stats.total_seconds = time.perf_counter() - started
