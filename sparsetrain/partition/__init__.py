"""Partitioned graphs: `partition_dataset` splits a homogeneous dataset into parts in bounded memory (the CLI verb
``partition``), `load_partition` opens one rank's part with its global <-> local id maps."""

from sparsetrain.partition.errors import PartitionError
from sparsetrain.partition.load import Partition, load_partition
from sparsetrain.partition.partitioner import PartitionOptions, partition_dataset

__all__ = ["Partition", "PartitionError", "PartitionOptions", "load_partition", "partition_dataset"]
