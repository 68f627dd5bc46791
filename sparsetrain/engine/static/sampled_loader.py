"""Sampling straight into a static step's buffers: a GPU sampler draws each batch into
:class:`~sparsetrain.engine.static.padded_batch.StaticBatch` itself (no copy of the batch, no host wait), which the
step then trains on. Whether a run samples this way is the plan's (``RunPlan.capture == "sampling+step"``); a loader
whose batches cannot be is refused in one line, never given the other path.
"""

from __future__ import annotations

import time

import torch

from sparsetrain.engine.loader import EpochStats
from sparsetrain.engine.static.step import StaticStep
from sparsetrain.errors import SettingError
from sparsetrain.sampling import NeighborSampler, SamplerInput
from sparsetrain.storage import TensorFeatures


class SampledLoader:
    """``loader``'s batches sampled straight into ``step``'s buffers on the GPU (:meth:`StaticBatch.sample`): it yields
    ``step.batch`` itself, filled, for ``step.step``. No batch is copied and none waits for the device; a bad seed or a
    damaged graph raises a batch or more late, and at the latest when the epoch ends. Each epoch's seeds go to the
    device in one copy. Everything else (seed batches, keys, length, device, epoch stats) is ``loader``'s, whose
    ``sampler`` samples; ``features`` and ``labels``: tensors on the step's device. ``capture``: the full batches'
    sampling captured once as a CUDA graph and replayed (``NeighborSampler.sample_padded``'s ``capture``; opt-in: not
    yet measured on a GPU). See :func:`sampled_loader`."""

    def __init__(self, loader, step: StaticStep, features: torch.Tensor, labels: torch.Tensor,
                 capture: bool = False) -> None:
        self.loader, self.step, self._rows, self._labels = loader, step, features, labels
        self.capture = capture

    def __getattr__(self, name: str):
        return getattr(self.loader, name)

    def __len__(self) -> int:
        return len(self.loader)

    def epoch(self, epoch: int, start_batch: int = 0):
        todo = self.loader.seed_batches.inputs(epoch)[start_batch:]
        stats = self.loader.last_epoch_stats = EpochStats()
        started = time.perf_counter()
        seeds = torch.cat([inp.seeds for inp in todo]).to(self.step.device) if todo else None
        first = 0
        for inp in todo:
            t0 = time.perf_counter()
            part = seeds[first: first + len(inp.seeds)]
            first += len(part)
            self.step.batch.sample(self.loader.sampler, SamplerInput(part, key=inp.key), self._rows, self._labels,
                                   self.capture)
            stats.wait_seconds += time.perf_counter() - t0
            stats.batches += 1
            stats.seeds += len(part)
            yield self.step.batch
        self.loader.sampler.check_padded()
        stats.total_seconds = time.perf_counter() - started


def sampled_loader(loader, step: StaticStep, capture: bool = False) -> SampledLoader:
    """A :class:`SampledLoader` over ``loader`` (its sampling captured if ``capture``), for a run whose plan samples
    its batches into ``step``'s buffers (``RunPlan.capture == "sampling+step"``): on a GPU, with the graph, the
    features (one tensor) and the labels in its memory, and a homogeneous sampler that has a GPU path. A loader whose
    batches cannot be sampled in is an error naming why, never the other path (the loader's batches copied in: pass
    ``loader`` itself to the step's trainer for that)."""
    why = _not_sampled_in(loader, step)
    if why is not None:
        raise SettingError(f"--step static on {step.device} was planned to sample each batch into the step's buffers "
                           f"and capture it, but {why}; run without capture: drop --step static")
    return SampledLoader(loader, step, loader.features.tensor, loader.labels, capture)


def _not_sampled_in(loader, step: StaticStep) -> str | None:
    """Why ``loader``'s batches cannot be sampled straight into ``step``'s buffers (None: they can)."""
    sampler, store, labels, device = loader.sampler, loader.features, loader.labels, step.device

    def on_step_device(tensor) -> bool:  # ("cuda" names the current device, as "cuda:0" does on one GPU)
        return tensor.device.type == device.type and device.index in (None, tensor.device.index)

    if device.type != "cuda":
        return f"the step runs on {device}"
    if not (isinstance(sampler, NeighborSampler) and sampler.has_gpu_path):
        return f"the sampler ({type(sampler).__name__}) has no GPU path"
    why = sampler.padded_refusal()
    if why is not None:
        return f"padded batches need the one-type graph and {why}"
    if not on_step_device(sampler.graph.indptr):
        return "the graph is not in the step's GPU memory"
    if not (isinstance(store, TensorFeatures) and on_step_device(store.tensor)):
        return f"the features ({type(store).__name__}) are not one tensor in the step's GPU memory"
    if not (isinstance(labels, torch.Tensor) and on_step_device(labels)):
        return "the labels are not in the step's GPU memory"
    return None


__all__ = ["SampledLoader", "sampled_loader"]
