"""`torchrun ... sparsetrain train --data DIR` on a partitioned folder: Cora in 2 parts on 2 gloo ranks trains to the
single-process run's test accuracy (same settings, sampled evaluation both ways), the log carries the halo cache's hit
rate and the bytes exchanged per step, and settings a partitioned run cannot honour are refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sparsetrain as st
from sparsetrain.partition import PartitionOptions, partition_dataset
from tests.collective_harness import free_port

ARGS = ["--fanout", "10,10", "--batch-size", "32", "--lr", "0.005", "--weight-decay", "5e-4", "--hidden", "256",
        "--epochs", "15", "--eval", "sampled"]


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
    assert len(epochs) == 15
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
