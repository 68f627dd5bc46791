"""Sparse collectives over torch.distributed: fetch or reduce exactly the rows a rank needs."""

from sparsetrain.collective.errors import CollectiveError, CollectiveInputError, PlacementError
from sparsetrain.collective.placement import RowPlacement
from sparsetrain.collective.sharded_features import ShardedFeatures, ShardedGatherStats
from sparsetrain.collective.sparse_ops import sparse_all_gather, sparse_reduce_scatter, sync_replicas
from sparsetrain.collective.stats import CallRecord, CollectiveStats, collective_stats

__all__ = [
    "CallRecord",
    "CollectiveError",
    "CollectiveInputError",
    "CollectiveStats",
    "PlacementError",
    "RowPlacement",
    "ShardedFeatures",
    "ShardedGatherStats",
    "collective_stats",
    "sparse_all_gather",
    "sparse_reduce_scatter",
    "sync_replicas",
]
