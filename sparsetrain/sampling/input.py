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

from sparsetrain.errors import InputError


@dataclass(frozen=True)
class SamplerInput:
    """A batch of seed nodes and the key that fixes its random draws.

    ``seeds``: node ids (1-D integer tensor). ``key``: the batch key the sampler's
    random numbers derive from, so the same (sampler seed, key) redraws the same
    batch, e.g. on resume; ``None`` takes the sampler's next own key (its call counter).
    ``node_type``: the node type of the seeds, for a typed sampler (``None``: the sampler's own ``seed_type``);
    or ``seeds`` is a dict ``{node_type: ids}`` (seeds of several types in one batch, e.g. both ends of typed edges).
    ``seed_time``: for a temporal sampler, each seed's time (a tensor aligned with ``seeds``, a dict when they are);
    ``None`` uses the seeds' own node times.
    """

    seeds: torch.Tensor | dict[str, torch.Tensor]
    key: int | None = None
    node_type: str | None = None
    seed_time: torch.Tensor | dict[str, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seeds, dict):
            if self.node_type is not None:
                raise InputError("SamplerInput has seeds per node type (a dict) and node_type; give one of them")
            object.__setattr__(self, "seeds", {t: torch.as_tensor(v) for t, v in self.seeds.items()})
        else:
            object.__setattr__(self, "seeds", torch.as_tensor(self.seeds))
        object.__setattr__(self, "key", _check_key(self.key, "SamplerInput"))

    def __repr__(self) -> str:
        typed = "" if self.node_type is None else f", node_type={self.node_type!r}"
        count = {t: v.numel() for t, v in self.seeds.items()} if isinstance(self.seeds, dict) else self.seeds.numel()
        timed = "" if self.seed_time is None else ", seed_time=..."
        return f"SamplerInput(seeds={count}, key={self.key}{typed}{timed})"


def _check_key(key, what: str) -> int | None:
    if key is None:
        return None
    try:
        checked = None if isinstance(key, bool) else operator.index(key)
    except TypeError:
        checked = None
    if checked is None or checked < 0:
        raise InputError(f"{what} key={key!r}; give a non-negative int, or None for the sampler's own counter")
    return checked


def _node_ids(value, what: str) -> torch.Tensor:
    t = torch.as_tensor(value)
    if t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool or t.dtype.is_complex:
        raise InputError(f"{what} must be a 1-D integer tensor of node ids; got shape {list(t.shape)} dtype "
                         f"{t.dtype}")
    return t


@dataclass(frozen=True)
class EdgeSamplerInput:
    """A batch of seed edges ``src[i] -> dst[i]`` (optional ``label`` per edge) and the key that fixes its draws.

    ``input_id``: each edge's position in the loader's edge table (PyG's ``input_id``); ``key`` as in
    :class:`SamplerInput`. ``time``: each edge's time, for a temporal sampler (PyG's ``edge_label_time``).
    Negatives are the sampler's to draw (see :class:`~sparsetrain.sampling.LinkNeighborSampler`).
    """

    src: torch.Tensor
    dst: torch.Tensor
    label: torch.Tensor | None = None
    key: int | None = None
    input_id: torch.Tensor | None = None
    time: torch.Tensor | None = None

    def __post_init__(self) -> None:
        src, dst = _node_ids(self.src, "EdgeSamplerInput.src"), _node_ids(self.dst, "EdgeSamplerInput.dst")
        if src.shape != dst.shape:
            raise InputError(f"EdgeSamplerInput has {src.numel()} sources but {dst.numel()} destinations; give one "
                             "of each per edge")
        if self.label is not None and torch.as_tensor(self.label).shape[:1] != src.shape:
            raise InputError(f"EdgeSamplerInput.label has shape {list(torch.as_tensor(self.label).shape)}; give one "
                             f"label per edge ({src.numel()})")
        if self.time is not None and torch.as_tensor(self.time).reshape(-1).shape != src.shape:
            raise InputError(f"EdgeSamplerInput.time has {torch.as_tensor(self.time).numel()} entries; give one "
                             f"time per edge ({src.numel()})")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "key", _check_key(self.key, "EdgeSamplerInput"))

    def __len__(self) -> int:
        return self.src.numel()

    def __repr__(self) -> str:
        return f"EdgeSamplerInput(edges={self.src.numel()}, labels={self.label is not None}, key={self.key})"


@dataclass(frozen=True)
class EdgeSeeds:
    """The edge table a loader iterates: ``src``, ``dst`` [E] and optional ``label`` [E]; indexing keeps each edge's
    position.

    ``SeedBatches`` shuffles and cuts it like node ids; :meth:`input` makes a batch's
    :class:`EdgeSamplerInput` (``input_id`` = positions in the full table).
    """

    src: torch.Tensor
    dst: torch.Tensor
    label: torch.Tensor | None = None
    ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        src = _node_ids(self.src, "edge seeds src").to(torch.int64)
        dst = _node_ids(self.dst, "edge seeds dst").to(torch.int64)
        if src.shape != dst.shape:
            raise InputError(f"edge seeds: {src.numel()} sources but {dst.numel()} destinations; give one of each "
                             "per edge")
        if self.label is not None and torch.as_tensor(self.label).shape[:1] != src.shape:
            raise InputError(f"edge seeds: label has shape {list(torch.as_tensor(self.label).shape)}; give one "
                             f"label per edge ({src.numel()})")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        if self.ids is None:
            object.__setattr__(self, "ids", torch.arange(src.numel()))

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, label: torch.Tensor | None = None) -> EdgeSeeds:
        """From a PyG-style ``[2, E]`` tensor (row 0 sources, row 1 destinations)."""
        edge_index = torch.as_tensor(edge_index)
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise InputError(f"edge_label_index has shape {list(edge_index.shape)}; expected [2, num_edges]")
        return cls(edge_index[0], edge_index[1], label)

    def __len__(self) -> int:
        return self.src.numel()

    def __getitem__(self, index) -> EdgeSeeds:
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        return EdgeSeeds(self.src[index], self.dst[index], pick(self.label), self.ids[index])

    def input(self, key: int | None = None) -> EdgeSamplerInput:
        return EdgeSamplerInput(self.src, self.dst, self.label, key=key, input_id=self.ids)


def ids_on(ids: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``ids`` as int64 on ``device``; host ids bound for a GPU go through a pinned buffer (a copy from pageable
    memory waits for the stream, a host wait on the sampler's critical path)."""
    ids = ids.to(torch.int64)
    if device.type == "cuda" and ids.device.type == "cpu":
        return ids.pin_memory().to(device, non_blocking=True)
    return ids.to(device)
