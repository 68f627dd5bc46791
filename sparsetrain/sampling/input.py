"""`SamplerInput`: what every sampler is handed, whoever calls it (a loader, batch ordering, a user).

The typed counterpart of a sampler's output (:class:`~sparsetrain.sampling.MiniBatch`).
Seeds of other kinds (edge pairs with negatives, per-node-type ids) arrive as fields
added here, so a loader hands them over through the same one-argument
``sampler.sample(inp)`` call it uses for node seeds.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from sparsetrain.sampling.errors import SamplingError


@dataclass(frozen=True)
class SamplerInput:
    """A batch of seed nodes and the key that fixes its random draws.

    ``seeds``: node ids (1-D integer tensor). ``key``: the batch key the sampler's
    random numbers derive from, so the same (sampler seed, key) redraws the same
    batch, e.g. on resume; ``None`` takes the sampler's next own key (its call counter).
    ``node_type``: the node type of the seeds, for a typed sampler (``None``: the sampler's own ``seed_type``).
    """

    seeds: torch.Tensor
    key: int | None = None
    node_type: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", torch.as_tensor(self.seeds))
        if self.key is None:
            return
        try:
            key = None if isinstance(self.key, bool) else operator.index(self.key)
        except TypeError:
            key = None
        if key is None or key < 0:
            raise SamplingError(f"SamplerInput key={self.key!r}; give a non-negative int, or None for the sampler's own counter")
        object.__setattr__(self, "key", key)

    def __repr__(self) -> str:
        typed = "" if self.node_type is None else f", node_type={self.node_type!r}"
        return f"SamplerInput(seeds={self.seeds.numel()}, key={self.key}{typed})"
