"""`sparsetrain train --features disk --cache-gb N`: the same steps as from memory-mapped features, with a cache
report."""

import json

import sparsetrain as st


def _losses(path):
    return [r["loss"] for r in map(json.loads, path.read_text().splitlines()) if "loss" in r]


def test_training_from_disk_behind_a_cache_takes_the_same_steps_as_mmap(cli, tmp_path):
    ds = st.datasets.synthesize(
        tmp_path / "g", 4000, 60_000, feature_dim=32, num_classes=5, feature_dtype="float16", seed=1, quiet=True
    )
    common = [
        "train", "--data", ds.path, "--fanout", "5,5", "--batch-size", "256", "--max-steps", "4", "--quiet", "--seed",
        "3",
    ]
    code, out, err = cli(*common, "--features", "mmap", "--metrics-log", tmp_path / "mmap.jsonl")
    assert code == 0, err
    code, out, err = cli(*common, "--features", "disk", "--cache-gb", "0.0001", "--cache-policy", "sieve",
                         "--metrics-log", tmp_path / "disk.jsonl", "--summary-json", tmp_path / "s.json")
    assert code == 0, err
    assert (
        _losses(tmp_path / "disk.jsonl") == _losses(tmp_path / "mmap.jsonl")
        and len(_losses(tmp_path / "mmap.jsonl")) == 4
    )
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["steps"] == 4 and summary["epochs"] == 0 and summary["test_acc"] is None
    assert 0.0 < summary["hit_rate"] < 1.0 and summary["disk_mb"] > 0
    assert "4 steps" in out and "cache hit rate" in out
    stopped = [json.loads(line) for line in (tmp_path / "disk.jsonl").read_text().splitlines() if "stopped" in line]
    assert stopped and stopped[0]["stopped"] == "max_steps" and stopped[0]["disk_mb"] == summary["disk_mb"]


def test_unknown_cache_policy_is_a_one_line_error(cli, tmp_path):
    code, out, err = cli("train", "--features", "disk", "--cache-gb", "1", "--cache-policy", "fifo")
    assert code == 1 and "--cache-policy" in err and "sieve" in err


def test_progress_bar_shows_the_cache_hit_rate_and_disk_read_rate(tmp_path):
    import numpy as np
    import torch

    from sparsetrain.engine.trainer import _FeatureReads
    from sparsetrain.storage import CachedFeatures, MmapFeatures

    np.save(tmp_path / "f.npy", np.arange(4000 * 64, dtype=np.float32).reshape(4000, 64))
    disk = MmapFeatures(tmp_path / "f.npy", mode="direct")
    cache = CachedFeatures(disk, 100 * 256, policy="lru")
    reads = _FeatureReads(cache)
    assert reads.cache is cache and reads.disk is disk and reads.postfix() == {"disk_MB_s": "0"}
    cache.gather(torch.arange(50))
    cache.gather(torch.arange(50))
    shown = reads.postfix()
    assert shown["hit"] == "50%" and float(shown["disk_MB_s"]) >= 0
    assert disk.stats.bytes_moved >= 50 * 256
    assert reads.totals() == {"hit_rate": 0.5, "disk_mb": round(disk.stats.bytes_moved / 1e6, 1)}
    assert not _FeatureReads(torch.zeros(3, 2)).shown


def test_progress_bar_shows_the_pcie_bytes_a_batch_of_a_pinned_tier():
    import torch

    from sparsetrain.engine.trainer import _FeatureReads
    from sparsetrain.storage import TensorFeatures

    pinned = TensorFeatures(torch.zeros(10, 4))  # stands in for PinnedFeatures(device="cuda"): read over PCIe
    pinned.device, pinned.pinned = torch.device("cuda"), True
    reads = _FeatureReads(pinned)
    assert reads.shown and reads.pcie is pinned
    pinned.stats.bytes_moved += 3_000_000
    assert reads.postfix() == {"pcie_MB_batch": "3.0"}
    pinned.stats.bytes_moved += 1_000_000
    assert reads.postfix() == {"pcie_MB_batch": "2.0"}
    assert reads.totals()["pcie_mb"] == 4.0


def test_a_gpu_cache_fronts_pinned_host_features_when_they_fit(monkeypatch):
    from types import SimpleNamespace

    import torch

    from sparsetrain.engine import plan

    nbytes = 10 << 20
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    cached = SimpleNamespace(placement="auto", cache_gb=1.0)
    monkeypatch.setattr(plan, "available_host_memory", lambda: (1 << 30, "test"))
    assert plan._placement(nbytes, cached, gpu) == "pinned"
    assert plan._placement(nbytes, cached, cpu) == "mmap"
    monkeypatch.setattr(plan, "available_host_memory", lambda: (1 << 20, "test"))  # no room for a pinned copy
    assert plan._placement(nbytes, cached, gpu) == "mmap"
    assert plan._placement(nbytes, SimpleNamespace(placement="disk", cache_gb=1.0), gpu) == "disk"
