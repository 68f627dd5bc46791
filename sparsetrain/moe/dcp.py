"""Checkpoints through ``torch.distributed.checkpoint`` (DCP) that reshard to any world size.

    state = {"train": DCPState(model, optimizer)}
    dcp.save(state, checkpoint_id=path)           # every rank writes its own experts
    load_dcp(state, checkpoint_id=path)           # at any world size / sharding mode; fills model and optimizer

(:func:`~sparsetrain.moe.load_dcp` is ``dcp.load`` through a reader that runs no pickled code from the folder.)

How FSSDP's shards present themselves to DCP: as DTensors sharded over the expert dimension, under
the same keys a single-process layer has (``…experts.w_in`` ``[E, d_model, in_width]`` and
``…experts.w_out`` ``[E, d_hidden, d_model]``, for the parameters and for every optimizer state
tensor shaped like them). DTensor's ``Shard(0)`` is ``torch.chunk``'s split of the expert ids, while
FSSDP owns whatever rows its load balancer chose (and may hold replicas), so saving moves each
owned row to the rank whose chunk holds it with one sparse gather, and loading moves rows from the
new world's chunks back to the new placement (replicas included): the traffic is at most one
shard per rank, nothing gathers the whole table. DCP reads only the chunks that overlap, so a
checkpoint written at ``W`` ranks loads at any other ``W'``, into FSSDP, expert parallelism, or an
unsharded ``MoE`` (plain tensors are read whole). Dense parameters and their optimizer state go
through ``torch.distributed.checkpoint.state_dict.get_state_dict``/``set_state_dict`` unchanged,
so DDP and FSDP2 (DTensor parameters) compose.

The placement itself (rebalanced owners, replicas) and the load window are not saved: they decide
where rows live, not what the model computes; the resumed run starts from its own placement.

:func:`~sparsetrain.moe.optimizer_state_dict` and ``model.state_dict()`` remain the complement for
single-file checkpoints (``torch.save`` from one rank): they gather full tables onto every rank,
with the same keys, so both kinds of checkpoint hold the same logical content.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.nn.parallel import DistributedDataParallel

from sparsetrain.errors import CheckpointError
from sparsetrain.moe.hf import moe_layout_state_dict
from sparsetrain.moe.sharded import ShardedExperts

_STATE, _PG = "state", "param_groups"


def _unwrap(model: nn.Module) -> nn.Module:
    """DDP's inner module: its names are the checkpoint's keys (DCP's state_dict helpers strip ``module.`` too)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def _tables(model: nn.Module) -> dict[str, ShardedExperts]:
    return {name: m for name, m in model.named_modules() if isinstance(m, ShardedExperts)}


@contextmanager
def _dcp_layout(model: nn.Module, tables: dict[str, ShardedExperts]) -> Iterator[None]:
    """Expert tables as DTensors, swapped HF blocks under their modules' names (torch's helpers check names)."""
    for m in tables.values():
        m.dtensor_state_dict = True
    try:
        with moe_layout_state_dict(model):
            yield
    finally:
        for m in tables.values():
            m.dtensor_state_dict = False


def _names(prefix: str) -> tuple[str, str, str]:
    dot = f"{prefix}." if prefix else ""
    return f"{dot}shard", f"{dot}w_in", f"{dot}w_out"


def _rename_in_groups(groups: list[dict[str, Any]], old: list[str], new: list[str]) -> None:
    for g in groups:
        params = g["params"]
        if old[0] in params:
            i = params.index(old[0])
            g["params"] = [p for p in params[:i] if p not in old] + new + [p for p in params[i:] if p not in old]


def _experts_to_tables(optim_sd: dict[str, Any], tables: dict[str, ShardedExperts]) -> None:
    """Replace each shard's optimizer state (this rank's layout) by ``w_in``/``w_out`` tables."""
    for prefix, m in tables.items():
        shard, w_in, w_out = _names(prefix)
        state = optim_sd[_STATE].pop(shard, None)
        if state is not None:
            ins, outs = {}, {}
            for key in sorted(state, key=str):
                v = state[key]
                if isinstance(v, torch.Tensor) and v.shape == m.shard.shape:
                    ins[key], outs[key] = m.to_dtensors(v)
                else:
                    ins[key] = outs[key] = v
            optim_sd[_STATE][w_in], optim_sd[_STATE][w_out] = ins, outs
        _rename_in_groups(optim_sd[_PG], [shard], [w_in, w_out])


def _tables_to_experts(optim_sd: dict[str, Any], tables: dict[str, ShardedExperts]) -> None:
    """Inverse of :func:`_experts_to_tables` for the layout of this run."""
    for prefix, m in tables.items():
        shard, w_in, w_out = _names(prefix)
        ins, outs = optim_sd[_STATE].pop(w_in, None), optim_sd[_STATE].pop(w_out, None)
        if (ins is None) != (outs is None):
            raise CheckpointError(f"DCPState: the checkpoint has optimizer state for only one of {w_in!r}, {w_out!r}")
        if ins is not None:
            state = {}
            for key in sorted(ins, key=str):
                v = ins[key]
                if isinstance(v, torch.Tensor) and v.dim() == 3:
                    if key not in outs:
                        raise CheckpointError(f"DCPState: optimizer state {key!r} of {w_in!r} has no counterpart for "
                                              f"{w_out!r}")
                    rows = m.from_tables(v, outs[key], f"optimizer state {key!r} of {prefix}")
                    state[key] = rows.to(m.shard.device, m.shard.dtype)
                else:
                    state[key] = v
            optim_sd[_STATE][shard] = state
        _rename_in_groups(optim_sd[_PG], [w_in, w_out], [shard])


def dcp_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """``{"model": ..., "optim": ...}`` for DCP in this run's layout: expert tables as DTensors over the
    expert dimension, dense entries as ``get_state_dict`` gives them. A collective under sharding.

    Used both to save and as the target ``dcp.load`` fills in place before :func:`load_dcp_state_dict`.
    """
    inner = _unwrap(model)
    tables = _tables(inner)
    with _dcp_layout(inner, tables):
        if optimizer is None:
            return {"model": get_model_state_dict(inner)}
        model_sd, optim_sd = get_state_dict(inner, optimizer)
    _experts_to_tables(optim_sd, tables)
    return {"model": model_sd, "optim": optim_sd}


def load_dcp_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer | None, state: dict[str, Any]) -> None:
    """Load what ``dcp.load`` filled into :func:`dcp_state_dict`'s output into ``model`` (and ``optimizer``).

    A collective under sharding. ``state["optim"]`` is rewritten to this run's layout on the way."""
    inner = _unwrap(model)
    tables = _tables(inner)
    if "model" not in state:
        raise CheckpointError("load_dcp_state_dict: the state has no 'model' entry; pass what dcp_state_dict returned")
    if optimizer is None:
        with moe_layout_state_dict(inner):
            set_model_state_dict(inner, state["model"])
        return
    if "optim" not in state:
        raise CheckpointError("load_dcp_state_dict: the state has no 'optim' entry; build it with "
                              "dcp_state_dict(model, optimizer)")
    optim_sd = state["optim"]
    _tables_to_experts(optim_sd, tables)
    with moe_layout_state_dict(inner):
        set_state_dict(inner, optimizer, model_state_dict=state["model"], optim_state_dict=optim_sd)


class DCPState(Stateful):
    """A model (plain, DDP, FSDP2; any sharding of its MoE layers) and its optimizer as one DCP ``Stateful``.

    Put it in the dict passed to ``torch.distributed.checkpoint.save``/``load``; every rank passes its own.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        return dcp_state_dict(self.model, self.optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        load_dcp_state_dict(self.model, self.optimizer, state_dict)
