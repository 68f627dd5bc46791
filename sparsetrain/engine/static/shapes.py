"""The padded shapes of a static step's batch: every level's rows and every hop's edges bounded from the batch size
and fanouts, so one captured step (:mod:`sparsetrain.engine.static.step`) fits every batch.

A sampled batch's sizes change from batch to batch, so its step cannot be captured once. Here every level of the
batch (the seeds, the nodes of each hop) is padded to its upper bound from the batch size and fanouts, and every
block's edges to theirs; each level gets one more row than its bound, a *sink* that no real node occupies.

With a fused last hop (``NeighborSampler(fuse_last_hop=True)``) the input level disappears: only levels ``0..L-1``
are padded, and the first layer reads ``neighbor_mean`` (the outermost hop drawn and averaged, one row per level
``L-1`` node, the padded rows zero) beside those nodes' features: at products scale ~170K rows instead of 1.08M.

Why the bound rather than power-of-two buckets: at products scale ([15, 10, 5], batch 1024) the bound on the input
nodes is 1.08M against ~0.8M sampled (1.35x), one shape and one captured graph; buckets of powers of two pad the same
batch to 1.05M but give a shape (a graph, a memory pool) per combination of buckets over the levels, and up to 2x the
rows at a level that lands just past a power of two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparsetrain.errors import SettingError
from sparsetrain.sampling import Fanouts


@dataclass(frozen=True)
class StepShapes:
    """The padded sizes of a batch: ``nodes[h]`` rows at level ``h`` (0: the seeds, last: the input nodes), sink row
    included, and ``edges[h - 1]`` the edges sampled at hop ``h`` (from level ``h - 1``'s nodes). ``fused``: the
    sampler fuses one more hop, outermost, into the first layer's ``neighbor_mean`` (``nodes[-1]`` rows)."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]
    fused: bool = False

    @classmethod
    def bound(cls, batch_size: int, fanouts: Fanouts | Sequence[int], num_nodes: int,
              max_degree: int | None = None, num_edges: int | None = None, fuse_last_hop: bool = False) -> StepShapes:
        """The bounds of a homogeneous node batch sampled with ``hop_nodes="all"``: hop ``h`` draws at most
        ``fanouts[h]`` edges for every node found so far, and adds at most that many nodes (never more than the
        graph's ``num_nodes``). A fanout of -1 (all neighbours) is bounded by ``max_degree``. ``num_edges``: the
        graph's edge count, for a sampler without replacement (the engine's): a hop's distinct nodes each draw a
        subset of their own in-edges, so no hop draws more edges than the graph has, whatever the fanout.
        ``fuse_last_hop``: the sampler's (``NeighborSampler(fuse_last_hop=True)``): the outermost hop is not padded."""
        counts = Fanouts.of(fanouts).as_list()
        if fuse_last_hop:
            if not counts:
                raise SettingError("fuse_last_hop needs at least one hop in fanouts")
            counts = counts[:-1]  # (its fanout may be -1: its mean has one row per node of the level before)
        if batch_size < 1:
            raise SettingError(f"batch_size={batch_size} must be at least 1")
        if any(f < 0 for f in counts) and max_degree is None:
            raise SettingError(f"fanouts {counts} sample all neighbours (-1): pass max_degree (the graph's largest "
                               "in-degree) to bound them")
        found, nodes, edges = min(batch_size, num_nodes), [], []
        nodes.append(found)
        for f in counts:
            hop_edges = found * (f if f >= 0 else max_degree)
            if num_edges is not None:
                hop_edges = min(hop_edges, num_edges)
            found = min(num_nodes, found + hop_edges)
            edges.append(hop_edges)
            nodes.append(found)
        return cls(tuple(n + 1 for n in nodes), tuple(edges), fuse_last_hop)

    @property
    def num_hops(self) -> int:
        """The padded hops (the blocks); a fused hop is not one."""
        return len(self.edges)

    def block(self, i: int) -> tuple[int, int, int]:
        """Block ``i`` of a batch (outermost first) padded: ``(num_src, num_dst, num_edges)``."""
        hop = self.num_hops - i
        return self.nodes[hop], self.nodes[hop - 1], self.edges[hop - 1]


__all__ = ["StepShapes"]
