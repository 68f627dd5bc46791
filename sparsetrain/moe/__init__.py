"""The drop-in mixture-of-experts layer and its expert placement (FSSDP, expert parallel)."""

from sparsetrain.moe.checkpoint import load_optimizer_state_dict, optimizer_state_dict
from sparsetrain.moe.dispatch import DispatchPlan, capacity, plan_dispatch
from sparsetrain.moe.errors import MoEConfigError, MoEInputError, MoEStateError
from sparsetrain.moe.expert_parallel import ExpertParallel, ExpertParallelExperts
from sparsetrain.moe.experts import ExpertShape, LocalExperts, expert_ffn
from sparsetrain.moe.fssdp import FSSDP, FSSDPExperts
from sparsetrain.moe.grouped import grouped_mm, native_available
from sparsetrain.moe.layer import MoE, finish_step, update_expert_biases
from sparsetrain.moe.losses import MoEAux, load_balancing_loss, router_z_loss
from sparsetrain.moe.placement import LoadWindow, balanced_owners, hot_replicas, plan_placement
from sparsetrain.moe.router import Router, Routing
from sparsetrain.moe.sharded import ShardedExperts, sharded_parameter_names, sync_dense_grads

__all__ = [
    "DispatchPlan",
    "ExpertParallel",
    "ExpertParallelExperts",
    "ExpertShape",
    "FSSDP",
    "FSSDPExperts",
    "LoadWindow",
    "LocalExperts",
    "MoE",
    "MoEAux",
    "MoEConfigError",
    "MoEInputError",
    "MoEStateError",
    "Router",
    "Routing",
    "ShardedExperts",
    "balanced_owners",
    "capacity",
    "expert_ffn",
    "finish_step",
    "grouped_mm",
    "hot_replicas",
    "load_balancing_loss",
    "load_optimizer_state_dict",
    "native_available",
    "optimizer_state_dict",
    "plan_dispatch",
    "plan_placement",
    "router_z_loss",
    "sharded_parameter_names",
    "sync_dense_grads",
    "update_expert_biases",
]
