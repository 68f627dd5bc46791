"""The GPU backends of :class:`~sparsetrain.sampling.NeighborSampler`, chosen once with its graph
(:func:`backend_for`): :class:`GpuBackend` for a graph in device memory, :class:`PinnedBackend` for one in
page-locked host memory (its batches follow their seeds: on the GPU when they are on it, else on the host).

A GPU batch is the per-hop driver of :mod:`sparsetrain.sampling.cuda` over the graph's device views
(:class:`~sparsetrain.sampling.cuda.graph.DeviceCSC`, made at the first batch): eager (:meth:`GpuBackend.draw`, sizes
read back once a batch), padded into fixed buffers with no host wait (:meth:`GpuBackend.sample_padded`) and, for
full padded batches, captured once as a CUDA graph and replayed (``capture=True``,
:mod:`~sparsetrain.sampling.cuda.capture`). The GPU kernels run directional, non-disjoint, non-temporal hops of one
seed type (a fused last hop included); a sampler with other options refuses its GPU batches in one line.
"""

from __future__ import annotations

import torch

from sparsetrain.errors import BackendError
from sparsetrain.sampling.cpu_backend import CpuBackend, Drawn
from sparsetrain.sampling.input import SamplerInput, ids_on

CPU_ONLY = ("disjoint, temporal, bidirectional and induced sampling, seeds of several types and zero hops run on the "
            "CPU only for now; keep the graph and the seeds on the host")


class GpuBackend:
    """Batches drawn on the GPU: on the graph's device (``device``), or on the seeds' (a pinned graph's, ``None``).
    Every call takes the ``sampler`` (the :class:`~sparsetrain.sampling.NeighborSampler` that built it) whose options
    and layouts it reads."""

    padded = True

    def __init__(self, sampler, device: torch.device | None) -> None:
        self._device = device
        self._refused = not sampler.has_gpu_path
        self._views = None  # the graph's DeviceCSC: its device views and per-thread workspaces, made at the first batch

    def select(self, seeds: list[tuple[int, torch.Tensor]]) -> GpuBackend:
        """This backend, for a batch of ``seeds`` the GPU kernels can draw; else the one-line refusal."""
        if self._refused or len(seeds) != 1:
            raise BackendError(CPU_ONLY)
        return self

    @property
    def last_batch_counts(self):
        return None if self._views is None else self._views.last_batch_counts

    def check_padded(self) -> None:
        """Wait for this thread's padded batches in flight and raise the first failed check."""
        if self._views is not None:
            self._views.workspace().late.drain()

    def draw(self, sampler, inp: SamplerInput, named: list, seeds: list[tuple[int, torch.Tensor]],
             key: int) -> Drawn:
        """Batch ``key`` around the one seed type's ids, eagerly: its arrays read back once it has run."""
        ((seed_type, ids),) = seeds
        ids = self._on_device(sampler, ids)
        if not sampler._block_layout.fanouts.shape[0]:  # a fused one-hop batch: its blocks are its seeds
            return Drawn([(seed_type, ids)], [ids], [])
        layers, nodes = self._run(sampler, ids, seed_type, key)
        return Drawn([(seed_type, ids)], nodes, layers)

    def sample_padded(self, sampler, seeds: torch.Tensor, key: int, out, capture: bool,
                      fused) -> None:
        """Batch ``key`` into the fixed buffers ``out`` with no host wait (``capture``: replayed as a CUDA graph once
        captured; ``fused``: the last hop's mean, a ``PaddedHop``, or None)."""
        self._run(sampler, self._on_device(sampler, seeds), 0, key, out, capture, fused)

    def _on_device(self, sampler, seeds: torch.Tensor) -> torch.Tensor:
        """The seeds as int64 on the batch's device; the graph's device views made at the first batch."""
        from sparsetrain.sampling.cuda.graph import DeviceCSC

        if self._views is None:
            self._views = DeviceCSC(sampler.graph)
        return ids_on(seeds, seeds.device if self._device is None else self._device)

    def _run(self, sampler, seeds: torch.Tensor, seed_type: int, key: int, padded=None,
             capture: bool = False, fused=None):
        from sparsetrain.sampling.cuda.driver import sample_layers

        layout = sampler._block_layout
        keys = [layout.hop_keys(sampler.seed, key, hop) for hop in range(layout.fanouts.shape[0])]
        return sample_layers(self._views, seeds, layout, keys, sampler.replace, sampler.weighted,
                             sampler.hop_nodes == "new", seed_type, padded, capture, fused)


class PinnedBackend:
    """A pinned graph's batches: on the GPU when their seeds are on it, else on the host."""

    def __init__(self, sampler) -> None:
        self.host = CpuBackend(sampler)
        self.gpu = GpuBackend(sampler, None)

    def select(self, seeds: list[tuple[int, torch.Tensor]]) -> CpuBackend | GpuBackend:
        if any(ids.device.type == "cuda" for _, ids in seeds):
            return self.gpu.select(seeds)
        return self.host

    @property
    def last_batch_counts(self):
        return self.gpu.last_batch_counts

    def check_padded(self) -> None:
        self.gpu.check_padded()


def backend_for(sampler) -> CpuBackend | GpuBackend | PinnedBackend:
    """The backend of a sampler over its graph, chosen once: the GPU for a graph in device memory, the seeds' device
    for a pinned one, else the CPU. (A pinned graph unpickled in another process is no longer pinned.)"""
    graph = sampler.graph
    if graph.device.type == "cuda":
        return GpuBackend(sampler, graph.device)
    return PinnedBackend(sampler) if graph.is_pinned() else CpuBackend(sampler)
