"""Layout-independent optimizer state: keyed by parameter name, expert state as full logical tables.

``model.state_dict()`` of a sharded :class:`~sparsetrain.moe.MoE` already holds the full
``experts.w_in`` / ``experts.w_out``. These two functions do the same for the optimizer, so a
training run saved at one world size or sharding mode resumes at another: state tensors shaped
like a parameter are stored under that parameter's name (expert shards gathered to the full
``w_in``/``w_out`` tables), anything else (Adam's ``step``) as is. Hyperparameters (``param_groups``)
are not included: build the optimizer with the same settings.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sparsetrain.collective import sparse_all_gather
from sparsetrain.errors import CheckpointError
from sparsetrain.moe.sharded import ShardedExperts


def _expert_tables(model: nn.Module) -> dict[str, ShardedExperts]:
    return {name: m for name, m in model.named_modules() if isinstance(m, ShardedExperts)}


def optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, dict[str, Any]]:
    """``{parameter name: {state key: value}}`` with expert state as full tables. A collective under sharding."""
    out: dict[str, dict[str, Any]] = {}
    sharded = _expert_tables(model)
    shard_ids = {id(m.shard): name for name, m in sharded.items()}
    for name, p in model.named_parameters():
        state = optimizer.state.get(p, {})
        if id(p) not in shard_ids:
            out[name] = {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
            continue
        m = sharded[shard_ids[id(p)]]
        prefix = shard_ids[id(p)]
        w_in, w_out = {}, {}
        base = m.owner_placement
        for key in sorted(state, key=str):
            v = state[key]
            if isinstance(v, torch.Tensor) and v.shape == p.shape:
                with torch.no_grad():
                    full = sparse_all_gather(v[: base.num_owned(m.rank)].contiguous(), torch.arange(m.num_experts),
                                             placement=base, group=m.group, stats=m.stats)  # fmt: skip
                w_in[key], w_out[key] = (t.contiguous() for t in m.shape.unpack(full))
            else:
                w_in[key] = w_out[key] = v.detach().clone() if isinstance(v, torch.Tensor) else v
        out[f"{prefix}.w_in"], out[f"{prefix}.w_out"] = w_in, w_out
    return out


def load_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer,
                              saved: dict[str, dict[str, Any]]) -> None:
    """Load :func:`optimizer_state_dict` output into ``optimizer`` for ``model`` (any world size or sharding mode)."""
    sharded = _expert_tables(model)
    shard_ids = {id(m.shard): name for name, m in sharded.items()}
    in_optimizer = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        if id(p) not in in_optimizer:
            continue
        if id(p) not in shard_ids:
            if name not in saved:
                raise CheckpointError(f"load_optimizer_state_dict: no state for parameter {name!r} in the checkpoint")
            optimizer.state[p] = {k: _fresh(v, p) for k, v in saved[name].items()}
            continue
        prefix = shard_ids[id(p)]
        m = sharded[prefix]
        w_in, w_out = saved.get(f"{prefix}.w_in"), saved.get(f"{prefix}.w_out")
        if w_in is None or w_out is None:
            raise CheckpointError(f"load_optimizer_state_dict: no state for the experts of {prefix!r} in the "
                                  "checkpoint")
        ids = m.placement.local_ids(m.rank)
        state = {}
        for key, v in w_in.items():
            if isinstance(v, torch.Tensor) and v.dim() == 3:
                rows = m.shape.pack(v, w_out[key])
                state[key] = rows[ids.to(rows.device)].to(p.device, p.dtype).clone()
            else:
                state[key] = _fresh(v, p)
        optimizer.state[p] = state


def _fresh(v: Any, p: torch.Tensor) -> Any:
    """A private copy (optimizers update state in place; Adam's scalar ``step`` stays where it was)."""
    if not isinstance(v, torch.Tensor):
        return v
    return v.clone() if v.dim() == 0 else v.to(p.device).clone()
