"""Errors raised by the sparse collectives.

Input errors are detected on the rank that has them, then shared with every
rank before any data moves, so all ranks raise the same error instead of some
of them waiting forever for a peer that gave up.
"""

from sparsetrain.errors import SparsetrainError


class PlacementError(SparsetrainError, ValueError):
    """A :class:`RowPlacement` was built from inconsistent arguments (bad owner rank, row id, replica)."""


class CollectiveInputError(SparsetrainError, ValueError):
    """One or more ranks passed bad input to a collective (id out of range, wrong shard size,
    dtype or row shape different from the other ranks). Raised on every rank of the group."""


class CollectiveError(SparsetrainError, RuntimeError):
    """A collective could not complete: a peer rank died, timed out or called a different collective.

    The process group is unusable after this error: end the process (``destroy_process_group``
    itself can block after a timed-out gloo operation on torch 2.2) and restart the job."""
