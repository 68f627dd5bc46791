"""The drop-in mixture-of-experts layer and its expert placement (FSSDP, expert parallel).

Building blocks (router, dispatch, expert kernels, placement planning) stay importable from their
modules: :mod:`sparsetrain.moe.router`, ``.dispatch``, ``.experts``, ``.grouped``, ``.placement``, ``.losses``.
"""

from sparsetrain.errors import CheckpointError, InputError, SettingError
from sparsetrain.moe.checkpoint import load_optimizer_state_dict, optimizer_state_dict
from sparsetrain.moe.dcp import DCPState, dcp_state_dict, load_dcp_state_dict
from sparsetrain.moe.dcp_reader import SafeFileSystemReader, load_dcp
from sparsetrain.moe.expert_parallel import ExpertParallel
from sparsetrain.moe.fssdp import FSSDP
from sparsetrain.moe.layer import MoE, finish_step, shard_experts, update_expert_biases
from sparsetrain.moe.losses import MoEAux
from sparsetrain.moe.sharded import sharded_parameter_names, sync_dense_grads

__all__ = [
    "CheckpointError",
    "DCPState",
    "ExpertParallel",
    "FSSDP",
    "MoE",
    "MoEAux",
    "SettingError",
    "InputError",
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
