"""Errors of distributed sampling: one line naming the problem and the fix."""

from __future__ import annotations

from sparsetrain.collective.errors import CollectiveError
from sparsetrain.errors import SparsetrainError


class DistSamplingError(SparsetrainError, ValueError):
    """Bad input to the distributed sampler (seeds not owned by the rank, a missing key, a typed part)."""


class PartDamagedError(SparsetrainError, RuntimeError):
    """A part's topology points outside its own arrays."""


class PeerLostError(CollectiveError):
    """An exchange of distributed sampling failed: a peer rank died, stopped or never reached the batch (a
    :class:`~sparsetrain.collective.errors.CollectiveError`, the class every dead peer raises)."""


class DistFeatureError(SparsetrainError, ValueError):
    """Bad input to the partitioned feature store (ids, owners, a part without features), or ranks that disagree."""
