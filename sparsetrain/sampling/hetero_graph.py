"""`HeteroGraph`: typed topology, one CSC per edge type ``(src_type, relation, dst_type)`` over its dst type."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.graph import CSCGraph

EdgeType = tuple[str, str, str]
"""``(src_type, relation, dst_type)``, PyG's and DGL's canonical edge type."""


@dataclass
class HeteroGraph:
    """Node counts per node type and, per edge type, a :class:`CSCGraph` whose columns are dst-type nodes and whose
    ``indices`` are src-type ids. ``edge_ids[et][p]`` (optional) is the id the edge at CSC position ``p`` had in the
    imported edge list (PyG's ``e_id``); without it, a CSC position is the edge id."""

    num_nodes: dict[str, int]
    edges: dict[EdgeType, CSCGraph]
    edge_ids: dict[EdgeType, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for et, csc in self.edges.items():
            if not (isinstance(et, tuple) and len(et) == 3 and all(isinstance(p, str) for p in et)):
                raise SamplingError(f"edge type {et!r} is not a (src_type, relation, dst_type) tuple of strings")
            for end in (et[0], et[2]):
                if end not in self.num_nodes:
                    raise SamplingError(f"edge type {et} names node type {end!r}, which num_nodes does not list; give its node count")
            if csc.num_nodes != self.num_nodes[et[2]]:
                raise SamplingError(f"edge type {et}: its CSC has {csc.num_nodes} columns but node type {et[2]!r} has {self.num_nodes[et[2]]} nodes")

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return list(self.edges)

    @property
    def num_edges(self) -> int:
        return sum(csc.num_edges for csc in self.edges.values())

    @classmethod
    def from_edge_index_dict(cls, edge_index_dict: dict[EdgeType, torch.Tensor], num_nodes: dict[str, int]) -> HeteroGraph:
        """Build from PyG-style ``{edge_type: edge_index [2, E]}`` (row 0 src-type ids, row 1 dst-type ids); ``edge_ids``
        maps each CSC position back to the edge's column in ``edge_index``."""
        edges, edge_ids = {}, {}
        for et, edge_index in edge_index_dict.items():
            if edge_index.dim() != 2 or edge_index.shape[0] != 2:
                raise SamplingError(f"edge type {et}: edge_index has shape {list(edge_index.shape)}; expected [2, num_edges]")
            src, dst = edge_index.detach().to("cpu", torch.int64)
            n_src, n_dst = num_nodes[et[0]], num_nodes[et[2]]
            for ids, n, end in ((src, n_src, et[0]), (dst, n_dst, et[2])):
                if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
                    raise SamplingError(f"edge type {et}: edge_index has {end!r} ids outside [0, {n}); fix the ids or the node count")
            order = torch.argsort(dst * max(n_src, 1) + src, stable=True)
            indptr = torch.zeros(n_dst + 1, dtype=torch.int64)
            torch.cumsum(torch.bincount(dst, minlength=n_dst), 0, out=indptr[1:])
            edges[et] = CSCGraph(indptr, src[order].to(torch.int32 if n_src < 2**31 else torch.int64).contiguous())
            edge_ids[et] = order
        return cls(dict(num_nodes), edges, edge_ids)

    def check_files(self) -> None:
        for csc in self.edges.values():
            csc.check_files()

    def __repr__(self) -> str:
        return f"HeteroGraph(num_nodes={self.num_nodes}, edge_types={len(self.edges)}, num_edges={self.num_edges})"
