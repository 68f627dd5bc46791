"""The mag-shaped synthetic typed graph: deterministic, learnable; `sparsetrain train` trains an R-GCN on it in 1 and 2
ranks."""

import json
import subprocess
import sys

import pytest
import torch

import sparsetrain as st
from sparsetrain.datasets import synthesize
from tests.collective_harness import free_port

ARGS = ["--epochs", "4", "--batch-size", "128", "--fanout", "5,5", "--hidden", "32", "--seed", "0", "--quiet"]


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mag") / "mag"
    return synthesize(folder, typed=True, scale=0.002, num_classes=4, seed=3, quiet=True).path


def test_synthetic_mag_is_deterministic_and_mag_shaped(mag, tmp_path):
    again = synthesize(tmp_path / "again", typed=True, scale=0.002, num_classes=4, seed=3, quiet=True)
    ds = st.datasets.load(mag, verify=True)
    assert ds.num_nodes == {"paper": 1473, "author": 2269, "institution": 17, "field_of_study": 120}
    assert {et[1] for et in ds.edge_types} == {
        "cites", "writes", "affiliated_with", "has_topic", "rev_cites", "rev_writes", "rev_affiliated_with",
        "rev_has_topic",
    }
    meta = json.loads((mag / "meta.json").read_text())
    # same bytes (sha256) for the same seed
    assert meta["files"] == json.loads((again.path / "meta.json").read_text())["files"]
    # learnable: a paper's cited papers mostly share its class
    csc = ds.graph.edges[("paper", "cites", "paper")]
    y = ds.labels["paper"]
    dst = torch.repeat_interleave(torch.arange(csc.num_nodes), csc.in_degrees())
    assert (y[csc.indices.long()] == y[dst]).float().mean() > 0.6


@pytest.fixture(scope="module")
def one_rank(mag, tmp_path_factory) -> dict:
    """The summary of one process's ``train`` run with ``ARGS`` (shared: the two-rank test compares with it)."""
    from sparsetrain.cli import main

    summary = tmp_path_factory.mktemp("one") / "s.json"
    assert main([str(a) for a in ("train", "--data", mag, *ARGS, "--summary-json", summary)]) == 0
    return json.loads(summary.read_text())


def test_train_rgcn_on_the_typed_graph_well_above_chance(one_rank):
    assert one_rank["model"] == "rgcn" and one_rank["test_acc"] > 0.6  # chance: 0.25


def test_target_type_without_labels_is_a_clear_error(cli, mag, tmp_path):
    code, _, err = cli("train", "--data", mag, "--target-type", "author", *ARGS)
    assert code == 1 and "'author' has no labels" in err and "\n" not in err.strip()


@pytest.mark.slow  # (the default suite's time on CI's two cores)
@pytest.mark.distributed
def test_two_ranks_train_the_typed_graph_like_one(mag, one_rank, tmp_path):
    summary = tmp_path / "s2.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "sparsetrain", "train", "--data", str(mag), *ARGS, "--summary-json", str(summary)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    two = json.loads(summary.read_text())
    assert two["world_size"] == 2 and two["test_acc"] > 0.6
    assert abs(two["test_acc"] - one_rank["test_acc"]) < 0.1


@pytest.mark.parametrize(("flags", "message"), [
    (["--model", "sage"], "--model sage: a typed dataset trains rgcn"),
    (["--model", "gat"], "--model gat: a typed dataset trains rgcn"),
    (["--eval", "full"], "--eval full: typed datasets evaluate on sampled batches"),
    (["--features", "sharded"], "--features sharded: typed datasets are not sharded yet"),
])
def test_a_setting_the_typed_run_cannot_honour_is_refused_in_one_line(cli, mag, flags, message):
    code, _, err = cli("train", "--data", mag, *flags, *ARGS)
    assert code == 1 and message in err and "\n" not in err.strip()


def test_rgcn_on_a_homogeneous_dataset_is_refused_in_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    code, _, err = cli("train", "--data", "cora", "--model", "rgcn", "--quiet")
    assert code == 1 and "--model rgcn" in err and "homogeneous" in err and "\n" not in err.strip()
