"""SPMD training over a partitioned graph: `DistNeighborSampler` (no RPC: one all-to-all round per hop) and
`rank_batches` (as many keyed batches on every rank), `PartitionedFeatures` (owned rows local, remote rows by
all-to-all behind a static cache of hot halo rows)."""

from sparsetrain.distributed.errors import DistFeatureError, DistSamplingError, PeerLostError
from sparsetrain.distributed.features import PartitionedFeatures, halo_hotness
from sparsetrain.distributed.sampler import DistNeighborSampler
from sparsetrain.distributed.seeds import batches_per_epoch, rank_batches

__all__ = ["DistFeatureError", "DistNeighborSampler", "DistSamplingError", "PartitionedFeatures", "PeerLostError",
           "batches_per_epoch", "halo_hotness", "rank_batches"]
