"""OGB's binary folder layout (what ``ogb.io.DatasetSaver`` writes, as ogbn-papers100M ships) round-trips exactly."""

import contextlib
import io
import os
import shutil
import zipfile

import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain.errors import DatasetError

ogb_io = pytest.importorskip("ogb.io")

N, E, DIM, CLASSES = 300, 2500, 16, 5


def _save_with_ogb(root, seed=0):
    """A node-property dataset written by the ogb package itself; returns (folder, edge_index, feats, labels, split)."""
    rng = np.random.default_rng(seed)
    edge_index = rng.integers(0, N, size=(2, E))
    feats = rng.standard_normal((N, DIM)).astype(np.float32)
    labels = rng.integers(0, CLASSES, size=(N, 1)).astype(np.float32)
    perm = rng.permutation(N)
    split = {"train": np.sort(perm[:150]), "valid": np.sort(perm[150:200]), "test": np.sort(perm[200:260])}
    labels[perm[260:]] = np.nan  # papers100M style: nodes outside every split have no label
    mapping = root / "mapping_src"
    mapping.mkdir(parents=True)
    (mapping / "README.md").write_text("ids\n")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        saver = ogb_io.DatasetSaver("ogbn-toy", is_hetero=False, version=2, root=str(root / "sub"))
        saver.save_graph_list([{"edge_index": edge_index, "num_nodes": N, "node_feat": feats, "edge_feat": None}])
        saver.save_target_labels(labels)
        saver.save_split(split, "time")
        saver.copy_mapping_dir(str(mapping))
        saver.save_task_info("multiclass classification", "acc", num_classes=CLASSES)
        saver.get_meta_dict()
    return root / "sub_ogbn_toy" / "toy", edge_index, feats, labels, split


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return _save_with_ogb(tmp_path_factory.mktemp("ogb"))


def test_datasetsaver_folder_round_trips_exactly(saved, tmp_path):
    from ogb.io.read_graph_raw import read_binary_graph_raw

    folder, edge_index, feats, labels, split = saved
    assert (folder / "raw" / "data.npz").is_file() and (folder / "RELEASE_v2.txt").is_file()
    ref = read_binary_graph_raw(str(folder / "raw"))[0]  # ogb's own reader is the reference
    ds = st.datasets.from_ogb(folder, tmp_path / "out", quiet=True)

    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (N, E, DIM, CLASSES)
    assert ds.directed
    src, dst = ref["edge_index"]
    order = np.lexsort((src, dst))  # CSC: by destination, then source; duplicates kept as stored
    assert np.array_equal(ds.graph.indices.numpy(), src[order])
    assert np.array_equal(ds.graph.indptr.numpy(), np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=N))]))
    assert ds.features.dtype == torch.float32
    assert np.array_equal(ds.features.numpy(), ref["node_feat"])
    ogb_labels = np.load(folder / "raw" / "node-label.npz")["node_label"].reshape(-1)
    assert np.array_equal(ds.labels.numpy(), np.where(np.isnan(ogb_labels), -1, ogb_labels).astype(np.int64))
    ogb_split = torch.load(folder / "split" / "time" / "split_dict.pt", weights_only=False)
    for ours, theirs in [("train", "train"), ("val", "valid"), ("test", "test")]:
        assert np.array_equal(ds.split[ours].numpy(), np.sort(ogb_split[theirs]))
    assert ds.meta["source"]["layout"] == "binary" and ds.meta["source"]["split"] == "time"
    assert ds.meta["source"]["release"] == "2" and ds.meta["source"]["mapping"] is True
    assert "splits_from" not in ds.meta
    st.datasets.load(tmp_path / "out", verify=True)


def test_split_folder_is_chosen_by_name_and_random_only_on_request(saved, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(saved[0], folder)
    labels = np.load(folder / "raw" / "node-label.npz")["node_label"].reshape(-1)
    labelled = np.flatnonzero(~np.isnan(labels))
    other = {"train": labelled[:10], "valid": labelled[10:20], "test": labelled[20:30]}
    (folder / "split" / "alt").mkdir()
    torch.save(other, folder / "split" / "alt" / "split_dict.pt")
    ds = st.datasets.from_ogb(folder, tmp_path / "alt", split="alt", quiet=True)
    assert np.array_equal(ds.split["val"].numpy(), labelled[10:20])

    ds = st.datasets.from_ogb(folder, tmp_path / "rand", split="random", quiet=True)
    chosen = np.concatenate([ds.split[k].numpy() for k in ("train", "val", "test")])
    assert len(chosen) == len(labelled) and set(chosen) == set(labelled)  # only labelled nodes, each once
    assert ds.meta["splits_from"]["random"] == [0.6, 0.2, 0.2]

    shutil.rmtree(folder / "split")
    with pytest.raises(DatasetError, match=r"split: no split folder.*--split random"):
        st.datasets.from_ogb(folder, tmp_path / "none", quiet=True)
    assert not (tmp_path / "none").exists()


def _rewrite_npz(path, **changes):
    arrays = dict(np.load(path))
    arrays.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del arrays[key]
    np.savez_compressed(path, **arrays)


def _truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


def _bad_split(folder):
    path = folder / "split" / "time" / "split_dict.pt"
    split = torch.load(path, weights_only=False)
    del split["valid"]
    torch.save(split, path)


BAD = {
    "truncated data.npz": (lambda f: _truncate(f / "raw" / "data.npz"), ["data.npz", "truncated or damaged"]),
    "edge_index of shape [3, E]": (
        lambda f: _rewrite_npz(f / "raw" / "data.npz", edge_index=np.zeros((3, 10), np.int64)),
        ["data.npz[edge_index]", "[3, 10]", "[2, num_edges]"],
    ),
    "node id out of range": (
        lambda f: _rewrite_npz(f / "raw" / "data.npz", edge_index=np.array([[0, 1, N + 7], [1, 2, 3]])),
        ["data.npz[edge_index]", "edge 2", f"node id {N + 7}", f"[0, {N})"],
    ),
    "NaN feature": (
        lambda f: _rewrite_npz(
            f / "raw" / "data.npz",
            node_feat=np.where(np.arange(N * DIM).reshape(N, DIM) == 37, np.nan, 1.0).astype(np.float32),
        ),
        ["data.npz[node_feat]", "row 2", "column 5", "nan"],
    ),
    "features of the wrong row count": (
        lambda f: _rewrite_npz(f / "raw" / "data.npz", node_feat=np.ones((N - 1, DIM), np.float32)),
        ["data.npz[node_feat]", f"{N - 1} rows", f"{N} nodes"],
    ),
    "no node_feat": (
        lambda f: _rewrite_npz(f / "raw" / "data.npz", node_feat=None),
        ["data.npz", "no node_feat", "features are missing"],
    ),
    "no node-label.npz": (lambda f: (f / "raw" / "node-label.npz").unlink(), ["node-label.npz", "missing", "labels"]),
    "split without valid": (_bad_split, ["split_dict.pt", "'valid'"]),
    "no split folder": (lambda f: shutil.rmtree(f / "split"), ["split", "no split folder", "--split random"]),
    "truncated split_dict.pt": (
        lambda f: _truncate(f / "split" / "time" / "split_dict.pt"),
        ["split_dict.pt", "cannot be read"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_binary_folder_is_one_clear_line_and_writes_nothing(cli, saved, tmp_path, case):
    damage, expected = BAD[case]
    folder = tmp_path / "ogb"
    shutil.copytree(saved[0], folder)
    damage(folder)
    out = tmp_path / "out"
    code, _, stderr = cli("preprocess", "--ogb", folder, "--out", out, "--quiet")
    assert code == 1
    message = stderr.strip()
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_uncompressed_npz_and_cli_split_random(cli, saved, tmp_path):
    folder = tmp_path / "ogb"
    shutil.copytree(saved[0], folder)
    arrays = dict(np.load(folder / "raw" / "data.npz"))
    np.savez(folder / "raw" / "data.npz", **arrays)  # stored, not deflated
    with zipfile.ZipFile(folder / "raw" / "data.npz") as z:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    code, _, stderr = cli("preprocess", "--ogb", folder, "--split", "random", "--out", tmp_path / "out", "--quiet")
    assert code == 0, stderr
    ds = st.datasets.load(tmp_path / "out")
    assert np.array_equal(ds.features.numpy(), arrays["node_feat"])
    assert ds.num_edges == E
