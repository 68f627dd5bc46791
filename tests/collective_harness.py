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


def _entry(rank: int, world: int, port: int, fn, args, out_dir: str, pg_timeout_s: float) -> None:
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
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def spawn(fn, world: int, *args, timeout_s: float = 120.0, pg_timeout_s: float = 30.0) -> list:
    """Run ``fn(rank, world, *args)`` on ``world`` gloo ranks; return the per-rank results in rank order.

    Fails (AssertionError) if any rank raised, died without a result, or the world ran past ``timeout_s``.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(
            _entry, args=(world, free_port(), fn, args, out_dir, pg_timeout_s), nprocs=world, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
                if time.monotonic() > deadline:
                    raise AssertionError(f"world of {world} ranks still running after {timeout_s} s (hang)")
        except mp.ProcessExitedException:
            pass  # a rank that dies on purpose; its missing result is reported below
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
