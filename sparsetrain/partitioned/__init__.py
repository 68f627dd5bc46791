"""SPMD training over a partitioned graph: `DistNeighborSampler` (no RPC: one all-to-all round per hop) and
`rank_batches` (as many keyed batches on every rank), `PartitionedFeatures` (owned rows local, remote rows by
all-to-all behind a static cache of hot halo rows)."""

from sparsetrain.errors import CollectiveError, InputError
from sparsetrain.partitioned.features import PartitionedFeatures, halo_hotness
from sparsetrain.partitioned.sampler import DistNeighborSampler
from sparsetrain.partitioned.seeds import batches_per_epoch, rank_batches

__all__ = ["InputError", "DistNeighborSampler", "PartitionedFeatures", "CollectiveError",
           "batches_per_epoch", "halo_hotness", "rank_batches"]
