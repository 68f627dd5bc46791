"""The old ``sparsetrain.pyg.hetero`` names, one release long: typed data now goes through
:class:`sparsetrain.pyg.NeighborSampler`.

Reached only through :mod:`sparsetrain.pyg`'s module ``__getattr__`` (``sparsetrain.pyg.hetero`` is this module),
which warns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from sparsetrain.pyg.graph import graph_of
from sparsetrain.pyg.sampler import NeighborSampler as PyGSampler
from sparsetrain.pyg.sampler import pyg_output
from sparsetrain.sampling.graph import CSCGraph, EdgeType
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.sampler import NeighborSampler


def hetero_graph_from_data(data) -> CSCGraph:
    """The typed :class:`~sparsetrain.sampling.CSCGraph` of a ``HeteroData`` (now ``graph_of(data).graph``)."""
    return graph_of(data).graph


def hetero_sampler_for(data_or_graph, num_neighbors: Sequence[int] | Mapping[EdgeType, Sequence[int]], *,
                       seed: int | None = None, replace: bool = False) -> NeighborSampler:
    """A :class:`~sparsetrain.sampling.NeighborSampler` with PyG's hops over a ``HeteroData`` or a typed graph."""
    graph = data_or_graph if isinstance(data_or_graph, CSCGraph) else hetero_graph_from_data(data_or_graph)
    return NeighborSampler(graph, num_neighbors, replace=replace, hop_nodes="new", seed=seed)


def sample_hetero_from_nodes(sampler, inputs, key: int | None = None):
    """PyG's ``HeteroSamplerOutput`` around ``inputs`` (a ``NodeSamplerInput``): from a
    :class:`sparsetrain.pyg.NeighborSampler` (now its ``sample_from_nodes``) or a typed fused sampler (batch key
    ``key``)."""
    if isinstance(sampler, PyGSampler):
        return sampler.sample_from_nodes(inputs)
    mb = sampler.sample(SamplerInput(inputs.node.to("cpu", torch.int64), key=key, node_type=inputs.input_type))
    return pyg_output(mb, (inputs.input_id, inputs.time), hetero=True,
                      pyg_type={et: et for et in sampler.graph.edge_types})


NEW_NAME = {"hetero": "sparsetrain.pyg.NeighborSampler (it samples HeteroData itself)",
            "hetero_graph_from_data": "sparsetrain.pyg.graph.graph_of(data).graph",
            "hetero_sampler_for": "sparsetrain.sampling.NeighborSampler(graph, num_neighbors, hop_nodes='new')",
            "sample_hetero_from_nodes": "sparsetrain.pyg.NeighborSampler(data, num_neighbors)"
                                        ".sample_from_nodes(inputs)"}
