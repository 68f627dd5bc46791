"""Graph topology (one CSCGraph, homogeneous or typed), seed batches, fused multi-hop neighbor sampling (one
NeighborSampler for both) and cluster sampling, edge seeds with negatives, sampler input / minibatch output, batch
ordering."""

import warnings

from sparsetrain.sampling.clusters import BatchClusters, ClusteredMiniBatch, ClusterSampler
from sparsetrain.sampling.edge_seeds import LinkMiniBatch, LinkNeighborSampler
from sparsetrain.sampling.errors import SamplingBackendError, SamplingError
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
    "SamplingBackendError",
    "SamplingError",
    "SeedBatches",
    "match_reorder",
    "reuse_stats",
]


def __getattr__(name: str):
    """The typed twins' old names (``HeteroGraph``, ``HeteroNeighborSampler``, ...) resolve for one release, warning."""
    import importlib

    _deprecated = importlib.import_module("sparsetrain.sampling._deprecated")
    if name not in _deprecated.NEW_NAME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} is deprecated: use {__name__}.{_deprecated.NEW_NAME[name]} "
                  "(the old name goes away in the next release)", DeprecationWarning, stacklevel=2)
    return getattr(_deprecated, name)
