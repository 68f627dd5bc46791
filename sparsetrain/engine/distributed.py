"""Distributed data parallel set-up from torchrun's environment, with timeouts instead of hangs."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from sparsetrain.collective.groups import Timeout, init_process_group
from sparsetrain.errors import CollectiveError, SettingError


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def choose_device(requested: str, local_rank: int = 0, world_size: int = 1) -> torch.device:
    """The run's one device, from ``--device`` (auto, cpu, cuda, cuda:N): auto is a GPU when one is visible; cuda is
    this rank's GPU (``local_rank`` modulo the GPUs); cuda:N one GPU of a single-process run; a GPU this machine does
    not have is a one-line :class:`SettingError`. Every later choice (feature placement, the graph's copy, the model)
    reads this one."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda") or (device.type == "cpu" and device.index is not None):
        raise SettingError(f"--device {requested}: choose auto, cpu, cuda or cuda:N (N a GPU's index)")
    if device.type == "cpu":
        return device
    if not torch.cuda.is_available():
        raise SettingError(f"--device {requested}: no CUDA device is visible to this process; pass --device cpu or "
                           "auto")
    if device.index is not None and world_size > 1:
        raise SettingError(f"--device {requested} names one GPU, but each of the {world_size} ranks needs its own; "
                           "pass --device cuda (rank r takes GPU r of its node)")
    count = torch.cuda.device_count()
    index = local_rank % count if device.index is None else device.index
    if index >= count:
        raise SettingError(f"--device {requested}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
                           "; pass one of them or --device cuda")
    return torch.device("cuda", index)


def init_from_env(device: str = "auto", timeout: Timeout = None) -> DistContext:
    """Choose the device (:func:`choose_device`) and join the process group torchrun describes (``RANK``,
    ``WORLD_SIZE``, ...); a plain run gets world size 1.

    gloo on CPU, NCCL on CUDA. Every collective times out after ``timeout`` (seconds or a timedelta;
    default :func:`sparsetrain.collective.default_timeout`: 30 s, or ``$SPARSETRAIN_DIST_TIMEOUT``),
    so a dead or stopped rank becomes an error on the others rather than a hang.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    target = choose_device(device, local_rank, world_size)
    if target.type == "cuda":
        torch.cuda.set_device(target)
    ctx = DistContext(rank, world_size, local_rank, target)
    if ctx.enabled and not dist.is_initialized():
        backend = "nccl" if target.type == "cuda" else "gloo"
        try:
            init_process_group(backend, timeout=timeout)
        except (RuntimeError, ValueError) as exc:  # the store or a peer never answered (DistStoreError, a timeout)
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
            raise CollectiveError(f"rank {rank} of {world_size}: could not join the process group at {where} "
                                  f"({text}); start every rank (torchrun --nproc-per-node {world_size} ...) with the "
                                  "same MASTER_ADDR/MASTER_PORT, or check that the address is reachable") from None
    return ctx


def wrap_model(model: torch.nn.Module, ctx: DistContext) -> torch.nn.Module:
    model = model.to(ctx.device)
    if not ctx.enabled:
        return model
    return DistributedDataParallel(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)


# gloo reports a dead or silent peer as a plain RuntimeError raised from its transport (DDP's all-reduce included)
_BACKEND_FAILURE = re.compile(r"gloo|nccl|c10d|ProcessGroup|Connection (?:reset|closed) by peer|Broken "
                              r"pipe", re.IGNORECASE)


def caused_by_another_rank(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective that failed or timed out (a peer died or stopped), not this rank's own error."""
    if isinstance(exc, (CollectiveError, dist.DistError)):
        return True
    return type(exc) is RuntimeError and bool(_BACKEND_FAILURE.search(str(exc)))


def describe_failure(exc: BaseException, ctx: DistContext) -> CollectiveError:
    """One line for a failure :func:`caused_by_another_rank`: this rank lost contact with a peer."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CollectiveError(
        f"rank {ctx.rank} of {ctx.world_size}: lost contact with another rank ({text}); "
        "another process probably died, was killed or stopped responding; check its log, then restart (add --resume to "
        "continue from the last checkpoint)"
    )


def shutdown(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
