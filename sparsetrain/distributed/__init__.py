"""SPMD training over a partitioned graph: `DistNeighborSampler` (no RPC: one all-to-all round per hop) and
`rank_batches` (as many keyed batches on every rank)."""

from sparsetrain.distributed.errors import DistSamplingError, PeerLostError
from sparsetrain.distributed.sampler import DistNeighborSampler
from sparsetrain.distributed.seeds import batches_per_epoch, rank_batches

__all__ = ["DistNeighborSampler", "DistSamplingError", "PeerLostError", "batches_per_epoch", "rank_batches"]
