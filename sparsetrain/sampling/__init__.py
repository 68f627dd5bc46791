"""Graph topology (homogeneous and typed), seed batches, fused multi-hop neighbor (also typed) and cluster sampling, edge seeds with negatives, typed sampler input / minibatch output, batch ordering."""

from sparsetrain.sampling.clusters import BatchClusters, ClusteredMiniBatch, ClusterSampler
from sparsetrain.sampling.edge_seeds import LinkMiniBatch, LinkNeighborSampler
from sparsetrain.sampling.errors import SamplingBackendError, SamplingError
from sparsetrain.sampling.graph import CSCGraph, EdgeType
from sparsetrain.sampling.hetero import HeteroNeighborSampler
from sparsetrain.sampling.hetero_graph import HeteroGraph
from sparsetrain.sampling.hetero_minibatch import HeteroBlock, HeteroMiniBatch
from sparsetrain.sampling.input import EdgeSamplerInput, EdgeSeeds, SamplerInput
from sparsetrain.sampling.minibatch import Block, MiniBatch
from sparsetrain.sampling.negatives import NegativeSampler
from sparsetrain.sampling.ordering import MatchReorder, ReuseStats, match_reorder, reuse_stats
from sparsetrain.sampling.sampler import NeighborSampler
from sparsetrain.sampling.seeds import SeedBatches

__all__ = [
    "BatchClusters",
    "Block",
    "CSCGraph",
    "EdgeType",
    "HeteroBlock",
    "HeteroGraph",
    "HeteroMiniBatch",
    "HeteroNeighborSampler",
    "ClusterSampler",
    "ClusteredMiniBatch",
    "EdgeSamplerInput",
    "EdgeSeeds",
    "LinkMiniBatch",
    "LinkNeighborSampler",
    "MatchReorder",
    "MiniBatch",
    "NegativeSampler",
    "NeighborSampler",
    "ReuseStats",
    "SamplerInput",
    "SamplingBackendError",
    "SamplingError",
    "SeedBatches",
    "match_reorder",
    "reuse_stats",
]
