"""A stopped rank (SIGSTOP: alive, sockets open, silent) must not hang the others.

Every group the library makes times out (``SPARSETRAIN_DIST_TIMEOUT``, 5 s here), so the
surviving rank exits non-zero with one clear line, whether its training thread or its
loader thread (a ``ShardedFeatures`` gather) is the one waiting on the stopped peer.
The CLI run is marked slow (about 100 s on a loaded 2-core machine, 9 s of it waiting).
"""

import os
import signal
import subprocess
import sys
import time

import pytest

import sparsetrain as st
from tests.collective_harness import free_port

TIMEOUT_S = 5
CORA_ARGS = ["--fanout", "10,10", "--hidden", "64", "--quiet"]


def _steps(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def cora_dir(cora_data, tmp_path_factory):
    return st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("cora") / "cora", quiet=True).path


def _start_ranks(argv: list[str], tmp_path, world: int = 2) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), SPARSETRAIN_DIST_TIMEOUT=str(TIMEOUT_S))
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv, "--metrics-log", str(tmp_path / f"log{rank}.jsonl")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


# rank 0's training thread does no collective of its own: only its loader thread waits on the peer
LOADER_SCRIPT = """
import signal, sys, time
from pathlib import Path
import torch.distributed as dist
import sparsetrain as st
from sparsetrain.collective import ShardedFeatures, init_process_group, new_group
from sparsetrain.engine.loader import Loader
from sparsetrain.errors import SparsetrainError
from sparsetrain.sampling import NeighborSampler

init_process_group("gloo")
rank = dist.get_rank()
ds = st.datasets.load(sys.argv[1])
features = ShardedFeatures.from_table(ds.features, group=new_group())
loader = Loader(NeighborSampler(ds.graph, [5, 5], seed=0), features, ds.labels, ds.split["train"], batch_size=8,
                rank=rank, world_size=2, prefetch=2)
progress = Path(sys.argv[2])
try:
    for epoch in range(1000):
        loader.set_epoch(epoch)
        for mb in loader:
            with progress.open("a") as f:
                f.write(f"{epoch} {mb.x.shape[0]}\\n")
except SparsetrainError as exc:
    print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(3)
"""


def _stop_rank_one_once_rank_zero_is_going(procs, progress, steps: int) -> tuple[float, str]:
    """SIGSTOP rank 1 once rank 0 logged ``steps`` steps; wait for rank 0 to exit: (seconds it took, its stderr)."""
    try:
        deadline = time.time() + 120
        while _steps(progress) < steps and time.time() < deadline and procs[0].poll() is None:
            time.sleep(0.05)
        assert procs[0].poll() is None, procs[0].communicate()[1][-2000:]
        procs[1].send_signal(signal.SIGSTOP)
        stopped_at = time.time()
        _, stderr = procs[0].communicate(timeout=90)
        took = time.time() - stopped_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    print(f"rank 0 exited {took:.1f} s after rank 1 was stopped: {stderr.strip()}")
    return took, stderr


@pytest.mark.distributed
def test_a_stopped_rank_fails_the_loader_thread_waiting_on_it(cora_dir, tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   SPARSETRAIN_DIST_TIMEOUT=str(TIMEOUT_S))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", LOADER_SCRIPT, str(cora_dir), str(tmp_path / f"progress{rank}")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    took, stderr = _stop_rank_one_once_rank_zero_is_going(procs, tmp_path / "progress0", steps=20)
    assert took < 60
    assert procs[0].returncode == 3, stderr[-2000:]
    assert "CollectiveError" in stderr and "sparse_all_gather" in stderr and "did not reach this collective" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert "Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.distributed
def test_a_stopped_rank_makes_the_other_exit_with_a_clear_error(cora_dir, tmp_path):
    procs = _start_ranks(["-m", "sparsetrain", "train", "--data", str(cora_dir), *CORA_ARGS, "--batch-size", "8",
                          "--epochs", "200", "--features", "sharded"], tmp_path)
    took, stderr = _stop_rank_one_once_rank_zero_is_going(procs, tmp_path / "log0.jsonl", steps=5)
    assert took < 60
    assert procs[0].returncode not in (0, None)
    assert "lost contact with another rank" in stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1
