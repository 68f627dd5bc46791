"""Sampling from edge seeds: negatives in the same pass, one multi-hop batch over the deduplicated endpoints, seed edges excluded.

:class:`LinkNeighborSampler` turns an :class:`~sparsetrain.sampling.EdgeSamplerInput` into a
:class:`LinkMiniBatch`:

1. negatives, drawn from the batch key: ``"binary"`` draws ``ceil(amount * E)`` random pairs and
   labels them 0 (positives keep their label, or 1), PyG's ``edge_label_index``/``edge_label``;
   ``"triplet"`` draws ``amount`` destinations per positive, PyG's
   ``src_index``/``dst_pos_index``/``dst_neg_index``;
2. the union of all endpoints, deduplicated once (``torch.unique``), is the seed set of one
   multi-hop :class:`~sparsetrain.sampling.NeighborSampler` batch; the label indices are local
   ids into it (seeds come first in ``input_nodes``);
3. exclusion (DGL's ``exclude``): ``"self"`` removes every sampled edge ``u -> v`` that is a
   positive seed edge, ``"reverse"`` also ``v -> u``, so a model cannot read a label off the graph.
   An edge can only be a seed edge when both its local ids are seeds (< number of seeds), so the
   test is a comparison on every edge and a sorted lookup on those few. Edges are matched by their
   endpoints: parallel copies of a seed edge go as well. With all neighbors (fanout -1) the
   blocks are then exactly the graph without the seed edges.
"""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass, fields, replace

import numba
import numpy as np
import torch

from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.input import EdgeSamplerInput, SamplerInput
from sparsetrain.sampling.minibatch import Block, MiniBatch
from sparsetrain.sampling.negatives import NegativeSampler
from sparsetrain.sampling.sampler import NeighborSampler

NEG_MODES = ("binary", "triplet")
EXCLUDE_MODES = ("none", "self", "reverse")


@dataclass
class LinkMiniBatch(MiniBatch):
    """A :class:`MiniBatch` sampled around seed edges; ``seeds`` are their deduplicated endpoints.

    Binary mode (or no negatives): ``edge_label_index`` [2, E'] local ids (into ``seeds``/``input_nodes``) and
    ``edge_label`` [E'] (also ``y``); triplet mode: ``src_index`` [E], ``dst_pos_index`` [E],
    ``dst_neg_index`` [E] or [E, K]. ``input_id``: the positive edges' positions in the loader's edge table.
    """

    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    src_index: torch.Tensor | None = None
    dst_pos_index: torch.Tensor | None = None
    dst_neg_index: torch.Tensor | None = None
    input_id: torch.Tensor | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> LinkMiniBatch:
        moved = super().to(device, non_blocking)
        extra = {f: getattr(self, f) for f in _LINK_FIELDS}
        return replace(moved, **{k: None if v is None else v.to(device, non_blocking=non_blocking) for k, v in extra.items()})

    def __repr__(self) -> str:
        labels = self.edge_label_index.shape[1] if self.edge_label_index is not None else (0 if self.src_index is None else self.src_index.numel())
        return f"Link{super().__repr__()[:-1]}, label_edges={labels})"


_LINK_FIELDS = ("edge_label_index", "edge_label", "src_index", "dst_pos_index", "dst_neg_index", "input_id")


class LinkNeighborSampler:
    """Sample around seed edges with ``sampler`` (a :class:`NeighborSampler`): see the module docstring.

    ``neg_sampling``: None, ``"binary"`` or ``"triplet"``; ``amount``: negatives per positive (an int
    for triplet). ``negatives``: a :class:`~sparsetrain.sampling.negatives.NegativeSampler` (default:
    uniform, not strict, seeded from ``sampler.seed``). ``exclude``: ``"none"``, ``"self"`` or
    ``"reverse"``. The same (sampler seed, key) gives the same batch, negatives included.
    """

    def __init__(self, sampler: NeighborSampler, *, neg_sampling: str | None = "binary", amount: float = 1.0,
                 negatives: NegativeSampler | None = None, exclude: str = "none") -> None:
        if not isinstance(sampler, NeighborSampler):
            raise SamplingError(f"sampler is a {type(sampler).__name__}; pass a sparsetrain.sampling.NeighborSampler")
        if sampler.graph.is_typed:
            raise SamplingError("sampling from edge seeds on a typed graph is not supported yet; pass a NeighborSampler over a homogeneous graph")
        if neg_sampling is not None and neg_sampling not in NEG_MODES:
            raise SamplingError(f"neg_sampling={neg_sampling!r}; choose None, 'binary' or 'triplet'")
        if exclude not in EXCLUDE_MODES:
            raise SamplingError(f"exclude={exclude!r}; choose one of {', '.join(EXCLUDE_MODES)}")
        if not (isinstance(amount, (int, float)) and math.isfinite(amount) and amount > 0):
            raise SamplingError(f"amount={amount!r}; give a positive number of negatives per positive")
        if neg_sampling == "triplet" and amount != int(amount):
            raise SamplingError(f"amount={amount} with triplet negatives; give a whole number of negatives per positive")
        self.sampler = sampler
        self.graph = sampler.graph
        self.neg_sampling = neg_sampling
        self.amount = amount
        self.negatives = negatives if negatives is not None else NegativeSampler(sampler.graph, seed=sampler.seed)
        self.exclude = exclude
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @property
    def fanouts(self) -> list[int]:
        return self.sampler.fanouts

    def sample(self, inp: EdgeSamplerInput) -> LinkMiniBatch:
        """The blocks around ``inp``'s edges and their negatives, with label indices into the batch's nodes."""
        if not isinstance(inp, EdgeSamplerInput):
            raise SamplingError(f"LinkNeighborSampler.sample takes an EdgeSamplerInput; got a {type(inp).__name__}")
        n = self.graph.num_nodes
        src, dst = inp.src.to(torch.int64), inp.dst.to(torch.int64)
        for what, ids in (("src", src), ("dst", dst)):
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
                raise SamplingError(f"seed edges' {what} has ids outside [0, {n}); seed edges must join nodes of this graph")
        key = inp.key
        if key is None:
            with self._lock:
                key = next(self._counter)
        device = src.device
        num_pos = src.numel()
        label = inp.label
        if self.neg_sampling == "binary":
            neg_src, neg_dst = self.negatives.pairs(math.ceil(num_pos * self.amount), key=key)
            src_all, dst_all = torch.cat([src, neg_src.to(device)]), torch.cat([dst, neg_dst.to(device)])
            pos_label = torch.ones(num_pos, device=device) if label is None else torch.as_tensor(label, device=device)
            label = torch.cat([pos_label, pos_label.new_zeros((neg_src.numel(), *pos_label.shape[1:]))])
        elif self.neg_sampling == "triplet":
            if label is not None:
                raise SamplingError("triplet negatives take no edge labels; drop the labels or use neg_sampling='binary'")
            neg_dst = self.negatives.destinations(src.cpu(), int(self.amount), key=key).to(device)
            src_all, dst_all = src, torch.cat([dst, neg_dst])
        else:
            src_all, dst_all = src, dst
        seeds, inverse = torch.unique(torch.cat([src_all, dst_all]), return_inverse=True)
        mb = self.sampler.sample(SamplerInput(seeds, key=key))
        blocks = mb.blocks
        if self.exclude != "none" and num_pos:
            local_src, local_dst = inverse[:num_pos], inverse[src_all.numel() : src_all.numel() + num_pos]
            blocks = exclude_edges(blocks, local_src, local_dst, seeds.numel(), self.exclude == "reverse")
        out = LinkMiniBatch(seeds=mb.seeds, input_nodes=mb.input_nodes, blocks=blocks, input_id=inp.input_id)
        if self.neg_sampling == "triplet":
            out.src_index = inverse[:num_pos]
            out.dst_pos_index = inverse[num_pos : 2 * num_pos]
            out.dst_neg_index = inverse[2 * num_pos :].view(num_pos, -1).squeeze(-1)
        else:
            out.edge_label_index = inverse.view(2, -1)
            out.edge_label = label
            out.y = label
        return out

    def __repr__(self) -> str:
        return (f"LinkNeighborSampler(neg_sampling={self.neg_sampling!r}, amount={self.amount}, exclude={self.exclude!r}, "
                f"negatives={self.negatives!r}, sampler={self.sampler!r})")


def exclude_edges(blocks: list[Block], local_src: torch.Tensor, local_dst: torch.Tensor, num_seeds: int, reverse: bool) -> list[Block]:
    """``blocks`` without the edges ``local_src[i] -> local_dst[i]`` (and their reverses); ids are local, seeds first."""
    keys = local_src * num_seeds + local_dst
    if reverse:
        keys = torch.cat([keys, local_dst * num_seeds + local_src])
    keys = torch.unique(keys)
    return [_filter_block(block, _kept(block.edge_index, keys, num_seeds)) for block in blocks]


@numba.njit(cache=True, nogil=True)
def _kept_cpu(src, dst, num_seeds, keys, keep):
    """``keep[e]``: edge ``e`` is not a seed edge (only edges between two seeds are looked up); returns the kept count."""
    kept = 0
    for e in range(src.shape[0]):
        s, d = src[e], dst[e]
        ok = True
        if s < num_seeds and d < num_seeds:
            key = s * num_seeds + d
            i = np.searchsorted(keys, key)
            ok = not (i < keys.shape[0] and keys[i] == key)
        keep[e] = ok
        kept += ok
    return kept


def _kept(edge_index: torch.Tensor, keys: torch.Tensor, num_seeds: int, numba_scan: bool | None = None) -> torch.Tensor | None:
    """Indices of the edges to keep, or None when every edge stays (a one-pass Numba scan on the CPU, torch ops elsewhere)."""
    s, d = edge_index
    if numba_scan if numba_scan is not None else edge_index.device.type == "cpu":
        keep = np.empty(s.numel(), np.bool_)
        kept = _kept_cpu(s.numpy(), d.numpy(), num_seeds, keys.numpy(), keep)
        return None if kept == s.numel() else torch.from_numpy(np.flatnonzero(keep))
    candidate = ((s < num_seeds) & (d < num_seeds)).nonzero().view(-1)
    k = s[candidate] * num_seeds + d[candidate]
    drop = keys[torch.searchsorted(keys, k).clamp_(max=keys.numel() - 1)] == k
    if not bool(drop.any()):
        return None
    keep = torch.ones(s.numel(), dtype=torch.bool, device=s.device)
    keep[candidate[drop]] = False
    return keep.nonzero().view(-1)


def _filter_block(block: Block, kept: torch.Tensor | None) -> Block:
    """The block with only the edges ``kept`` (indices); per-edge fields (``edge_index``, edge ids) filtered alike."""
    if kept is None:
        return block
    changes = {}
    for f in fields(block):
        value = getattr(block, f.name)
        if f.name != "edge_index" and isinstance(value, torch.Tensor) and value.dim() == 1 and value.numel() == block.num_edges:
            changes[f.name] = value.index_select(0, kept)
    return replace(block, edge_index=block.edge_index.index_select(1, kept), **changes)
