"""Graph topology (one CSCGraph, homogeneous or typed), seed batches, fused multi-hop neighbor sampling (one
NeighborSampler for both) and cluster sampling, edge seeds with negatives, sampler input / minibatch output, batch
ordering."""

from sparsetrain.errors import BackendError, InputError
from sparsetrain.sampling.clusters import BatchClusters, ClusteredMiniBatch, ClusterSampler
from sparsetrain.sampling.edge_seeds import LinkMiniBatch, LinkNeighborSampler
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.graph import CSCGraph, EdgeType
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
    "ClusterSampler",
    "ClusteredMiniBatch",
    "EdgeSamplerInput",
    "EdgeSeeds",
    "Fanouts",
    "LinkMiniBatch",
    "LinkNeighborSampler",
    "MatchReorder",
    "MiniBatch",
    "NegativeSampler",
    "NeighborSampler",
    "ReuseStats",
    "SamplerInput",
    "BackendError",
    "InputError",
    "SeedBatches",
    "match_reorder",
    "reuse_stats",
]

