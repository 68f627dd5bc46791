"""How cluster ids reach a sampled batch for the graph transformer's dense cluster attention.

A minibatch holds the sampled computation graphs of many seeds. Nodes connected by
sampled edges (through any block) form one *subgraph* (a connected component of the
batch); different subgraphs are independent, and attention never crosses between them
unless ``cross_subgraph=True``. Within a subgraph, nodes attend densely to the nodes of
the same *cluster*: the dataset's cluster (``clusters.npy``, written by
``reorder="cluster"``) looked up through the input node ids, or, when the dataset has
no clusters, the subgraph itself. Any group larger than ``max_cluster_size`` is cut into
consecutive pieces (by local id: seeds first, then hop by hop), so dense attention
stays bounded.

``ClusterSampler`` is a sampler stage around an inner sampler that attaches both ids
(computed on the CPU while the loader prefetches); ``ClusteredMiniBatch.to_pyg()`` hands them to the model as a
trailing :class:`BatchClusters` after the usual per-hop ``(edge_index, size)`` pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from sparsetrain.errors import DatasetError, InputError, SettingError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.minibatch import MiniBatch

DEFAULT_MAX_CLUSTER_SIZE = 256


@dataclass
class BatchClusters:
    """Per input node of a batch: ``clusters`` (dense-attention group) and ``subgraphs`` (independent component),
    both int64 [num_input_nodes]; any prefix (a block's destinations) keeps its meaning."""

    clusters: torch.Tensor
    subgraphs: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> BatchClusters:
        return BatchClusters(self.clusters.to(device, non_blocking=non_blocking),
                             self.subgraphs.to(device, non_blocking=non_blocking))


def _compact(keys: np.ndarray) -> np.ndarray:
    return np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _split_large(groups: np.ndarray, max_size: int) -> np.ndarray:
    """Cut every group of more than ``max_size`` nodes into consecutive pieces (in node order)."""
    counts = np.bincount(groups)
    if counts.max(initial=0) <= max_size:
        return groups
    order = np.argsort(groups, kind="stable")
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(groups), dtype=np.int64)
    rank[order] = np.arange(len(groups)) - first[groups[order]]
    return _compact(groups * (int(rank.max()) // max_size + 1) + rank // max_size)


def batch_groups(blocks: Sequence, num_nodes: int, node_clusters: torch.Tensor | None = None, *,
                 max_cluster_size: int = DEFAULT_MAX_CLUSTER_SIZE, cross_subgraph: bool = False) -> BatchClusters:
    """Cluster and subgraph ids of a batch's ``num_nodes`` input nodes from its blocks' edges (local ids).

    ``blocks``: ``Block`` objects or ``(edge_index, size)`` pairs; ``node_clusters``: the dataset
    cluster of every input node (None: each subgraph is one cluster).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if max_cluster_size < 1:
        raise SettingError(f"max_cluster_size={max_cluster_size} must be at least 1")
    if cross_subgraph:
        subgraphs = np.zeros(num_nodes, dtype=np.int64)
    else:
        edges = [np.asarray((b.edge_index if hasattr(b, "edge_index") else b[0]).cpu()) for b in blocks]
        ei = np.concatenate(edges, axis=1) if edges else np.zeros((2, 0), dtype=np.int64)
        adj = coo_matrix((np.ones(ei.shape[1], dtype=np.int8), (ei[0], ei[1])), shape=(num_nodes, num_nodes))
        subgraphs = connected_components(adj, directed=True, connection="weak")[1].astype(np.int64)
    if node_clusters is None:
        groups = subgraphs
    else:
        cl = np.asarray(node_clusters.cpu(), dtype=np.int64)
        if len(cl) != num_nodes:
            raise InputError(f"node_clusters has {len(cl)} entries for {num_nodes} input nodes; give one cluster id "
                             "per input node")
        groups = _compact(subgraphs * (int(cl.max(initial=0)) + 1) + cl)
    groups = _split_large(groups, max_cluster_size)
    return BatchClusters(torch.from_numpy(groups), torch.from_numpy(subgraphs))


@dataclass(repr=False)
class ClusteredMiniBatch(MiniBatch):
    """A :class:`MiniBatch` that also carries :class:`BatchClusters` for its input nodes."""

    groups: BatchClusters | None = None

    def to_pyg(self) -> list:
        """Per hop ``(edge_index, (num_src, num_dst))``, outermost first, then the batch's :class:`BatchClusters`."""
        return [*super().to_pyg(), self.groups]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ClusteredMiniBatch:
        moved = super().to(device, non_blocking)
        return replace(moved, groups=None if self.groups is None else self.groups.to(device, non_blocking))


class ClusterSampler:
    """A sampler stage: sample with ``sampler``, then attach the batch's cluster and subgraph ids (see the module
    docstring).

    ``sampler``: the inner sampler (``sample(SamplerInput) -> MiniBatch``, with a ``graph``);
    ``clusters``: cluster id per graph node (e.g. :func:`sparsetrain.datasets.load_clusters`), or None.
    """

    def __init__(self, sampler, clusters: torch.Tensor | None = None, *,
                 max_cluster_size: int = DEFAULT_MAX_CLUSTER_SIZE, cross_subgraph: bool = False):
        if clusters is not None and len(clusters) != sampler.graph.num_nodes:
            raise DatasetError(f"clusters has {len(clusters)} entries but the graph has {sampler.graph.num_nodes} "
                               "nodes; use the clusters.npy of the same dataset")
        self.sampler = sampler
        self.clusters = clusters
        self.max_cluster_size = max_cluster_size
        self.cross_subgraph = cross_subgraph

    @property
    def graph(self):
        """The inner sampler's graph (batch ordering reads its size)."""
        return self.sampler.graph

    @property
    def fanouts(self) -> Fanouts:
        """The inner sampler's fanouts."""
        return self.sampler.fanouts

    def sample(self, inp: SamplerInput) -> ClusteredMiniBatch:
        """Sample ``inp`` with the inner sampler and attach the batch's :class:`BatchClusters`."""
        mb = self.sampler.sample(inp)
        node_clusters = None if self.clusters is None else self.clusters[mb.input_nodes.cpu()]
        groups = batch_groups(mb.blocks, len(mb.input_nodes), node_clusters, max_cluster_size=self.max_cluster_size,
                              cross_subgraph=self.cross_subgraph)
        return ClusteredMiniBatch(mb.seeds_by_type, mb.input_nodes_by_type, mb.blocks, mb.x_by_type, mb.y,
                                  seed_type=mb.seed_type, nodes_per_hop=mb.nodes_per_hop,
                                  edges_per_hop=mb.edges_per_hop, groups=groups)
