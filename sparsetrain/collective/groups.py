"""Process groups: the caller's rank and world, where payload must live, and groups that time out.

Every group sparsetrain creates (the training process group, the sharded features' own group)
goes through :func:`init_process_group` or :func:`new_group` here, so every wait on a peer ends:
a rank that died or was stopped becomes an error on the others after :func:`default_timeout`
instead of a hang. ``SPARSETRAIN_DIST_TIMEOUT`` (seconds) overrides the default.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from sparsetrain.errors import InputError

DEFAULT_TIMEOUT_S = 30.0
TIMEOUT_ENV = "SPARSETRAIN_DIST_TIMEOUT"

Timeout = datetime.timedelta | float | None


def default_timeout() -> datetime.timedelta:
    """How long any collective of a library-made group waits for a peer: ``$SPARSETRAIN_DIST_TIMEOUT`` s, else 30 s."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise InputError(f"{TIMEOUT_ENV}={text!r} is not a positive number of seconds; set it to e.g. 60 or "
                         "unset it")
    return datetime.timedelta(seconds=seconds)


def as_timedelta(timeout: Timeout) -> datetime.timedelta | None:
    """``timeout`` (seconds or a timedelta) as a timedelta; ``None`` stays ``None``."""
    if timeout is None or isinstance(timeout, datetime.timedelta):
        return timeout
    return datetime.timedelta(seconds=float(timeout))


def init_process_group(backend: str, *, timeout: Timeout = None, **kwargs) -> None:
    """``torch.distributed.init_process_group`` with a timeout (default :func:`default_timeout`)."""
    dist.init_process_group(backend, timeout=as_timedelta(timeout) or default_timeout(), **kwargs)


def new_group(ranks: list[int] | None = None, *, timeout: Timeout = None, **kwargs):
    """``torch.distributed.new_group`` with a timeout (default :func:`default_timeout`; torch's own is 30 minutes)."""
    return dist.new_group(ranks, timeout=as_timedelta(timeout) or default_timeout(), **kwargs)


@dataclass
class GroupInfo:
    """The caller's view of a process group (``distributed`` is False without torch.distributed)."""

    group: object
    rank: int
    world_size: int
    distributed: bool


def group_info(group=None) -> GroupInfo:
    """Rank and size in ``group``; a single local rank when torch.distributed is not initialized."""
    if not (dist.is_available() and dist.is_initialized()):
        return GroupInfo(None, 0, 1, False)
    return GroupInfo(group, dist.get_rank(group), dist.get_world_size(group), True)


def comm_device(group, data_device: torch.device) -> torch.device:
    """The device payload must sit on for ``group``'s backend.

    NCCL moves CUDA tensors on the rank's current device (whatever device the data is on);
    gloo moves CPU tensors. A group with both (``"cpu:gloo,cuda:nccl"``) uses NCCL for CUDA
    data and gloo for CPU data, so the data stays where it is.
    """
    backend = str(dist.get_backend(group)).lower()
    if backend == "nccl" or ("nccl" in backend and torch.device(data_device).type == "cuda"):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
