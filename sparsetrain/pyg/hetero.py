"""PyG's heterogeneous sampler contract over sparsetrain's fused typed sampler.

:func:`sample_hetero_from_nodes` is what :class:`sparsetrain.pyg.NeighborSampler` calls for ``HeteroData``: it
samples with PyG's hop semantics (a hop samples only the nodes first reached at the previous hop) and returns
PyG's ``HeteroSamplerOutput``: per node type the sampled global ids (seeds first, hop-ordered), per edge type
``row``/``col`` (local src/dst ids of the sampled edges) and ``edge`` (the edges' columns in the ``HeteroData``'s
``edge_index``), the sampled node and edge counts per hop, and ``metadata=(input_id, time)`` as PyG's loaders read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from sparsetrain.pyg.errors import PyGOptionError
from sparsetrain.sampling.graph import CSCGraph, EdgeType
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.sampler import NeighborSampler


def hetero_graph_from_data(data) -> CSCGraph:
    """The typed CSC topology of a PyG ``HeteroData`` (``edge_perm`` maps CSC positions back to ``edge_index`` columns)."""
    return CSCGraph.from_edge_index_dict(
        {et: data[et].edge_index for et in data.edge_types},
        {t: int(data[t].num_nodes) for t in data.node_types},
    )


def hetero_sampler_for(data_or_graph, num_neighbors: Sequence[int] | Mapping[EdgeType, Sequence[int]], *, seed: int | None = None,
                       replace: bool = False) -> NeighborSampler:
    """A :class:`~sparsetrain.sampling.NeighborSampler` with PyG's hop semantics over a ``HeteroData`` (or a typed CSCGraph)."""
    graph = data_or_graph if isinstance(data_or_graph, CSCGraph) else hetero_graph_from_data(data_or_graph)
    return NeighborSampler(graph, num_neighbors, replace=replace, hop_nodes="new", seed=seed)


def _typed(sampler) -> NeighborSampler:
    """The typed sampler behind a :class:`sparsetrain.pyg.NeighborSampler` over a ``HeteroData``, built on first use."""
    typed = getattr(sampler, "_typed_sampler", None)
    if typed is None:
        if sampler.weight_attr is not None:
            raise PyGOptionError("weight_attr is not supported for HeteroData yet; sparsetrain samples typed HeteroData uniformly")
        data = sampler.data
        typed = hetero_sampler_for(data, sampler.num_neighbors.get_values(data.edge_types), seed=sampler.seed, replace=sampler.replace)
        sampler._typed_sampler = typed
    return typed


def sample_hetero_from_nodes(sampler, inputs, key: int | None = None):
    """Sample around ``inputs.node`` (unique ids of ``inputs.input_type``) and return a ``torch_geometric.sampler.HeteroSamplerOutput``.

    ``sampler``: a :class:`sparsetrain.pyg.NeighborSampler` over a ``HeteroData`` (its batch key from ``next_key()``)
    or a typed :class:`~sparsetrain.sampling.NeighborSampler` (``key``, default its own counter).
    ``inputs``: PyG's ``NodeSamplerInput``.
    """
    from torch_geometric.sampler import HeteroSamplerOutput

    if getattr(inputs, "time", None) is not None:
        raise PyGOptionError("the seeds carry times (input_time): temporal sampling is not supported; leave input_time=None")
    if isinstance(sampler, NeighborSampler):
        typed = sampler
    else:
        typed, key = _typed(sampler), sampler.next_key()
    mb = typed.sample(SamplerInput(inputs.node.to("cpu", torch.int64), key=key, node_type=inputs.input_type))
    hops = list(reversed(mb.blocks))  # hop 1 (the seeds' in-edges) first
    row, col, edge = {}, {}, {}
    for et in typed.graph.edge_types:
        parts = [b.edge_index[et] for b in hops if et in b.edge_index]
        ids = [b.edge_ids[et] for b in hops if et in b.edge_ids]
        ei = torch.cat(parts, 1) if parts else torch.zeros(2, 0, dtype=torch.int64)
        row[et], col[et] = ei[0], ei[1]
        edge[et] = torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64)
    return HeteroSamplerOutput(
        node=dict(mb.input_nodes),
        row=row,
        col=col,
        edge=edge,
        num_sampled_nodes={t: list(v) for t, v in mb.nodes_per_hop.items()},
        num_sampled_edges={et: list(v) for et, v in mb.edges_per_hop.items()},
        metadata=(inputs.input_id, getattr(inputs, "time", None)),
    )
