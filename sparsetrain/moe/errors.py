"""Errors raised by :mod:`sparsetrain.moe`."""

from sparsetrain.errors import SparsetrainError


class MoEConfigError(SparsetrainError, ValueError):
    """A :class:`~sparsetrain.moe.MoE` or sharding was built with inconsistent arguments
    (``top_k`` > ``num_experts``, unknown router or activation, world size that the placement
    does not fit). Raised at construction, before any step runs."""


class MoEConfigTypeError(MoEConfigError, TypeError):
    """A :class:`~sparsetrain.moe.MoE` argument of the wrong type (``top_k=2.0``, ``renormalize='no'``,
    ``z_loss_weight='0.5'``): a ``TypeError`` and a :class:`MoEConfigError`."""


class MoEInputError(SparsetrainError, ValueError):
    """A forward call got an input the layer cannot take (wrong last dimension, wrong dtype)."""


class MoEStateError(SparsetrainError, RuntimeError):
    """A checkpoint or placement does not match the layer it is loaded into."""


class DCPCheckpointError(MoEStateError):
    """A ``torch.distributed.checkpoint`` folder cannot be loaded: no DCP metadata, a ``.metadata`` or value that
    would build objects other than DCP's own (refused before it is built, so no pickled code runs), a damaged
    file, or a failure DCP reported (its ``CheckpointException``, which ``except Exception`` would miss)."""
