"""Sampling from edge seeds: negatives in the same pass, one multi-hop batch over the deduplicated endpoints, seed edges
excluded.

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
from dataclasses import dataclass, replace

import numba
import numpy as np
import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.graph import EDGE_TYPE, CSCGraph, EdgeType
from sparsetrain.sampling.input import EdgeSamplerInput, SamplerInput, ids_on
from sparsetrain.sampling.minibatch import Block, MiniBatch
from sparsetrain.sampling.negatives import NegativeSampler
from sparsetrain.sampling.sampler import NeighborSampler

NEG_MODES = ("binary", "triplet")
EXCLUDE_MODES = ("none", "self", "reverse")


@dataclass
class LinkMiniBatch(MiniBatch):
    """A :class:`MiniBatch` sampled around seed edges; ``seeds`` are their endpoints (deduplicated unless disjoint).

    Binary mode (or no negatives): ``edge_label_index`` [2, E'] local ids (into ``seeds``/``input_nodes``; typed: row 0
    of the src type, row 1 of the dst type) and ``edge_label`` [E'] (also ``y``); triplet mode: ``src_index`` [E],
    ``dst_pos_index`` [E], ``dst_neg_index`` [E] or [E, K]. ``input_id``: the positive edges' positions in the loader's
    edge table. ``seed_time``: temporal sampling, the time of each label edge's source (PyG's ``seed_time``).
    """

    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    src_index: torch.Tensor | None = None
    dst_pos_index: torch.Tensor | None = None
    dst_neg_index: torch.Tensor | None = None
    input_id: torch.Tensor | None = None
    seed_time: torch.Tensor | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> LinkMiniBatch:
        moved = super().to(device, non_blocking)
        extra = {f: getattr(self, f) for f in _LINK_FIELDS}
        return replace(moved, **{k: None if v is None else v.to(device, non_blocking=non_blocking) for k,
                                 v in extra.items()})

    def __repr__(self) -> str:
        if self.edge_label_index is not None:
            labels = self.edge_label_index.shape[1]
        else:
            labels = 0 if self.src_index is None else self.src_index.numel()
        return f"Link{super().__repr__()[:-1]}, label_edges={labels})"


_LINK_FIELDS = ("edge_label_index", "edge_label", "src_index", "dst_pos_index", "dst_neg_index", "input_id",
                "seed_time")
NEGATIVE_REDRAWS = 5  # temporal negatives later than their seed edge: redraws before the earliest node stands in (PyG)


class LinkNeighborSampler:
    """Sample around seed edges with ``sampler`` (a :class:`NeighborSampler`): see the module docstring.

    ``neg_sampling``: None, ``"binary"`` or ``"triplet"``; ``amount``: negatives per positive (an int
    for triplet). ``negatives``: a :class:`~sparsetrain.sampling.negatives.NegativeSampler` (default:
    uniform, not strict, seeded from ``sampler.seed``; ``negative_weights=(src_weight, dst_weight)`` draws
    proportionally to node weights, either may be None). ``exclude``: ``"none"``, ``"self"`` or
    ``"reverse"``. The same (sampler seed, key) gives the same batch, negatives included.

    On a typed graph ``edge_type`` names the seed edges' type (it need not be one of the graph's: only its end node
    types are read); seeds of its two end types are sampled in one batch. With a disjoint ``sampler`` every endpoint
    (negatives included) grows its own subgraph, seeds first in PyG's order (sources, then destinations, then
    negatives), and ``batch`` is the seed edge's index (PyG's ``batch % num_pos``). A temporal ``sampler`` reads the
    seed edges' times (``EdgeSamplerInput.time``): each endpoint's subgraph stops at its edge's time, and negatives
    with a node time later than it are redrawn (:data:`NEGATIVE_REDRAWS` times, then the earliest node), as in PyG.
    """

    def __init__(self, sampler: NeighborSampler, *, neg_sampling: str | None = "binary", amount: float = 1.0,
                 negatives: NegativeSampler | None = None, exclude: str = "none", edge_type: EdgeType | None = None,
                 negative_weights: tuple[torch.Tensor | None, torch.Tensor | None] | None = None) -> None:
        if not isinstance(sampler, NeighborSampler):
            raise InputError(f"sampler is a {type(sampler).__name__}; pass a sparsetrain.sampling.NeighborSampler")
        if neg_sampling is not None and neg_sampling not in NEG_MODES:
            raise InputError(f"neg_sampling={neg_sampling!r}; choose None, 'binary' or 'triplet'")
        if exclude not in EXCLUDE_MODES:
            raise InputError(f"exclude={exclude!r}; choose one of {', '.join(EXCLUDE_MODES)}")
        if exclude != "none" and sampler.disjoint:
            raise InputError(f"exclude={exclude!r} with disjoint (or temporal) sampling is not supported; use "
                             "exclude='none'")
        if not (isinstance(amount, (int, float)) and math.isfinite(amount) and amount > 0):
            raise InputError(f"amount={amount!r}; give a positive number of negatives per positive")
        if neg_sampling == "triplet" and amount != int(amount):
            raise InputError(f"amount={amount} with triplet negatives; give a whole number of negatives per "
                             "positive")
        graph = sampler.graph
        edge_type = EDGE_TYPE if edge_type is None else tuple(edge_type)  # (a one-type graph's by default)
        if len(edge_type) != 3 or (edge_type == EDGE_TYPE and edge_type not in graph.edge_types):
            raise InputError("name the seed edges' type with edge_type=(src_type, relation, dst_type) (the graph's "
                             f"edge types: {graph.edge_types})")
        for end in (edge_type[0], edge_type[2]):
            if end not in graph.node_types:
                raise InputError(f"edge_type {edge_type} names node type {end!r}, which the graph does not "
                                 f"have ({graph.node_types})")
        num_nodes = graph.type_layout.num_nodes
        num_src = num_nodes[edge_type[0]]
        has_edges = edge_type in graph.edge_types
        relation = graph.relation(edge_type) if has_edges else _no_edges(num_nodes[edge_type[2]])
        self.sampler = sampler
        self.graph = graph
        self.edge_type = edge_type
        self.neg_sampling = neg_sampling
        self.amount = amount
        if negatives is None:
            src_weight, dst_weight = negative_weights or (None, None)
            negatives = NegativeSampler(relation, seed=sampler.seed, num_sources=num_src, src_weight=src_weight,
                                        dst_weight=dst_weight)
        self.negatives = negatives
        self.exclude = exclude
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @property
    def fanouts(self) -> Fanouts:
        """The inner sampler's fanouts."""
        return self.sampler.fanouts

    def sample(self, inp: EdgeSamplerInput) -> LinkMiniBatch:
        """The blocks around ``inp``'s edges and their negatives, with label indices into the batch's nodes."""
        if not isinstance(inp, EdgeSamplerInput):
            raise InputError(f"LinkNeighborSampler.sample takes an EdgeSamplerInput; got a {type(inp).__name__}")
        num_src, num_dst = self.negatives.num_sources, self.negatives.num_nodes
        on_gpu = self.graph.device.type == "cuda"  # the endpoints are deduplicated and excluded where the graph is
        src, dst = (ids_on(ids, self.graph.device) if on_gpu else ids.to(torch.int64) for ids in (inp.src, inp.dst))
        for what, ids, n in (("src", src, num_src), ("dst", dst, num_dst)):
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
                raise InputError(f"seed edges' {what} has ids outside [0, {n}); seed edges must join nodes of this "
                                 "graph")
        if inp.time is not None and not self.sampler.is_temporal:
            raise InputError("the seed edges carry times but the sampler is not temporal; give it node_time or "
                             "edge_time")
        key = inp.key
        if key is None:
            with self._lock:
                key = next(self._counter)
        device = src.device
        num_pos = src.numel()
        label = inp.label
        disjoint = self.sampler.disjoint
        time = None if inp.time is None else torch.as_tensor(inp.time).reshape(-1).cpu()
        src_time = dst_time = time
        if self.neg_sampling == "binary":
            num_neg = math.ceil(num_pos * self.amount)
            neg_src, neg_dst = self.negatives.pairs(num_neg, key=key)
            if time is not None:
                neg_src = self._in_time(neg_src, time, key, "src")
                neg_dst = self._in_time(neg_dst, time, key, "dst")
                src_time = dst_time = time.repeat(1 + math.ceil(self.amount))[: num_pos + num_neg]
            src_all, dst_all = torch.cat([src, neg_src.to(device)]), torch.cat([dst, neg_dst.to(device)])
            pos_label = torch.ones(num_pos, device=device) if label is None else torch.as_tensor(label, device=device)
            label = torch.cat([pos_label, pos_label.new_zeros((neg_src.numel(), *pos_label.shape[1:]))])
        elif self.neg_sampling == "triplet":
            if label is not None:
                raise InputError("triplet negatives take no edge labels; drop the labels or use "
                                 "neg_sampling='binary'")
            k = int(self.amount)
            neg_dst = self.negatives.destinations(src.cpu(), k, key=key)
            if disjoint:  # PyG's disjoint layout: negative j of every positive, then negative j + 1, ...
                neg_dst = neg_dst.view(num_pos, k).t().reshape(-1)
            if time is not None:
                neg_dst = self._in_time(neg_dst, time, key, "dst")
                dst_time = time.repeat(1 + k)
            src_all, dst_all = src, torch.cat([dst, neg_dst.to(device)])
        else:
            src_all, dst_all = src, dst
        distinct_ends = self.edge_type[0] != self.edge_type[2]
        if distinct_ends:
            inverse_src = inverse_dst = None
            if disjoint:
                seeds = {self.edge_type[0]: src_all, self.edge_type[2]: dst_all}
            else:
                src_seeds, inverse_src = torch.unique(src_all, return_inverse=True)
                dst_seeds, inverse_dst = torch.unique(dst_all, return_inverse=True)
                seeds = {self.edge_type[0]: src_seeds, self.edge_type[2]: dst_seeds}
            seed_time = None if time is None else {self.edge_type[0]: src_time, self.edge_type[2]: dst_time}
            mb = self.sampler.sample(SamplerInput(seeds, key=key, seed_time=seed_time))
        else:
            both = torch.cat([src_all, dst_all])
            if disjoint:
                seeds, inverse = both, torch.arange(both.numel(), device=device)
            else:
                seeds, inverse = torch.unique(both, return_inverse=True)
            seed_time = None if time is None else torch.cat([src_time, dst_time])
            mb = self.sampler.sample(SamplerInput(seeds, key=key, node_type=self.edge_type[0], seed_time=seed_time))
            inverse_src, inverse_dst = inverse[: src_all.numel()], inverse[src_all.numel() :]
        blocks, flat = mb.blocks, mb.subgraph
        if self.exclude != "none" and num_pos:
            blocks, flat = self._excluded(mb, inverse_src[:num_pos], inverse_dst[:num_pos])
        out = LinkMiniBatch(seeds_by_type=mb.seeds_by_type, input_nodes_by_type=mb.input_nodes_by_type, blocks=blocks,
                            input_id=inp.input_id, seed_type=mb.seed_type, nodes_per_hop=mb.nodes_per_hop,
                            edges_per_hop=mb.edges_per_hop, subgraph=flat, seed_time=src_time)
        if disjoint:  # (PyG's batch % num_pos)
            out.batch_by_type = {t: b % max(num_pos, 1) for t, b in mb.batch_by_type.items()}
            inverse_src = torch.arange(src_all.numel(), device=device) if distinct_ends else inverse_src
            inverse_dst = torch.arange(dst_all.numel(), device=device) if distinct_ends else inverse_dst
        if self.neg_sampling == "triplet":
            out.src_index = inverse_src[:num_pos]
            out.dst_pos_index = inverse_dst[:num_pos]
            neg_index = inverse_dst[num_pos:]
            if disjoint:
                neg_index = neg_index.view(-1, num_pos).t()
            out.dst_neg_index = neg_index.reshape(num_pos, -1).squeeze(-1)
        else:
            out.edge_label_index = torch.stack([inverse_src, inverse_dst])
            out.edge_label = label
            out.y = label
        return out

    def _in_time(self, nodes: torch.Tensor, time: torch.Tensor, key: int, end: str) -> torch.Tensor:
        """Negative ``nodes`` (entry ``f`` for seed edge ``f % len(time)``) redrawn where their node time is later than
        its edge's."""
        times = self.sampler.times
        node_type = self.edge_type[0 if end == "src" else 2]
        if node_type not in times.timed_types or not nodes.numel():
            return nodes
        t = times.types.index(node_type)
        node_time = torch.from_numpy(times.node_time[times.type_offset[t] : times.type_offset[t + 1]])
        bound = time.to(node_time.dtype).repeat(math.ceil(nodes.numel() / max(time.numel(), 1)))[: nodes.numel()]
        nodes = nodes.clone()
        late = node_time[nodes] > bound
        for attempt in range(1, NEGATIVE_REDRAWS + 1):
            if not bool(late.any()):
                return nodes
            fresh = self.negatives.nodes(int(late.sum()), key, end, attempt)
            nodes[late] = fresh
            late[late.clone()] = node_time[fresh] > bound[late]
        nodes[late] = int(torch.argmin(node_time))
        return nodes

    def _excluded(self, mb: MiniBatch, local_src: torch.Tensor, local_dst: torch.Tensor):
        """``mb``'s blocks (and flat subgraph) without the positive seed edges (and their reverses, for
        ``"reverse"``: edges of a type from the seed edges' dst type to their src type)."""
        seeds = mb.seeds_by_type
        src_type, _, dst_type = self.edge_type
        n_src, n_dst = seeds[src_type].numel(), seeds[dst_type].numel()
        forward, backward = local_src * n_dst + local_dst, local_dst * n_src + local_src
        dropped = {}
        for et in mb.edge_types:  # the sorted keys (src * dst seeds + dst) to drop per edge type
            keys = [forward] * (et == self.edge_type)
            keys += [backward] * (self.exclude == "reverse" and (et[0], et[2]) == (dst_type, src_type))
            if keys:
                dropped[et] = torch.unique(torch.cat(keys))

        def filtered(block: Block) -> Block:
            edge_index, edge_ids = dict(block.edge_index_by_type), dict(block.edge_ids_by_type or {})
            for et, keys in dropped.items():
                kept = None if et not in edge_index else _kept(edge_index[et], keys, seeds[et[0]].numel(),
                                                               seeds[et[2]].numel())
                if kept is not None:
                    edge_index[et] = edge_index[et].index_select(1, kept)
                    if et in edge_ids:
                        edge_ids[et] = edge_ids[et].index_select(0, kept)
            return replace(block, edge_index_by_type=edge_index,
                           edge_ids_by_type=None if block.edge_ids_by_type is None else edge_ids)

        return [filtered(b) for b in mb.blocks], None if mb.subgraph is None else filtered(mb.subgraph)

    def __repr__(self) -> str:
        return (f"LinkNeighborSampler(neg_sampling={self.neg_sampling!r}, amount={self.amount}, "
                f"exclude={self.exclude!r}, negatives={self.negatives!r}, sampler={self.sampler!r})")


@numba.njit(cache=True, nogil=True)
def _kept_cpu(src, dst, num_src_seeds, num_dst_seeds, keys, keep):
    """``keep[e]``: edge ``e`` is not a seed edge (only edges between two seeds are looked up); returns the kept
    count."""
    kept = 0
    for e in range(src.shape[0]):
        s, d = src[e], dst[e]
        ok = True
        if s < num_src_seeds and d < num_dst_seeds:
            key = s * num_dst_seeds + d
            i = np.searchsorted(keys, key)
            ok = not (i < keys.shape[0] and keys[i] == key)
        keep[e] = ok
        kept += ok
    return kept


def _kept(edge_index: torch.Tensor, keys: torch.Tensor, num_seeds: int, num_dst_seeds: int | None = None,
          numba_scan: bool | None = None) -> torch.Tensor | None:
    """Indices of the edges to keep, or None when every edge stays (a one-pass Numba scan on the CPU, torch ops
    elsewhere).

    ``keys``: sorted ``src * num_dst_seeds + dst`` of the edges to drop; both ends are seeds (source ids below
    ``num_seeds``, destination ids below ``num_dst_seeds``, default ``num_seeds``).
    """
    num_dst_seeds = num_seeds if num_dst_seeds is None else num_dst_seeds
    s, d = edge_index
    if numba_scan if numba_scan is not None else edge_index.device.type == "cpu":
        keep = np.empty(s.numel(), np.bool_)
        kept = _kept_cpu(s.numpy(), d.numpy(), num_seeds, num_dst_seeds, keys.numpy(), keep)
        return None if kept == s.numel() else torch.from_numpy(np.flatnonzero(keep))
    candidate = ((s < num_seeds) & (d < num_dst_seeds)).nonzero().view(-1)
    k = s[candidate] * num_dst_seeds + d[candidate]
    drop = keys[torch.searchsorted(keys, k).clamp_(max=keys.numel() - 1)] == k
    if not bool(drop.any()):
        return None
    keep = torch.ones(s.numel(), dtype=torch.bool, device=s.device)
    keep[candidate[drop]] = False
    return keep.nonzero().view(-1)


def _no_edges(num_nodes: int) -> CSCGraph:
    """A relation without edges over ``num_nodes`` destination nodes (seed edges of a type without graph edges)."""
    return CSCGraph(torch.zeros(num_nodes + 1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
