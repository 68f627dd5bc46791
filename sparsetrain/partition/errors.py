"""Errors of the partitioner and of partitioned folders: one line naming the path, the problem and the fix."""

from __future__ import annotations

from sparsetrain.errors import DatasetError


class PartitionError(DatasetError):
    """A partitioned folder that cannot be used as it is (missing, extra, edited or foreign parts), or a dataset
    this partitioner does not handle."""
