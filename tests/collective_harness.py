"""Spawn a small gloo world on this machine and collect what each rank's function returns.

Used by tests/test_collective*.py and benchmarks/collectives.py. The function must be a
module-level callable (it is pickled by reference into spawned processes) taking
``(rank, world_size, *args)``; its return value must be picklable.
"""

from __future__ import annotations

import datetime
import os
import pickle
import socket
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn, args, out_dir: str, pg_timeout_s: float, teardown: bool) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=pg_timeout_s),
    )  # fmt: skip
    try:
        result = ("ok", fn(rank, world, *args))
    except BaseException as exc:  # shipped to the parent, which fails the test with the traceback
        result = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    Path(out_dir, f"{rank}.pkl").write_bytes(pickle.dumps(result))
    if teardown:  # every rank is done with its collectives before any rank goes away
        dist.barrier(async_op=True).wait(datetime.timedelta(seconds=pg_timeout_s))
    # no destroy_process_group(): on torch 2.2 it can block when a peer has already exited (gloo)
    os._exit(0)


def spawn(fn, world: int, *args, timeout_s: float = 120.0, pg_timeout_s: float = 30.0, teardown: bool = True) -> list:
    """Run ``fn(rank, world, *args)`` on ``world`` gloo ranks; return ``(status, value)`` per rank, in rank order.

    ``status`` is "ok", "error" (value: the traceback) or "died". Fails (AssertionError) if the
    world runs past ``timeout_s``. ``teardown=False`` skips the final barrier (for worlds whose
    group is broken on purpose).
    """
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(
            _entry,
            args=(world, free_port(), fn, args, out_dir, pg_timeout_s, teardown),
            nprocs=world,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout_s
        # not ctx.join(): it kills the other ranks as soon as one exits non-zero, and some tests kill one on purpose
        try:
            for p in ctx.processes:
                p.join(max(0.0, deadline - time.monotonic()))
            if any(p.is_alive() for p in ctx.processes):
                raise AssertionError(f"world of {world} ranks still running after {timeout_s} s (hang)")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        results = []
        for rank in range(world):
            path = Path(out_dir, f"{rank}.pkl")
            if not path.exists():
                results.append(("died", None))
                continue
            results.append(pickle.loads(path.read_bytes()))
    return results


def values(results: list) -> list:
    """The per-rank return values; fails with the first rank's traceback if any rank raised or died."""
    for rank, (status, value) in enumerate(results):
        assert status == "ok", f"rank {rank} {status}: {value}"
    return [value for _, value in results]


os.environ.setdefault("OMP_NUM_THREADS", "1")
