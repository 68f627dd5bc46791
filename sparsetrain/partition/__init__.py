"""Partitioned graphs: `partition_dataset` splits a dataset (one node type or several) into parts in bounded memory (the
CLI verb ``partition``), `load_partition` opens one rank's part with its global <-> local id maps.

Names are imported on first use, so the CLI (which registers this package's verbs) starts without torch or numba.
"""

from __future__ import annotations

import importlib

_HOME = {
    "Partition": "sparsetrain.partition.load",
    "DatasetError": "sparsetrain.errors",
    "PartitionOptions": "sparsetrain.partition.partitioner",
    "load_partition": "sparsetrain.partition.load",
    "partition_dataset": "sparsetrain.partition.partitioner",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'sparsetrain.partition' has no attribute {name!r}")
