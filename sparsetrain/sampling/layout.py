"""The sampler's view of a graph's types and of the fanouts, shared by the CPU and the CUDA kernels."""

from __future__ import annotations

import numpy as np
import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.graph import DAMAGED, EDGE_TYPE, CSCGraph, type_named
from sparsetrain.sampling.rng import hop_key

MAX_EDGE_TYPES = 1 << 20  # typed hop keys pack (hop, edge type) into one counter: hop * MAX_EDGE_TYPES + edge type


def key_stride(edge_types) -> int:
    """The hop key counter's stride: hop ``h`` of edge type ``k`` draws from counter ``h * stride + k``. A homogeneous
    graph (its one edge type ``("_N", "_E", "_N")``, index 0) has stride 1 (counter ``h``); a typed graph
    :data:`MAX_EDGE_TYPES`."""
    return 1 if [tuple(et) for et in edge_types] == [EDGE_TYPE] else MAX_EDGE_TYPES


class KernelLayout:
    """What the kernels (CPU and CUDA) need to know of the graph's types, as small arrays indexed by node type and by
    edge type (one of each on a homogeneous graph), and the fanouts as an int64 [hops, edge types] array."""

    def __init__(self, graph: CSCGraph, fanouts: Fanouts) -> None:
        types = graph.type_layout
        self.node_types = list(types.num_nodes)
        self.edge_types = list(types.edge_types)
        self.key_stride = key_stride(self.edge_types)
        self.type_index = {t: i for i, t in enumerate(self.node_types)}
        self.type_size = np.array([types.num_nodes[t] for t in self.node_types], np.int64)
        self.type_offset = np.concatenate([[0], np.cumsum(self.type_size)]).astype(np.int64)
        self.et_src = np.array([self.type_index[et[0]] for et in self.edge_types], np.int64)
        self.et_dst = np.array([self.type_index[et[2]] for et in self.edge_types], np.int64)
        self.col_offset = np.array(types.col_offset[:-1], np.int64)
        # an edge's id without edge_perm is its CSC position counted from its edge type's first edge
        first_cols = torch.tensor(types.col_offset[:-1], dtype=torch.int64, device=graph.device)
        self.edge_offset = graph.indptr[first_cols].cpu().numpy().astype(np.int64)
        self.fanouts = fanouts.kernel_array(graph)  # [hops, edge types]

    def segments(self, hop: int, counts: np.ndarray, first: np.ndarray) -> tuple[list[int], list[int], list[int]]:
        """Hop ``hop``'s work items as segments, one per edge type it samples: ``(seg_et, seg_start, seg_dst)``.

        Edge type ``seg_et[s]`` samples for its dst type's nodes ``[first, counts)`` (local ids from ``seg_dst[s]``);
        they are work items ``[seg_start[s], seg_start[s + 1])``. Edge types of fanout 0 or with no such nodes are left
        out.
        """
        seg_et, seg_start, seg_dst = [], [0], []
        for k, fanout in enumerate(self.fanouts[hop]):
            d = self.et_dst[k]
            if fanout != 0 and counts[d] > first[d]:
                seg_et.append(k)
                seg_start.append(seg_start[-1] + int(counts[d] - first[d]))
                seg_dst.append(int(first[d]))
        return seg_et, seg_start, seg_dst

    def columns(self, nodes: list, segments: tuple[list[int], list[int], list[int]], concat, empty):
        """The graph columns of the segments' work items, from the nodes per type (NumPy arrays or tensors alike)."""
        seg_et, seg_start, seg_dst = segments
        parts = []
        for s, k in enumerate(seg_et):
            cols = nodes[self.et_dst[k]][seg_dst[s] : seg_dst[s] + seg_start[s + 1] - seg_start[s]]
            parts.append(cols + int(self.col_offset[k]) if self.col_offset[k] else cols)
        return parts[0] if len(parts) == 1 else (concat(parts) if parts else empty)

    def seeds_outside(self, t: int) -> InputError:
        """The error for seeds of node type ``t`` that are not its node ids (on either target)."""
        return InputError(f"{type_named(self.node_types[t])}seeds has ids outside [0, {int(self.type_size[t])}); "
                          "seeds must be node ids of this graph")

    def bad_range(self, source: str, indptr, graph_edges: int, column: int) -> InputError:
        """The error for graph column ``column`` whose ``indptr`` range lies outside the edges (``source``: where
        ``indptr`` comes from); it names the column's edge type and dst node."""
        k = int(np.searchsorted(self.col_offset, column, side="right")) - 1
        node = column - int(self.col_offset[k])
        return InputError(f"{source}: {type_named(self.edge_types[k])}node {node}'s in-edges are entries "
                          f"{int(indptr[column])} to {int(indptr[column + 1])} of indices, which has {graph_edges}; "
                          f"{DAMAGED}")

    def bad_entry(self, source: str, indices, position: int) -> InputError:
        """The error for ``indices[position]``, which is not a node id of its edge type's source type (``source``: where
        ``indices`` comes from); the entry is counted from its edge type's first edge."""
        k = int(np.searchsorted(self.edge_offset, position, side="right")) - 1
        entry = position - int(self.edge_offset[k])
        return InputError(f"{source}: {type_named(self.edge_types[k])}entry {entry} is {int(indices[position])}, "
                          f"which must be in [0, {int(self.type_size[self.et_src[k]])}); {DAMAGED}")

    @staticmethod
    def seed_repeated(seed: int) -> InputError:
        return InputError(f"seed {seed} appears more than once in seeds; pass unique seeds (e.g. "
                          "torch.unique(seeds))")

    def hop_keys(self, seed: int, key: int, hop: int) -> np.ndarray:
        """Per edge type, the key of hop ``hop`` of batch ``key``: counter ``hop * key_stride + edge type`` (``hop``
        on a homogeneous graph)."""
        return np.array([hop_key(seed, key, hop * self.key_stride + k) for k in range(len(self.edge_types))],
                        np.uint64)
