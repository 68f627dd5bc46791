"""Stage 2, sample: ``SamplerInput -> MiniBatch`` through any sampler.

The stage asks nothing of the sampler but the one contract ``sample(SamplerInput) -> MiniBatch``
(``NeighborSampler``, ``ClusterSampler``, a user's own); edge-seed and typed samplers take
the same input type with their fields filled and return a ``MiniBatch`` subclass.
"""

from __future__ import annotations

from sparsetrain.errors import LoaderError
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.minibatch import MiniBatch


class Sample:
    """Call ``sampler.sample(inp)`` and check that a :class:`~sparsetrain.sampling.MiniBatch` came back."""

    phase = "sample"  # its profiler range (stages/chain.py)

    def __init__(self, sampler) -> None:
        self.sampler = sampler

    def __call__(self, inp: SamplerInput) -> MiniBatch:
        mb = self.sampler.sample(inp)
        if not isinstance(mb, MiniBatch):
            raise LoaderError(f"{type(self.sampler).__name__}.sample returned a {type(mb).__name__}; "
                              "a sampler must return a sparsetrain.sampling.MiniBatch (or a subclass)")
        return mb
