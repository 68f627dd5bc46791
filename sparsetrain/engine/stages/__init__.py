"""The loader's stages, each one small object; :class:`~sparsetrain.engine.Loader` composes them.

1. seed batches: :class:`~sparsetrain.sampling.SeedBatches` (shuffle, rank share, order, keys)
   -> ``SamplerInput``
2. :class:`Sample`: ``SamplerInput -> MiniBatch`` through any sampler
3. :class:`FetchFeatures`: attach ``x`` (any feature store or tensor) and ``y``
4. :class:`CopyToDevice`: to the training device (side stream and events on CUDA)

Stages 2-4 run in one :class:`Producer` thread ahead of compute, or in line.
Edge seeds and typed seeds reuse the chain: stage 1 hands out ``SamplerInput`` with
their fields, an edge or typed sampler fills a ``MiniBatch`` subclass, stage 3 fetches
per node type, and stage 4 moves whatever tensors the batch holds.
"""

from sparsetrain.engine.stages.device import CopyToDevice, Staged
from sparsetrain.engine.stages.fetch import FetchFeatures
from sparsetrain.engine.stages.producer import Producer
from sparsetrain.engine.stages.sample import Sample
from sparsetrain.errors import LoaderError

__all__ = ["CopyToDevice", "FetchFeatures", "LoaderError", "Producer", "Sample", "Staged"]
