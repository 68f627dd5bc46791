"""``sparsetrain predict`` and ``sparsetrain.load_model``: a trained run's predictions for every node, checked against
the run's reported test metric and against the model run by hand with PyG's layers on the whole graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sparsetrain as st
from sparsetrain.engine.checkpoint import BEST
from sparsetrain.engine.predict import load_model, predict
from sparsetrain.engine.run import train
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.errors import SettingError


@pytest.fixture(scope="module")
def cora_run(tmp_path_factory):
    """Cora through ``train`` (8 epochs, full-graph evaluation), checkpoints kept."""
    folder = tmp_path_factory.mktemp("cora-run")
    data = st.datasets.from_pyg(st.datasets.builtin.planetoid_data("cora"), folder / "cora", quiet=True)
    summary = train(TrainSettings(data=folder / "cora", epochs=8, checkpoint_dir=folder / "ckpt", quiet=True))
    return data, folder / "ckpt", summary


def test_predictions_score_the_reported_test_accuracy(cora_run, tmp_path):
    ds, ckpt, summary = cora_run
    assert (ckpt / BEST).is_file()
    result = predict(ckpt, tmp_path / "cora.npy")
    scores = np.load(tmp_path / "cora.npy")
    assert scores.shape == (2708, 7) and scores.dtype == np.float32 and result["rows"] == 2708
    test = ds.split["test"].numpy()
    accuracy = (scores[test].argmax(1) == ds.labels.numpy()[test]).mean()  # NumPy, from the file
    assert accuracy == pytest.approx(summary["test_acc"], abs=1e-12)
    assert result["test_acc"] == pytest.approx(summary["test_acc"], abs=1e-12)
    assert result["epoch"] == summary["best_epoch"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cora.npy"]  # no temp or spill file left


def test_load_model_in_a_plain_pyg_script(cora_run):
    """The README's five lines: the loaded module on the whole graph, PyG's edge_index, no sparsetrain batch."""
    ds, ckpt, summary = cora_run
    model = st.load_model(ckpt)
    assert model.config["model"] == "sage" and model.config["epoch"] == summary["best_epoch"]
    assert not model.training
    data = st.datasets.builtin.planetoid_data("cora")
    with torch.no_grad():
        full = [(data.edge_index, (data.num_nodes, data.num_nodes))] * model.num_layers  # every hop: the whole graph
        pred = model(data.x, full).argmax(-1)
    assert (pred[data.test_mask] == data.y[data.test_mask]).double().mean().item() == pytest.approx(
        summary["test_acc"], abs=1e-12)


def test_embeddings_are_the_first_layer_by_hand_and_parquet_matches_npy(cora_run, tmp_path):
    ds, ckpt, _ = cora_run
    predict(ckpt, tmp_path / "emb.parquet", embeddings=True)
    predict(ckpt, tmp_path / "scores.parquet")
    predict(ckpt, tmp_path / "scores.npy")
    import pyarrow.parquet as pq

    model = load_model(ckpt)
    data = st.datasets.builtin.planetoid_data("cora")
    conv = model.convs[0]  # PyG's SAGEConv: mean of in-neighbors, then relu; by hand with torch ops
    n = data.num_nodes
    src, dst = data.edge_index
    mean = torch.zeros(n, data.x.shape[1]).index_add_(0, dst, data.x[src])
    mean /= torch.bincount(dst, minlength=n).clamp(min=1).unsqueeze(1)
    with torch.no_grad():
        expected = F.relu(conv.lin_l(mean) + conv.lin_r(data.x))
    emb = pq.read_table(tmp_path / "emb.parquet")
    assert emb.column_names == ["node", "embedding"]
    assert emb["node"].to_numpy().tolist() == list(range(n))
    got = np.stack(emb["embedding"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-5)
    table = pq.read_table(tmp_path / "scores.parquet")
    scores = np.load(tmp_path / "scores.npy")
    assert table["class"].to_numpy().tolist() == scores.argmax(1).tolist()
    np.testing.assert_array_equal(np.stack(table["scores"].to_numpy(zero_copy_only=False)), scores)


def test_output_paths_are_checked(cora_run, tmp_path):
    ds, ckpt, _ = cora_run
    with pytest.raises(SettingError, match="is in the dataset folder"):
        predict(ckpt, ds.path / "predictions.npy")
    with pytest.raises(SettingError, match="suffix must be one of .npy, .parquet"):
        predict(ckpt, tmp_path / "predictions.csv")
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(SettingError, match="is a folder"):
        predict(ckpt, tmp_path / "folder.npy")
    with pytest.raises(SettingError, match="no such checkpoint folder"):
        predict(tmp_path / "nothing", tmp_path / "p.npy")


def test_the_cli_verb(cora_run, tmp_path, cli):
    ds, ckpt, summary = cora_run
    code, out, err = cli("predict", "--checkpoint", ckpt, "--out", tmp_path / "p.npy", "--last")
    assert code == 0, err
    assert f"to {tmp_path / 'p.npy'}; test acc" in out and "epoch 8" in out
    last = load_model(ckpt, which="last")
    assert last.config["epoch"] == 8
    code, _, err = cli("predict", "--checkpoint", ckpt, "--out", ds.path / "p.npy")
    assert code == 1 and err.startswith("error: ") and "is in the dataset folder" in err and len(err.splitlines()) == 1


@pytest.mark.slow  # (a link run; ~16 s on two shared cores)
def test_link_predictions_score_the_reported_test_auc(tmp_path):
    ds = st.datasets.from_pyg(st.datasets.builtin.planetoid_data("cora"), tmp_path / "cora-link",
                              link_split=(0.85, 0.05, 0.10), seed=0, quiet=True)
    summary = train(TrainSettings(data=ds.path, task="link", epochs=2, checkpoint_dir=tmp_path / "ckpt", quiet=True))
    result = predict(tmp_path / "ckpt", tmp_path / "emb.npy")
    h = torch.from_numpy(np.load(tmp_path / "emb.npy"))
    assert h.shape == (2708, 128)
    model = load_model(tmp_path / "ckpt")
    test = ds.edge_split["test"]
    with torch.no_grad():
        pos, neg = (model.decoder(h[p[0]], h[p[1]]).numpy() for p in (test.pos, test.neg))
    auc = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()  # NumPy's AUC
    assert auc == pytest.approx(summary["test_auc"], abs=1e-9)
    assert result["test_auc"] == pytest.approx(summary["test_auc"], abs=1e-9)


@pytest.mark.slow  # (a typed run; ~30 s on two shared cores)
def test_typed_predictions_score_the_reported_test_accuracy(tmp_path):
    ds = st.datasets.synthesize(tmp_path / "typed", typed=True, scale=0.001, quiet=True)
    summary = train(TrainSettings(data=ds.path, epochs=2, checkpoint_dir=tmp_path / "ckpt", quiet=True))
    predict(tmp_path / "ckpt", tmp_path / "paper.npy")
    scores = np.load(tmp_path / "paper.npy")
    target = ds.target_type
    assert scores.shape[0] == ds.num_nodes_by_type[target]
    test = ds.split["test"].numpy()
    accuracy = (scores[test].argmax(1) == ds.labels_by_type[target].numpy()[test]).mean()
    assert accuracy == pytest.approx(summary["test_acc"], abs=1e-12)
    with pytest.raises(SettingError, match="--embeddings"):
        predict(tmp_path / "ckpt", tmp_path / "emb.npy", embeddings=True)


def test_a_partitioned_runs_checkpoint_predicts_on_its_source_dataset(cora_run, tmp_path):
    """One part, one process: the checkpoint records the partitioned folder; predict finds the dataset it was cut
    from through the manifest and runs the model layer-wise on it (exact, whatever the run's sampled evaluation)."""
    from sparsetrain.partition.partitioner import PartitionOptions, partition_dataset

    ds, _, _ = cora_run
    partition_dataset(ds.path, tmp_path / "parts", PartitionOptions(parts=1, quiet=True))
    train(TrainSettings(data=tmp_path / "parts", epochs=2, checkpoint_dir=tmp_path / "ckpt", quiet=True))
    result = predict(tmp_path / "ckpt", tmp_path / "p.npy")
    model = load_model(tmp_path / "ckpt")
    assert model.config["partitioned"] and model.config["dataset"] == str(ds.path)
    data = st.datasets.builtin.planetoid_data("cora")
    with torch.no_grad():
        expected = model(data.x, [(data.edge_index, (data.num_nodes, data.num_nodes))] * 2)
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), expected.numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(SettingError, match="partitioned folder"):
        predict(tmp_path / "ckpt", tmp_path / "q.npy", data=tmp_path / "parts")
    assert 0 <= result["test_acc"] <= 1


@pytest.mark.slow  # (a graph-transformer run; ~40 s on two shared cores)
def test_graph_transformer_predictions_score_the_reported_test_accuracy(cora_run, tmp_path):
    """Sampled like its evaluation (clusters, the evaluation sampler's seed, each split's own batches)."""
    ds, _, _ = cora_run
    summary = train(TrainSettings(data=ds.path, model="gt", epochs=2, checkpoint_dir=tmp_path / "ckpt", quiet=True))
    result = predict(tmp_path / "ckpt", tmp_path / "gt.npy")
    scores = np.load(tmp_path / "gt.npy")
    test = ds.split["test"].numpy()
    assert (scores[test].argmax(1) == ds.labels.numpy()[test]).mean() == pytest.approx(summary["test_acc"], abs=1e-12)
    assert result["method"] == "sampled"
