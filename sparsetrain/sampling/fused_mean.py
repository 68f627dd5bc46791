"""The last hop of a sampled batch drawn and averaged in one pass (FuseSampleAgg's idea), for a mean-aggregating
first layer (GraphSAGE).

At fanouts like [15, 10, 5] the outermost hop holds most of a batch's sampled edges, and a SAGE first layer only uses
their sources through ``mean_j x_j`` per destination. ``NeighborSampler(..., fuse_last_hop=True)`` samples the other
hops as usual and returns a :class:`FusedMiniBatch` whose ``last_hop`` (:class:`FusedLastHop`) holds what the outermost
hop needs: its destinations, fanout and key. :meth:`FusedLastHop.mean` then draws each destination's in-edges with the
sampler's own draws (:mod:`sparsetrain.sampling.draw`, the node's stream from the hop key) and averages the drawn
sources' feature rows: the batch needs neither that hop's dedupe and relabel nor the gather of its new nodes.

The kernel is written once (:mod:`sparsetrain.sampling.fused_draw`): :func:`fused_mean_cpu` runs it in parallel over
destinations, :mod:`sparsetrain.sampling.cuda.fused_mean` compiles the same source for the GPU. Homogeneous graphs
only. :class:`FuseLastHop` is the option as a mode of the sampler: its refusals, the hops left to the blocks, the
batch's last hop on either backend and a padded batch's (:class:`~sparsetrain.sampling.cuda.fused_mean.PaddedHop`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numba
import numpy as np
import torch
from numba import prange

from sparsetrain.errors import InputError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.fused_draw import draw_slots, draw_sources, mean_columns
from sparsetrain.sampling.graph import DAMAGED, CSCGraph
from sparsetrain.sampling.layout import KernelLayout
from sparsetrain.sampling.minibatch import MiniBatch
from sparsetrain.sampling.prefetch import prefetch

CHUNKS = 256  # destination ranges of the parallel CPU loop (results do not depend on it)
AHEAD = 16  # nodes ahead whose indptr entry is prefetched (half as far: the start of its in-edges)
LINE_FLOATS = 16  # float32 values a cache line holds: a row's prefetches step by it (a hint: any dtype is safe)
FEATURE_DTYPES = (torch.float32, torch.float64)


@numba.njit(cache=True, nogil=True, parallel=True)
def fused_mean_cpu(indptr, indices, weights, nodes, first, fanout, slots, key, replace, weighted, num_nodes, x, out):
    """``out[first + i]``: the mean feature row of node ``nodes[i]``'s drawn in-neighbours; rows below ``first``:
    zeros. Returns -1, or the smallest ``i`` whose node's in-edges lie outside the graph (its row is then zeros).
    ``slots``: :func:`~sparsetrain.sampling.fused_draw.draw_slots`.

    Bound by random row reads: each node's sources are drawn (into the other half of the scratch) and their rows
    prefetched one node before they are summed.
    """
    n = nodes.shape[0]
    width = out.shape[1]
    for r in prange(first):
        out[r, :] = 0.0
    chunks = min(n, CHUNKS)
    bad = np.full(max(chunks, 1), n, np.int64)
    half = slots
    for c in prange(chunks):
        lo = c * n // chunks
        hi = (c + 1) * n // chunks
        scratch = np.empty(2 * half, np.int64)
        next_start, next_k = draw_sources(indptr, indices, weights, nodes[lo], fanout, replace, weighted, key,
                                          num_nodes, scratch, 0)
        for i in range(lo, hi):
            if i + AHEAD < hi:  # the loads the draws chain through: indptr, then the start of the in-edge list
                prefetch(indptr, nodes[i + AHEAD])
                if i + AHEAD // 2 < hi:
                    prefetch(indices, indptr[nodes[i + AHEAD // 2]])
            start, k = next_start, next_k
            if i + 1 < hi:
                next_start, next_k = draw_sources(indptr, indices, weights, nodes[i + 1], fanout, replace, weighted,
                                                  key, num_nodes, scratch, ((i + 1 - lo) & 1) * half)
                for j in range(next_start, next_start + max(next_k, 0)):
                    s = indices[j] if fanout < 0 else scratch[j]
                    for f in range(0, width, LINE_FLOATS):
                        prefetch(x, s * width + f)
            if k < 0:
                bad[c] = min(bad[c], i)
                k = 0
            if fanout < 0:
                mean_columns(x, indices, start, k, out, first + i, 0, width)
            else:
                mean_columns(x, scratch, start, k, out, first + i, 0, width)
    worst = bad.min()
    return -1 if worst == n else worst


def feature_table(features: torch.Tensor | np.ndarray, num_nodes: int) -> torch.Tensor:
    """``features`` as the tensor a fused last hop averages rows of, refused in one line unless a whole ``[num_nodes
    or more, F]`` float32 or float64 table that requires no grad."""
    x = torch.from_numpy(features) if isinstance(features, np.ndarray) else features
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] < num_nodes or x.dtype not in FEATURE_DTYPES:
        shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        dtype = x.dtype if isinstance(x, torch.Tensor) else ""
        raise InputError(f"features {shape} {dtype}: the fused last hop averages rows of a [num_nodes >= "
                         f"{num_nodes}, F] float32 or float64 table; pass the whole feature table")
    if x.requires_grad:
        raise InputError("the features require grad, but the fused last hop's mean passes no gradient to them; "
                         "sample without fuse_last_hop to train them")
    return x


@dataclass
class FusedLastHop:
    """A batch's outermost hop, left to be drawn and averaged in one pass by :meth:`mean`.

    ``nodes``: global ids of the hop's destinations that draw in-edges, which are the first layer's dst nodes
    ``[first, num_dst)`` (``first`` is 0 unless the sampler's ``hop_nodes="new"``: then only the newest nodes draw);
    ``fanout``, ``key`` (the hop key), ``replace``, ``weighted``: the sampler's draws for that hop.
    """

    graph: CSCGraph
    nodes: torch.Tensor
    first: int
    num_dst: int
    fanout: int
    key: int
    replace: bool
    weighted: bool

    def mean(self, features: torch.Tensor | np.ndarray) -> torch.Tensor:
        """``[num_dst, F]`` float32: per first-layer dst node, the mean feature row of its sampled in-neighbours (the
        rows the unfused batch's outermost block averages; zeros for a node without any). ``features``: the whole
        table (``[num_nodes, F]``, float32 or float64); on a GPU when the graph is on it (or pinned), else on the
        host."""
        num_nodes = int(self.graph.num_nodes)
        x = feature_table(features, num_nodes)
        out = torch.empty((self.num_dst, x.shape[1]), dtype=torch.float32, device=x.device)
        weights = self.graph.weights if self.weighted else None
        if x.device.type == "cuda":
            from sparsetrain.sampling.cuda.fused_mean import fused_mean_cuda

            node = fused_mean_cuda(self.graph, self.nodes, self.first, self.fanout, self.key, self.replace,
                                   self.weighted, x, out)
        else:
            if self.graph.device.type != "cpu":
                raise InputError(f"the graph is on {self.graph.device} but the features on the host; keep both on "
                                 "one device for the fused last hop")
            self.graph.check_files()
            indptr, indices, _ = self.graph.numpy()
            w = np.empty(0, np.float32) if weights is None else weights.numpy()
            slots = draw_slots(indptr, self.fanout, self.replace)
            bad = fused_mean_cpu(indptr, indices, w, self.nodes.numpy(), self.first, self.fanout, slots,
                                 np.uint64(self.key), self.replace, self.weighted, num_nodes, x.numpy(), out.numpy())
            node = int(self.nodes[bad]) if bad >= 0 else -1
        if node >= 0:
            raise InputError(f"{self.graph.source('indices')}: the in-edges of node {node} lie outside the graph "
                             f"(its indptr range or an in-neighbour id); {DAMAGED}")
        return out


@dataclass
class FusedMiniBatch(MiniBatch):
    """A :class:`MiniBatch` of every hop but the outermost, which ``last_hop`` draws and averages in one pass.

    ``input_nodes`` are then the first layer's dst nodes (the features it reads besides the mean), and ``blocks`` the
    layers after the first: ``model(x, mb.to_pyg(), neighbor_mean=mb.last_hop.mean(features))``. A loader's fetch
    stage does that: it sets ``neighbor_mean`` and drops ``last_hop``.
    """

    last_hop: FusedLastHop | None = None
    neighbor_mean: torch.Tensor | None = None

    @classmethod
    def of(cls, mb: MiniBatch, last_hop: FusedLastHop) -> FusedMiniBatch:
        return cls(**{f.name: getattr(mb, f.name) for f in fields(mb)}, last_hop=last_hop)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> FusedMiniBatch:
        """A copy with every tensor on ``device`` (``last_hop``, which holds the graph, stays as it is)."""
        moved = super().to(device, non_blocking)
        if self.neighbor_mean is not None:
            moved.neighbor_mean = self.neighbor_mean.to(device, non_blocking=non_blocking)
        return moved


class FuseLastHop:
    """``NeighborSampler(fuse_last_hop=True)``: the hops before the outermost go into the blocks
    (``block_layout``), the outermost is the batch's :class:`FusedLastHop` (drawn by either backend's batch the same
    way, from the hop key of the last hop)."""

    def __init__(self, sampler) -> None:
        if sampler.graph.is_typed:  # the fused hop's one rule: the one-type graph
            raise InputError("fuse_last_hop=True needs the one-type graph (a typed first layer aggregates per edge "
                             "type); drop fuse_last_hop")
        if sampler.disjoint or sampler.subgraph_type != "directional":
            raise InputError("fuse_last_hop=True fuses directional, non-disjoint, non-temporal hops; drop "
                             "fuse_last_hop or those options")
        if not sampler.num_hops:
            raise InputError("fuse_last_hop=True needs at least one hop in fanouts")
        self.block_layout = KernelLayout(sampler.graph, Fanouts(sampler.fanouts.as_list()[:-1]))
        self.slots = None  # the last hop's draw slots in a padded batch (draw_slots), found at the first

    def batch(self, sampler, mb: MiniBatch, key: int, nodes: list[torch.Tensor], layers: list) -> FusedMiniBatch:
        """Batch ``key``'s hops before the last (``mb``, from ``nodes`` and ``layers``) with its last hop: drawn for
        the nodes the next hop would sample for."""
        first = int(layers[-1][3][0]) if layers and sampler.hop_nodes == "new" else 0
        return FusedMiniBatch.of(mb, self.last_hop(sampler, key, nodes[0][first:], first, int(nodes[0].numel())))

    def last_hop(self, sampler, key: int, nodes: torch.Tensor, first: int, num_dst: int) -> FusedLastHop:
        """The fused outermost hop of batch ``key``: ``nodes`` (global ids) draw in-edges into dst rows ``[first,
        num_dst)``."""
        hop = sampler.num_hops - 1
        layout = sampler._layout
        return FusedLastHop(sampler.graph, nodes, first, num_dst, int(layout.fanouts[hop, 0]),
                            int(layout.hop_keys(sampler.seed, key, hop)[0]), sampler.replace, sampler.weighted)

    def padded(self, sampler, key: int, out, features):
        """Padded batch ``key``'s last hop, averaged over ``features`` into ``out.neighbor_mean`` on the GPU
        (:class:`~sparsetrain.sampling.cuda.fused_mean.PaddedHop`)."""
        from sparsetrain.sampling.cuda.fused_mean import PaddedHop

        x, mean = feature_table(features, int(sampler.graph.num_nodes)), out.neighbor_mean
        if mean.device != x.device or mean.shape != (out.nodes[-1], x.shape[1]) or mean.dtype != torch.float32:
            raise InputError(f"out.neighbor_mean is {list(mean.shape)} {mean.dtype} on {mean.device}; the fused hop "
                             f"writes [{out.nodes[-1]}, {x.shape[1]}] float32 on the features' {x.device}")
        hop = sampler.num_hops - 1
        fanout = int(sampler._layout.fanouts[hop, 0])
        if self.slots is None:  # (a fanout above 64 reads the largest in-degree: once)
            self.slots = draw_slots(sampler.graph.indptr, fanout, sampler.replace)
        return PaddedHop(fanout, self.slots, sampler._layout.hop_keys(sampler.seed, key, hop), x)
