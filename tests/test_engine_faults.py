"""The train CLI under faults: torchrun's option parsing, checkpoints of another run, a rank's own failure."""

import json
import subprocess
import sys

import pytest
import torch

import sparsetrain as st
from sparsetrain.cli import build_parser

TINY_ARGS = ["--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--quiet"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return st.datasets.synthesize(tmp_path_factory.mktemp("tiny") / "tiny", 400, 3200, feature_dim=8, num_classes=3, seed=0, quiet=True).path


def _metrics(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _train_options() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "verb")
    return [opt for action in sub.choices["train"]._actions for opt in action.option_strings if opt.startswith("--")]


def test_torchrun_leaves_every_documented_train_option_to_the_script():
    from torch.distributed.run import get_args_parser

    documented = [opt for opt in _train_options() if opt not in ("--help", "--log")]
    assert "--metrics-log" in documented
    for opt in documented:
        args = get_args_parser().parse_args(["--nproc-per-node", "1", "-m", "sparsetrain", "train", opt, "1"])
        assert args.training_script_args == ["train", opt, "1"], opt


def test_metrics_log_under_torchrun(tiny_dir, tmp_path):
    log = tmp_path / "metrics.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "sparsetrain", "train",
           "--data", str(tiny_dir), *TINY_ARGS, "--epochs", "1", "--metrics-log", str(log)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    records = _metrics(log)
    train_seeds = len(st.datasets.load(tiny_dir).split["train"])
    steps = -(-train_seeds // 64)
    assert [r["step"] for r in records if "loss" in r] == list(range(1, steps + 1))
    assert records[-1]["epoch"] == 1 and records[-1]["step"] == steps and 0 <= records[-1]["val_acc"] <= 1


def test_the_old_log_option_still_works_outside_torchrun(cli, tiny_dir, tmp_path):
    for option in ("--log", "--metrics-log"):
        log = tmp_path / f"{option[2:]}.jsonl"
        code, _, err = cli("train", "--data", tiny_dir, *TINY_ARGS, "--epochs", "1", "--seed", "1", option, log)
        assert code == 0, err
    timing = ("seconds", "stall_fraction", "seeds_per_second")
    same = lambda path: [{k: v for k, v in r.items() if k not in timing} for r in _metrics(path)]
    assert same(tmp_path / "log.jsonl") == same(tmp_path / "metrics-log.jsonl")
    assert len(_metrics(tmp_path / "log.jsonl")) > 1
