"""The one distributed layer: sparse collectives that fetch or reduce exactly the rows a rank needs,
the differentiable all-to-all, rank/group helpers whose groups time out, and the sharded feature table.

``ShardedFeatures`` (a ``sparsetrain.storage`` feature store) is imported on first use so that
``import sparsetrain.collective`` stays light for the MoE layer.
"""

from sparsetrain.collective.all_to_all import all_to_all
from sparsetrain.collective.dense import all_gather_rows, all_reduce_sum
from sparsetrain.collective.groups import (
    GroupInfo,
    comm_device,
    default_timeout,
    group_info,
    init_process_group,
    new_group,
)
from sparsetrain.collective.placement import RowPlacement
from sparsetrain.collective.sparse_ops import sparse_all_gather, sparse_reduce_scatter, sync_replicas
from sparsetrain.collective.stats import CallRecord, CollectiveStats, collective_stats
from sparsetrain.errors import CollectiveError, InputError, SettingError

__all__ = [
    "CallRecord",
    "CollectiveError",
    "InputError",
    "CollectiveStats",
    "GroupInfo",
    "SettingError",
    "RowPlacement",
    "ShardedFeatures",
    "all_gather_rows",
    "all_reduce_sum",
    "all_to_all",
    "collective_stats",
    "comm_device",
    "default_timeout",
    "group_info",
    "init_process_group",
    "new_group",
    "sparse_all_gather",
    "sparse_reduce_scatter",
    "sync_replicas",
]

_LAZY = {"ShardedFeatures"}


def __getattr__(name: str):
    if name in _LAZY:
        from sparsetrain.collective import sharded_features

        return getattr(sharded_features, name)
    raise AttributeError(f"module 'sparsetrain.collective' has no attribute {name!r}")
