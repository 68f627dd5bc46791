"""The typed twins' old names, for one release: each builds (and ``isinstance`` recognises) the class that replaced it.

Reached only through :mod:`sparsetrain.sampling`'s module ``__getattr__``, which warns.
"""

from __future__ import annotations

import dataclasses

import torch

from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.graph import CSCGraph, EdgeType
from sparsetrain.sampling.minibatch import Block, MiniBatch
from sparsetrain.sampling.sampler import NeighborSampler

HOPS = {"dgl": "all", "pyg": "new"}


class _TypedCheck(type):
    """``isinstance(x, OldName)``: ``x`` is an instance of the new class and typed."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._new) and bool(getattr(getattr(obj, "graph", obj), "is_typed"))


class HeteroGraph(metaclass=_TypedCheck):
    """``HeteroGraph(num_nodes, edges, edge_ids)``: the typed :class:`CSCGraph` of one CSC per edge type
    (``CSCGraph.from_relations``); ``edge_ids[et]`` (optional) become that edge type's ``edge_perm``."""

    _new = CSCGraph

    def __new__(cls, num_nodes: dict[str, int], edges: dict[EdgeType, CSCGraph],
                edge_ids: dict[EdgeType, torch.Tensor] | None = None) -> CSCGraph:
        edge_ids = edge_ids or {}
        relations = {et: dataclasses.replace(csc, edge_perm=edge_ids.get(et, csc.edge_perm))
                     for et, csc in edges.items()}
        return CSCGraph.from_relations(num_nodes, relations)

    from_edge_index_dict = staticmethod(CSCGraph.from_edge_index_dict)


class HeteroNeighborSampler(metaclass=_TypedCheck):
    """``HeteroNeighborSampler(graph, fanouts, seed_type=, hops=, seed=)``: a :class:`NeighborSampler` over the typed
    graph, ``hops="dgl"`` / ``"pyg"`` being ``hop_nodes="all"`` / ``"new"``."""

    _new = NeighborSampler

    def __new__(cls, graph: CSCGraph, fanouts, *, seed_type: str | None = None, hops: str = "dgl",
                seed: int | None = None) -> NeighborSampler:
        if hops not in HOPS:
            raise SamplingError(f"hops={hops!r}; choose 'dgl' (every hop samples all nodes found so far) or 'pyg' "
                                "(only nodes new at the previous hop)")
        if not isinstance(graph, CSCGraph) or not graph.is_typed:
            raise SamplingError(f"graph is a {type(graph).__name__}; pass a typed sparsetrain.sampling.CSCGraph")
        return NeighborSampler(graph, fanouts, seed_type=seed_type, hop_nodes=HOPS[hops], seed=seed)


class HeteroMiniBatch(metaclass=_TypedCheck):
    """A typed :class:`MiniBatch` (its fields are dicts by type)."""

    _new = MiniBatch

    def __new__(cls, *args, **kwargs) -> MiniBatch:
        return MiniBatch(*args, **kwargs)


class HeteroBlock(metaclass=_TypedCheck):
    """A typed :class:`Block` (its fields are dicts by type)."""

    _new = Block

    def __new__(cls, edge_index, edge_ids, num_src, num_dst) -> Block:
        return Block(edge_index, num_src, num_dst, edge_ids)


NEW_NAME = {"HeteroGraph": "CSCGraph (CSCGraph.from_relations / from_edge_index_dict build typed ones)",
            "HeteroNeighborSampler": "NeighborSampler (it samples typed graphs too; hops='dgl'/'pyg' is "
                                     "hop_nodes='all'/'new')",
            "HeteroMiniBatch": "MiniBatch (typed batches are MiniBatch with mb.is_typed)",
            "HeteroBlock": "Block (typed blocks hold dicts by type)"}
