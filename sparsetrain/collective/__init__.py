"""Sparse collectives over torch.distributed: fetch or reduce exactly the rows a rank needs.

``ShardedFeatures`` (a ``sparsetrain.storage`` feature store) is imported on first use so that
``import sparsetrain.collective`` stays light for the MoE layer.
"""

from sparsetrain.collective.errors import CollectiveError, CollectiveInputError, PlacementError
from sparsetrain.collective.placement import RowPlacement
from sparsetrain.collective.sparse_ops import sparse_all_gather, sparse_reduce_scatter, sync_replicas
from sparsetrain.collective.stats import CallRecord, CollectiveStats, collective_stats

__all__ = [
    "CallRecord",
    "CollectiveError",
    "CollectiveInputError",
    "CollectiveStats",
    "PlacementError",
    "RowPlacement",
    "ShardedFeatureIdError",
    "ShardedFeatures",
    "collective_stats",
    "sparse_all_gather",
    "sparse_reduce_scatter",
    "sync_replicas",
]

_LAZY = {"ShardedFeatures", "ShardedFeatureIdError"}


def __getattr__(name: str):
    if name in _LAZY:
        from sparsetrain.collective import sharded_features

        return getattr(sharded_features, name)
    raise AttributeError(f"module 'sparsetrain.collective' has no attribute {name!r}")
