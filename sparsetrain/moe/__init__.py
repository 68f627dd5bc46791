"""The drop-in mixture-of-experts layer and its expert placement (FSSDP, expert parallel).

Building blocks (router, dispatch, expert kernels, placement planning) stay importable from their
modules: :mod:`sparsetrain.moe.router`, ``.dispatch``, ``.experts``, ``.grouped``, ``.placement``, ``.losses``.
"""

from sparsetrain._deprecation import moved_attribute
from sparsetrain.moe.checkpoint import load_optimizer_state_dict, optimizer_state_dict
from sparsetrain.moe.dcp import DCPState, dcp_state_dict, load_dcp_state_dict
from sparsetrain.moe.dcp_reader import SafeFileSystemReader, load_dcp
from sparsetrain.moe.errors import DCPCheckpointError, MoEConfigError, MoEInputError, MoEStateError
from sparsetrain.moe.expert_parallel import ExpertParallel
from sparsetrain.moe.fssdp import FSSDP
from sparsetrain.moe.layer import MoE, finish_step, shard_experts, update_expert_biases
from sparsetrain.moe.losses import MoEAux
from sparsetrain.moe.sharded import sharded_parameter_names, sync_dense_grads

__all__ = [
    "DCPCheckpointError",
    "DCPState",
    "ExpertParallel",
    "FSSDP",
    "MoE",
    "MoEAux",
    "MoEConfigError",
    "MoEInputError",
    "MoEStateError",
    "SafeFileSystemReader",
    "dcp_state_dict",
    "finish_step",
    "load_dcp",
    "load_dcp_state_dict",
    "load_optimizer_state_dict",
    "optimizer_state_dict",
    "shard_experts",
    "sharded_parameter_names",
    "sync_dense_grads",
    "update_expert_biases",
]

_MOVED = {
    "DispatchPlan": "sparsetrain.moe.dispatch",
    "capacity": "sparsetrain.moe.dispatch",
    "plan_dispatch": "sparsetrain.moe.dispatch",
    "ExpertParallelExperts": "sparsetrain.moe.expert_parallel",
    "ExpertShape": "sparsetrain.moe.experts",
    "LocalExperts": "sparsetrain.moe.experts",
    "expert_ffn": "sparsetrain.moe.experts",
    "FSSDPExperts": "sparsetrain.moe.fssdp",
    "grouped_mm": "sparsetrain.moe.grouped",
    "native_available": "sparsetrain.moe.grouped",
    "load_balancing_loss": "sparsetrain.moe.losses",
    "router_z_loss": "sparsetrain.moe.losses",
    "LoadWindow": "sparsetrain.moe.placement",
    "balanced_owners": "sparsetrain.moe.placement",
    "hot_replicas": "sparsetrain.moe.placement",
    "plan_placement": "sparsetrain.moe.placement",
    "Router": "sparsetrain.moe.router",
    "Routing": "sparsetrain.moe.router",
    "ShardedExperts": "sparsetrain.moe.sharded",
}


def __getattr__(name: str):
    return moved_attribute(__name__, _MOVED, name)
