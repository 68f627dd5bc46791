"""The gloo ranks the distributed benchmarks spawn on one machine: a free port, each rank joined to the group with
one thread (torch and Numba: ranks share the cores), and the spawn itself."""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join(rank: int, world: int, port: int, timeout_s: int) -> None:
    """This process as gloo rank ``rank`` of ``world`` on ``port``, one torch and one Numba thread."""
    import numba

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def spawn(fn, world: int, *args) -> None:
    """``fn(rank, *args)`` in ``world`` spawned processes."""
    mp.start_processes(fn, args=args, nprocs=world, start_method="spawn")
