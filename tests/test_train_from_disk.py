"""`sparsetrain train --features disk --cache-gb N`: the same steps as from memory-mapped features, with a cache report."""

import json

import sparsetrain as st


def _losses(path):
    return [r["loss"] for r in map(json.loads, path.read_text().splitlines()) if "loss" in r]


def test_training_from_disk_behind_a_cache_takes_the_same_steps_as_mmap(cli, tmp_path):
    ds = st.datasets.synthesize(tmp_path / "g", 4000, 60_000, feature_dim=32, num_classes=5, feature_dtype="float16", seed=1, quiet=True)
    common = ["train", "--data", ds.path, "--fanout", "5,5", "--batch-size", "256", "--max-steps", "4", "--quiet", "--seed", "3"]
    code, out, err = cli(*common, "--features", "mmap", "--metrics-log", tmp_path / "mmap.jsonl")
    assert code == 0, err
    code, out, err = cli(*common, "--features", "disk", "--cache-gb", "0.0001", "--cache-policy", "sieve",
                         "--metrics-log", tmp_path / "disk.jsonl", "--summary-json", tmp_path / "s.json")
    assert code == 0, err
    assert _losses(tmp_path / "disk.jsonl") == _losses(tmp_path / "mmap.jsonl") and len(_losses(tmp_path / "mmap.jsonl")) == 4
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["steps"] == 4 and summary["epochs"] == 0 and summary["test_acc"] is None
    assert 0.0 < summary["hit_rate"] < 1.0 and summary["disk_mb"] > 0
    assert "4 steps" in out and "cache hit rate" in out
    stopped = [json.loads(line) for line in (tmp_path / "disk.jsonl").read_text().splitlines() if "stopped" in line]
    assert stopped and stopped[0]["stopped"] == "max_steps" and stopped[0]["disk_mb"] == summary["disk_mb"]


def test_unknown_cache_policy_is_a_one_line_error(cli, tmp_path):
    code, out, err = cli("train", "--features", "disk", "--cache-gb", "1", "--cache-policy", "fifo")
    assert code == 2 and "--cache-policy" in err and "sieve" in err
