"""`torchrun ... sparsetrain train --data DIR` on a partitioned folder: Cora in 2 parts on 2 gloo ranks trains to the
single-process run's test accuracy (same settings, sampled evaluation both ways), the log carries the halo cache's hit
rate and the bytes exchanged per step, settings a partitioned run cannot honour are refused in one line, and a rank
killed or stopped mid-epoch makes the other exit with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import sparsetrain as st
from sparsetrain.partition import PartitionOptions, partition_dataset
from tests.collective_harness import free_port

ARGS = ["--fanout", "10,10", "--batch-size", "32", "--lr", "0.005", "--weight-decay", "5e-4", "--hidden", "256",
        "--epochs", "20", "--eval", "sampled"]


@pytest.fixture(scope="module")
def cora(cora_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("pcora")
    path = st.datasets.from_pyg(cora_data, root / "cora", quiet=True).path
    partition_dataset(path, root / "parts", PartitionOptions(2, quiet=True))
    return path, root / "parts"


@pytest.mark.slow  # ~2 min on 2 shared cores: a 2-rank torchrun run and two single-process runs
@pytest.mark.distributed
def test_two_ranks_on_two_parts_reach_the_single_process_accuracy(cora, cli, tmp_path):
    whole, parts = cora
    single = []
    for seed in (0, 1):
        summary = tmp_path / f"single{seed}.json"
        code, _, err = cli("train", "--data", whole, *ARGS, "--seed", seed, "--quiet", "--summary-json", summary)
        assert code == 0, err
        single.append(json.loads(summary.read_text())["test_acc"])
    summary, log = tmp_path / "dist.json", tmp_path / "log.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "sparsetrain", "train", "--data", str(parts), *ARGS, "--seed", "0", "--summary-json", str(summary),
           "--metrics-log", str(log)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads(summary.read_text())
    assert metrics["world_size"] == 2
    reference = sum(single) / len(single)
    assert abs(metrics["test_acc"] - reference) <= 0.03, (metrics["test_acc"], single)
    epochs = [json.loads(line) for line in log.read_text().splitlines() if '"train_loss"' in line]
    assert len(epochs) == 20
    for record in epochs:  # the halo cache serves some remote rows, the rest cross the network every step
        assert 0 < record["hit_rate"] < 1 and record["net_kb_per_step"] > 0
    assert "net_kb_per_step" in result.stdout  # the epoch lines printed by rank 0


@pytest.mark.parametrize("extra, message", [
    (["--features", "memory"], "--features memory: not supported on a partitioned folder"),
    (["--task", "link"], "--task link: not supported on a partitioned folder"),
    (["--model", "gt"], "--model gt: not supported on a partitioned folder"),
    ([], "has 2 parts but 1 ranks run; run one rank per part (torchrun --nproc-per-node 2)"),
])
def test_unsupported_settings_are_refused_in_one_line(cora, cli, extra, message):
    code, _, err = cli("train", "--data", cora[1], "--epochs", "1", "--quiet", *extra)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err


def _steps(log) -> int:
    if not log.exists():
        return 0
    return max((json.loads(line).get("step", 0) for line in log.read_text().splitlines() if line.strip()), default=0)


@pytest.mark.slow  # ~1 min: two ranks started, one killed or stopped mid-epoch
@pytest.mark.distributed
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGSTOP"])
def test_a_rank_killed_or_stopped_mid_epoch_makes_the_survivor_exit_in_one_line(cora, tmp_path, signal_name):
    port, procs = free_port(), []
    for rank in range(2):  # a stopped peer is noticed after the group's timeout, here 10 s
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), SPARSETRAIN_DIST_TIMEOUT="10")
        cmd = [sys.executable, "-m", "sparsetrain", "train", "--data", str(cora[1]), "--batch-size", "4", "--epochs",
               "50", "--quiet", "--metrics-log", str(tmp_path / f"log{rank}.jsonl")]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.time() + 120
        while _steps(tmp_path / "log0.jsonl") < 5 and time.time() < deadline:
            time.sleep(0.05)
        assert _steps(tmp_path / "log0.jsonl") >= 5, procs[0].communicate(timeout=5)[1][-2000:]
        procs[1].send_signal(getattr(signal, signal_name))
        signalled = time.time()
        _, stderr = procs[0].communicate(timeout=90)
        assert time.time() - signalled < 60
        assert procs[0].returncode == 1
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and "rank 0 of 2" in lines[0] and "restart" in lines[0], stderr[-2000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow  # ~1 min: three 2-rank runs
@pytest.mark.distributed
def test_a_run_stopped_mid_epoch_resumes_to_the_uninterrupted_losses(cora, tmp_path):
    def run(name, *extra):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
               str(free_port()), "-m", "sparsetrain", "train", "--data", str(cora[1]), "--batch-size", "16", "--epochs",
               "3", "--seed", "5", "--quiet", "--checkpoint-every", "2", "--checkpoint-dir", str(tmp_path / name),
               "--metrics-log", str(tmp_path / f"{name}.jsonl"), *extra]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        records = map(json.loads, (tmp_path / f"{name}.jsonl").read_text().splitlines())
        return [r["loss"] for r in records if "loss" in r]

    full = run("full")
    assert len(run("cut", "--max-steps", "7")) == 7  # mid-epoch 2 (5 steps an epoch); the last checkpoint at step 6
    assert run("cut", "--resume") == full
