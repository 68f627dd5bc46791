"""The trainer end to end: accuracy on Cora, exact resume after SIGKILL, DDP over gloo, a dead rank."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import sparsetrain as st
from sparsetrain.engine.checkpoint import load_latest_checkpoint
from tests.collective_harness import free_port

CORA_ARGS = [
    "--fanout", "10,10", "--batch-size", "64", "--lr", "0.005", "--weight-decay", "5e-4", "--hidden", "256", "--quiet",
]


@pytest.fixture(scope="module")
def cora_dir(cora_data, tmp_path_factory):
    return st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("cora") / "cora", quiet=True).path


def test_graphsage_on_cora_public_split_reaches_79_percent(cli, cora_dir, tmp_path):
    accs = []
    for seed in range(3):
        summary = tmp_path / f"s{seed}.json"
        code, _, err = cli(
            "train", "--data", cora_dir, *CORA_ARGS, "--epochs", "20", "--seed", seed, "--summary-json", summary
        )
        assert code == 0, err
        result = json.loads(summary.read_text())
        assert result["epochs"] == 20 and result["seconds"] > 0
        accs.append(result["test_acc"])
    assert sum(accs) / 3 >= 0.79, accs


def test_the_default_dataset_is_the_packaged_cora(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    code, out, err = cli("train", "--epochs", "30", "--quiet", "--summary-json", tmp_path / "s.json")
    assert code == 0, err
    result = json.loads((tmp_path / "s.json").read_text())
    assert result["dataset"] == str(tmp_path / "cache" / "cora-planetoid-v1")
    assert result["test_acc"] > 5 * (1 / 7)  # well above chance after 30 full-batch steps
    assert "test accuracy" in out


def test_the_builtin_synthetic_graph_trains_well_above_chance(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    code, out, err = cli(
        "train", "--data", "synthetic", "--epochs", "2", "--quiet", "--summary-json", tmp_path / "s.json"
    )
    assert code == 0, err
    result = json.loads((tmp_path / "s.json").read_text())
    assert result["test_acc"] > 3 * (1 / 8)
    assert "test accuracy" in out


def _train_cmd(cora_dir, ckpt, log, *extra):
    return [
        sys.executable, "-m", "sparsetrain", "train", "--data",
        str(cora_dir),
        *CORA_ARGS, "--hidden", "64", "--batch-size", "16", "--epochs", "6", "--seed", "7", "--checkpoint-dir",
        str(ckpt),
        "--checkpoint-every",
        "4",
        "--metrics-log",
        str(log),
        *extra,
    ]


def _steps(log):
    if not log.exists():
        return 0
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return max((r["step"] for r in lines), default=0)


@pytest.mark.slow  # (the default suite's time on CI's two cores)
def test_sigkill_then_resume_equals_the_uninterrupted_run(cora_dir, tmp_path):
    full_ckpt, full_log = tmp_path / "full", tmp_path / "full.jsonl"
    subprocess.run(_train_cmd(cora_dir, full_ckpt, full_log), check=True, capture_output=True)

    ckpt, log = tmp_path / "cut", tmp_path / "cut.jsonl"
    proc = subprocess.Popen(_train_cmd(cora_dir, ckpt, log), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while _steps(log) < 30 and time.time() < deadline:  # mid-epoch 4 (9 batches an epoch, 54 in all)
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert _steps(log) < 54, "the run finished before it could be killed"
    subprocess.run(_train_cmd(cora_dir, ckpt, log, "--resume"), check=True, capture_output=True)

    a, b = load_latest_checkpoint(full_ckpt), load_latest_checkpoint(ckpt)
    assert a["position"] == b["position"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    def losses(path):
        return [r["loss"] for r in map(json.loads, path.read_text().splitlines()) if "loss" in r]
    assert losses(full_log) == losses(log)


@pytest.mark.slow  # (the default suite's time on CI's two cores)
@pytest.mark.distributed
def test_two_rank_gloo_training_on_cora_with_sharded_features(cora_dir, tmp_path):
    summary = tmp_path / "s.json"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
        str(free_port()),
        "-m",
        "sparsetrain",
        "train",
        "--data",
        str(cora_dir),
        *CORA_ARGS, "--batch-size", "32", "--epochs", "20", "--seed", "0", "--features", "sharded", "--summary-json",
        str(summary),
        "--metrics-log",
        str(tmp_path / "log.jsonl"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads(summary.read_text())
    assert metrics["world_size"] == 2
    assert metrics["test_acc"] >= 0.79
    # the metrics log under torchrun: the main rank's steps, each once, and an epoch record closing each epoch
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, metrics["steps"] + 1))
    assert records[-1]["epoch"] == 20 and records[-1]["step"] == metrics["steps"] and 0 <= records[-1]["val_acc"] <= 1


@pytest.mark.slow  # the default suite has the same survivor's line from test_engine_faults (a peer that exits) and
@pytest.mark.distributed  # test_collective's dead rank (os._exit): both are a peer's sockets closing, as SIGKILL's are
def test_a_killed_rank_makes_the_other_exit_with_a_clear_error(cora_dir, tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        cmd = [sys.executable, "-m", "sparsetrain", "train", "--data", str(cora_dir), *CORA_ARGS, "--batch-size", "8",
               "--epochs", "200", "--metrics-log", str(tmp_path / f"log{rank}.jsonl")]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.time() + 120
    while _steps(tmp_path / "log0.jsonl") < 5 and time.time() < deadline:
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL)
    killed_at = time.time()
    _, stderr = procs[0].communicate(timeout=90)
    assert time.time() - killed_at < 60
    assert procs[0].returncode not in (0, None)
    assert "lost contact with another rank" in stderr
    assert "Traceback" not in stderr


def _placed_run_losses(cora_dir, log, *extra) -> list[float]:
    from sparsetrain.cli import main

    argv = ["train", "--data", cora_dir, *CORA_ARGS, "--epochs", "2", "--seed", "3", "--metrics-log", log, *extra]
    assert main([str(a) for a in argv]) == 0
    return [r["loss"] for r in map(json.loads, log.read_text().splitlines()) if "loss" in r]


@pytest.fixture(scope="module")
def default_placement_losses(cora_dir, tmp_path_factory) -> list[float]:
    return _placed_run_losses(cora_dir, tmp_path_factory.mktemp("placement") / "log.jsonl")


@pytest.mark.parametrize("placement", [["--cache-gb", "0.002"], ["--features", "memory"]])
def test_feature_placement_does_not_change_the_run(cora_dir, default_placement_losses, tmp_path, placement):
    assert _placed_run_losses(cora_dir, tmp_path / "log.jsonl", *placement) == default_placement_losses


def test_bf16_mixed_precision_trains_on_cora(cli, cora_dir, tmp_path):
    summary = tmp_path / "bf16.json"
    code, _, err = cli(
        "train", "--data", cora_dir, *CORA_ARGS, "--epochs", "10", "--precision", "bf16", "--summary-json", summary
    )
    assert code == 0, err
    assert json.loads(summary.read_text())["test_acc"] >= 0.75
    code, _, err = cli("train", "--data", cora_dir, "--precision", "fp16", "--quiet")
    assert code != 0 and "--precision" in err and "bf16" in err


def test_trainer_rejects_an_unknown_precision(cora_dir):
    ds = st.datasets.load(cora_dir)
    loader = st.engine.Loader(
        st.sampling.NeighborSampler(ds.graph, [5]), ds.features, ds.labels, ds.split["train"], batch_size=64
    )
    model = st.nn.GraphSAGE(ds.num_features, 16, ds.num_classes, 1)
    with pytest.raises(ValueError, match="precision 'half' is not supported; choose one of fp32, bf16"):
        st.engine.Trainer(model, loader, torch.optim.Adam(model.parameters()), epochs=1, precision="half")
