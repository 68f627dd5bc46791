"""`HeteroGraph`: the old name of a typed :class:`~sparsetrain.sampling.CSCGraph` (one graph class for both kinds)."""

from __future__ import annotations

import dataclasses

import torch

from sparsetrain.sampling.graph import CSCGraph, EdgeType


class _TypedGraphCheck(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, CSCGraph) and obj.is_typed


class HeteroGraph(metaclass=_TypedGraphCheck):
    """``HeteroGraph(num_nodes, edges, edge_ids)`` builds the typed :class:`CSCGraph` (``CSCGraph.from_relations``):
    ``edges[et]`` one CSC per edge type, ``edge_ids[et]`` (optional) its edges' ids, which become ``edge_perm``."""

    def __new__(cls, num_nodes: dict[str, int], edges: dict[EdgeType, CSCGraph],
                edge_ids: dict[EdgeType, torch.Tensor] | None = None) -> CSCGraph:
        edge_ids = edge_ids or {}
        relations = {et: dataclasses.replace(csc, edge_perm=edge_ids.get(et, csc.edge_perm)) for et, csc in edges.items()}
        return CSCGraph.from_relations(num_nodes, relations)

    from_edge_index_dict = staticmethod(CSCGraph.from_edge_index_dict)
