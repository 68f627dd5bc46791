"""SPMD training over a partitioned graph: `DistNeighborSampler` (no RPC: one all-to-all round per hop) and
`global_rank_batches` (a rank's shares of the one-process epoch's batches, as many on every rank; `rank_batches`:
batches of its own part's seeds), `PartitionedFeatures` (owned rows local, remote rows by
all-to-all behind a static cache of hot halo rows)."""

from sparsetrain.errors import CollectiveError, InputError
from sparsetrain.partitioned.features import PartitionedFeatures, halo_hotness
from sparsetrain.partitioned.sampler import DistNeighborSampler
from sparsetrain.partitioned.seeds import batches_per_epoch, global_rank_batches, global_split, rank_batches

__all__ = ["InputError", "DistNeighborSampler", "PartitionedFeatures", "CollectiveError",
           "batches_per_epoch", "global_rank_batches", "global_split", "halo_hotness", "rank_batches"]
