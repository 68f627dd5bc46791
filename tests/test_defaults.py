"""Right answers by default: Cora shipped in the package, built-in dataset names, epochs chosen from the train-set
size."""

import json

import numpy as np
import pytest

import sparsetrain as st
from sparsetrain.engine.dataset_meta import DatasetMeta
from sparsetrain.engine.default_data import BUILTIN, cache_dir, open_dataset
from sparsetrain.engine.plan import AUTO_MAX_EPOCHS, MODEL_DEFAULTS, auto_epochs, plan
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.errors import DatasetError


def test_packaged_cora_is_planetoids_public_split(cora_data):
    # Cora as published (Yang et al. 2016; Kipf & Welling 2017): 2708 papers, 5278 undirected citations, 1433 words,
    # 7 classes; 20 labels per class for training, the next 500 nodes for validation, 1000 test nodes at the end
    assert cora_data.num_nodes == 2708 and cora_data.edge_index.shape == (2, 10556)
    assert cora_data.x.shape == (2708, 1433) and int(cora_data.y.max()) + 1 == 7
    train, val, test = (
        np.flatnonzero(m.numpy()) for m in (cora_data.train_mask, cora_data.val_mask, cora_data.test_mask)
    )
    assert np.array_equal(train, np.arange(140)) and np.array_equal(val, np.arange(140, 640))
    assert np.array_equal(test, np.arange(1708, 2708))
    assert np.array_equal(np.bincount(cora_data.y[:140].numpy()), [20] * 7)


def test_a_builtin_name_is_built_once_into_the_cache(tmp_path, monkeypatch, cora_data):
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    ds = open_dataset("cora", quiet=True)
    assert ds.path == cache_dir() / BUILTIN["cora"] and ds.num_nodes == 2708 and ds.num_classes == 7
    assert int(ds.graph.indptr[-1]) == 10556
    assert np.array_equal(ds.labels.numpy(), cora_data.y.numpy())
    assert np.array_equal(ds.split["test"].numpy(), np.arange(1708, 2708))
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [BUILTIN["cora"]]  # no temp folder left behind
    stamp = (ds.path / "meta.json").stat().st_mtime_ns
    assert open_dataset("Cora", quiet=True).path == ds.path and (ds.path / "meta.json").stat().st_mtime_ns == stamp


def test_an_existing_folder_wins_over_a_builtin_name(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    st.datasets.synthesize(tmp_path / "cora", 300, 1200, feature_dim=4, num_classes=3, seed=0, quiet=True)
    ds = open_dataset("cora", quiet=True)
    assert ds.num_nodes == 300 and not (tmp_path / "cache").exists()


def test_an_unknown_name_is_one_line_naming_the_builtins(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError, match="cora, synthetic"):
        open_dataset("corra")
    code, out, err = cli("train", "--data", "corra", "--quiet")
    assert code == 1 and err.count("\n") == 1 and "corra" in err and "Traceback" not in err


@pytest.mark.parametrize(("steps_per_epoch", "epochs"), [(1, 200), (3, 200), (10, 200), (89, 23), (193, 11), (5000, 1)])
def test_auto_epochs_count_optimizer_steps(steps_per_epoch, epochs):
    # Cora (140 seeds, batch 1024): 1 step an epoch; ogbn-arxiv (90,941 train nodes) 89; ogbn-products (196,615) 193
    assert auto_epochs(steps_per_epoch) == epochs
    assert epochs * steps_per_epoch >= 2000 or epochs == AUTO_MAX_EPOCHS


def test_model_defaults_fill_only_what_was_not_given(tmp_path):
    import torch

    ds = st.datasets.synthesize(tmp_path / "tiny", 400, 3200, feature_dim=8, num_classes=3, seed=0, quiet=True)
    cpu = torch.device("cpu")
    sage = plan(TrainSettings(data=ds.path), DatasetMeta.of(ds), cpu)
    train_seeds = len(ds.split["train"])  # one batch of 1024 an epoch: 2000 steps capped at AUTO_MAX_EPOCHS
    assert train_seeds <= 1024 and sage.optim.epochs == AUTO_MAX_EPOCHS
    assert (sage.model.name, sage.optim.lr, sage.optim.weight_decay, sage.model.hidden) == ("sage", 0.01, 5e-4, 128)
    gt = plan(TrainSettings(data=ds.path, model="gt", lr=0.02, epochs=3), DatasetMeta.of(ds), cpu)
    assert (gt.optim.lr, gt.optim.weight_decay, gt.model.hidden, gt.optim.epochs) == (
        0.02, MODEL_DEFAULTS["gt"]["weight_decay"], MODEL_DEFAULTS["gt"]["hidden"], 3)


def test_epochs_given_means_exactly_that_many(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    code, _, err = cli("train", "--data", "cora", "--epochs", "3", "--quiet", "--summary-json", tmp_path / "s.json")
    assert code == 0, err
    result = json.loads((tmp_path / "s.json").read_text())
    assert result["epochs"] == 3 and result["steps"] == 3  # 140 train seeds: one batch of 1024 an epoch


def _default_runs(cli, tmp_path, *extra):
    accs = []
    for seed in range(3):
        summary = tmp_path / f"{'-'.join(extra)}{seed}.json"
        code, _, err = cli("train", "--data", "cora", "--seed", seed, *extra, "--quiet", "--summary-json", summary)
        assert code == 0, err
        result = json.loads(summary.read_text())
        assert result["epochs"] == AUTO_MAX_EPOCHS
        accs.append(result["test_acc"])
    return accs


@pytest.mark.slow
def test_defaults_reach_graphsages_published_band_on_cora_and_gt_within_two_points(cli, tmp_path, monkeypatch):
    """`sparsetrain train --data cora --seed S`, no other flags: GraphSAGE's published band is 79-81.5% on the public
    split."""
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    sage = _default_runs(cli, tmp_path)
    gt = _default_runs(cli, tmp_path, "--model", "gt")
    print(f"defaults on Cora: sage {np.mean(sage):.4f} {sage}, gt {np.mean(gt):.4f} {gt}")
    assert np.mean(sage) >= 0.79, sage
    assert np.mean(gt) >= np.mean(sage) - 0.02, (gt, sage)


def test_gt_clusters_a_graph_without_clusters_like_preprocess_does(cora_data, tmp_path):
    from sparsetrain.engine.run import _clusters

    plain = st.datasets.from_pyg(cora_data, tmp_path / "plain", quiet=True)
    clustered = st.datasets.from_pyg(cora_data, tmp_path / "clustered", reorder="cluster", quiet=True)
    online = _clusters(plain)
    original = np.load(clustered.path / "original_ids.npy")  # original_ids[new] = old
    assert np.array_equal(online.numpy()[original], st.datasets.load_clusters(clustered).numpy())
    # its own clusters.npy
    assert np.array_equal(_clusters(clustered).numpy(), st.datasets.load_clusters(clustered).numpy())
