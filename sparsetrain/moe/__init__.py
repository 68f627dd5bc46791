"""The drop-in mixture-of-experts layer and its expert placement (FSSDP, expert parallel)."""

from sparsetrain.moe.dispatch import DispatchPlan, capacity, plan_dispatch
from sparsetrain.moe.errors import MoEConfigError, MoEInputError, MoEStateError
from sparsetrain.moe.experts import ExpertShape, expert_ffn
from sparsetrain.moe.grouped import grouped_mm, native_available
from sparsetrain.moe.layer import MoE, update_expert_biases
from sparsetrain.moe.losses import MoEAux, load_balancing_loss, router_z_loss
from sparsetrain.moe.router import Router, Routing

__all__ = [
    "DispatchPlan",
    "ExpertShape",
    "MoE",
    "MoEAux",
    "MoEConfigError",
    "MoEInputError",
    "MoEStateError",
    "Router",
    "Routing",
    "capacity",
    "expert_ffn",
    "grouped_mm",
    "load_balancing_loss",
    "native_available",
    "plan_dispatch",
    "router_z_loss",
    "update_expert_biases",
]
