"""Graph topology, fused multi-hop neighbor sampling, cluster sampling, minibatch types and batch ordering."""

from sparsetrain.sampling.clusters import BatchClusters, ClusteredMiniBatch, ClusterSampler
from sparsetrain.sampling.errors import SamplingBackendError, SamplingError
from sparsetrain.sampling.graph import CSCGraph
from sparsetrain.sampling.minibatch import Block, MiniBatch
from sparsetrain.sampling.ordering import MatchReorder, ReuseStats, SeedBatches, match_reorder, reuse_stats
from sparsetrain.sampling.sampler import NeighborSampler

__all__ = [
    "BatchClusters",
    "Block",
    "CSCGraph",
    "ClusterSampler",
    "ClusteredMiniBatch",
    "MatchReorder",
    "MiniBatch",
    "NeighborSampler",
    "ReuseStats",
    "SamplingBackendError",
    "SamplingError",
    "SeedBatches",
    "match_reorder",
    "reuse_stats",
]
