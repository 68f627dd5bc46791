"""A batch sampled straight into fixed-size buffers, with no host wait (:class:`PaddedOut`).

A training step with static shapes (``sparsetrain.engine.static``) pads every batch to bounds from the batch size
and fanouts. Sampled into buffers of those bounds, a batch needs nothing back from the device: its sizes stay there
(``PaddedOut.sizes``), its padded edges are spread over the padding rows (:func:`padding_row`), and the checks the
eager driver reads at the end of a batch (seeds outside the graph or repeated, a damaged graph) travel to pinned host
memory with the batch and are raised when they have arrived: at a later call, or at
:meth:`~sparsetrain._late_reads.LateChecks.drain`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sparsetrain.errors import InputError


def padding_row(k, pad_edges: int, first_row, rows: int):
    """The row padded edge ``k`` (of ``pad_edges``, counted from the hop's real edges) runs to, or from, in a level
    whose real rows end at ``first_row`` and which has ``rows`` rows in all (the sink included): ``first_row + k *
    (rows - first_row) // pad_edges``. Ascending in ``k`` (the block stays grouped by destination, so its CSR needs no
    sort), each padding row takes ``pad_edges / (rows - first_row)`` edges, rounded up at most, instead of one sink
    row taking them all; padding rows only ever reach padding rows. Works on ints, NumPy arrays and tensors."""
    return first_row + (k * (rows - first_row)) // pad_edges


@dataclass
class PaddedOut:
    """Where the driver samples a homogeneous batch of fixed shapes.

    ``nodes[h]``: the rows of level ``h`` (0: the seeds; ``h``: the nodes after hop ``h - 1``), sink row included;
    ``edges[h]``: the edges of hop ``h``. ``node_ids`` (``nodes[-1]`` long): the batch's nodes, each level a prefix;
    past the last level's count (the sink included) it holds ids of earlier batches or 0, node ids of the graph
    whatever was sampled, so a gather of the whole buffer stays in bounds. ``edge_index[h]`` (``[2, edges[h]]``): hop
    ``h``'s edges (local ids: sources, then dsts); past the hop's count they run from level ``h + 1``'s padding rows
    to level ``h``'s (:func:`padding_row`), in ascending order of both. ``sizes`` (on the device, ``2 * hops + 1``):
    the real nodes per level, then the real edges per hop.
    ``neighbor_mean`` (a fused sampler's, ``[nodes[-1], F]`` float32): per node of the last level, the mean feature row
    of its in-neighbours drawn by the fused hop; zeros past the level's count.
    """

    nodes: tuple[int, ...]
    edges: tuple[int, ...]
    node_ids: object
    edge_index: list
    sizes: object
    neighbor_mean: object = None

    @classmethod
    def allocate(cls, nodes, edges, zeros: Callable) -> PaddedOut:
        """Buffers of these shapes from ``zeros(shape)`` (int64 zeros on the device, or NumPy's under the
        simulator)."""
        nodes, edges = tuple(int(n) for n in nodes), tuple(int(e) for e in edges)
        if len(nodes) != len(edges) + 1 or min(nodes) < 1:
            raise InputError(f"padded shapes of {len(edges)} hops need {len(edges) + 1} node counts of at least 1 "
                             f"(the sink row), not {list(nodes)}")
        return cls(nodes, edges, zeros((nodes[-1],)), [zeros((2, e)) for e in edges], zeros((2 * len(edges) + 1,)))

    @property
    def num_hops(self) -> int:
        return len(self.edges)

    @property
    def key(self) -> tuple:
        """The shapes and the buffers' addresses: what a batch captured into these buffers bakes in."""
        buffers = [self.node_ids, *self.edge_index, self.sizes]
        if self.neighbor_mean is not None:
            buffers.append(self.neighbor_mean)
        return self.nodes, self.edges, tuple(address(a) for a in buffers)

    def check_fits(self, levels: list[int], hop_edges: list[int]) -> None:
        """Refuse a batch whose bounds (nodes per level, edges per hop) pass the shapes: its arrays would not hold
        it. Raised before anything is queued."""
        if len(hop_edges) != self.num_hops:
            raise InputError(f"the sampler draws {len(hop_edges)} hops but the padded shapes have {self.num_hops}; "
                             "build the shapes from the sampler's fanouts")
        over = [f"level {h}: {n} nodes > {self.nodes[h] - 1}" for h, n in enumerate(levels) if n > self.nodes[h] - 1]
        over += [f"hop {h}: {e} edges > {self.edges[h]}" for h, e in enumerate(hop_edges) if e > self.edges[h]]
        if over:
            raise InputError(f"this batch may pass its padded shapes ({'; '.join(over)}); build the shapes from "
                             "the sampler's batch size, fanouts and graph (StepShapes.bound)")

    def unpadded(self, sizes) -> tuple[list, list]:
        """``(edge_index per hop, node ids per level)`` cut to ``sizes`` (host values of :attr:`sizes`): the batch as
        the eager driver returns it, for checks."""
        hops = self.num_hops
        levels = [self.node_ids[: int(sizes[h])] for h in range(hops + 1)]
        return [self.edge_index[h][:, : int(sizes[hops + 1 + h])] for h in range(hops)], levels


def address(a) -> int:
    """Where an array's data starts (a PyTorch tensor, or a NumPy array under the simulator)."""
    return a.data_ptr() if hasattr(a, "data_ptr") else a.__array_interface__["data"][0]


def sizes_index(at: dict, segments: list[int]) -> np.ndarray:
    """Where :attr:`PaddedOut.sizes` comes from in a homogeneous batch's record (``at``: each entry's offset;
    ``segments``: how many each hop samples, 0 or 1): the seeds' count, the count after each hop (a hop that samples
    nothing leaves it where it was), then each hop's edge count (the last of its ``seg_edges``, or a zero)."""
    levels = [at["counts", 0]]
    for hop, n in enumerate(segments):
        levels.append(at["counts", hop + 1] if n else levels[-1])
    edges = [at["seg_edges", hop] + n if n else at["zeros"] for hop, n in enumerate(segments)]
    return np.array(levels + edges, np.int64)
