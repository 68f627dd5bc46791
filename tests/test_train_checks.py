"""`sparsetrain train` never trains on data it has not checked: altered files, NaN/inf features, labels out of range,
a diverging loss; each is one line and exit code 1."""

import hashlib
import json

import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain.engine import dataset_checks
from sparsetrain.engine.stages.fetch import TENSOR, check_finite
from sparsetrain.errors import DatasetError

TINY = ["--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--quiet"]


@pytest.fixture
def tiny(tmp_path):
    return st.datasets.synthesize(tmp_path / "tiny", 400, 3200, feature_dim=8, num_classes=3, seed=0, quiet=True).path


def _write_into(path, rows_cols, value):
    array = np.load(path, mmap_mode="r+")
    for r, c in rows_cols:
        array[r, c] = value
    array.flush()


def _resign(folder, name):
    """Record the file's new sha256 in meta.json, as a careless tool would."""
    meta = json.loads((folder / "meta.json").read_text())
    meta["files"][name]["sha256"] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "meta.json").write_text(json.dumps(meta))


def _one_line_error(code, err):
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err


def test_a_nan_written_after_import_is_caught_by_the_checksum_of_a_small_file(cli, tiny):
    _write_into(tiny / "features.npy", [(5, 3)], np.nan)
    code, _, err = cli("train", "--data", tiny, "--epochs", "1", *TINY)
    _one_line_error(code, err)
    assert "features.npy: sha256 does not match" in err and "sparsetrain preprocess" in err


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_large_file_is_guarded_per_batch_naming_the_file_and_rows(cli, tiny, monkeypatch, value):
    monkeypatch.setattr(dataset_checks, "SMALL_FILE_BYTES", 0)  # as if features.npy were too large to hash at open
    bad_rows = [5, 77, 301]
    _write_into(tiny / "features.npy", [(r, r % 8) for r in bad_rows], value)
    every_neighbor = ["--fanout", "-1,-1", *TINY[2:]]
    code, _, err = cli("train", "--data", tiny, "--epochs", "1", *every_neighbor)
    _one_line_error(code, err)
    features = np.load(tiny / "features.npy")
    expected = np.flatnonzero(~np.isfinite(features).all(axis=1))
    assert list(expected) == bad_rows
    named = err.split(": rows ")[1].split(" hold")[0]
    assert f"{tiny / 'features.npy'}: rows" in err
    assert set(int(i) for i in named.split(", ")) <= set(bad_rows)


def test_verify_checks_every_file_whatever_its_size(cli, tiny, monkeypatch):
    monkeypatch.setattr(dataset_checks, "SMALL_FILE_BYTES", 0)
    indices = np.load(tiny / "indices.npy", mmap_mode="r+")
    indices[0] = (indices[0] + 1) % 400  # a valid id, so no per-batch check can see it
    indices.flush()
    code, _, err = cli("train", "--data", tiny, "--epochs", "1", "--verify", *TINY)
    _one_line_error(code, err)
    assert "indices.npy" in err and "sha256" in err


def test_a_file_with_bytes_appended_is_refused(tiny):
    with open(tiny / "labels.npy", "ab") as f:
        f.write(b"\0" * 8)
    meta = json.loads((tiny / "meta.json").read_text())
    with pytest.raises(DatasetError, match="labels.npy: .* bytes where its header describes"):
        dataset_checks.check_files(tiny, meta, small_file_bytes=0)


def test_labels_outside_the_classes_are_one_line_naming_the_nodes(cli, tiny):
    labels = np.load(tiny / "labels.npy")
    train = np.load(tiny / "train_idx.npy")
    labels[train[[2, 9]]] = [7, -1]
    np.save(tiny / "labels.npy", labels)
    _resign(tiny, "labels.npy")
    code, _, err = cli("train", "--data", tiny, "--epochs", "1", *TINY)
    _one_line_error(code, err)
    assert "labels.npy: 2 train node(s) have a label outside [0, 3)" in err
    assert f"node {train[2]}: 7" in err and f"node {train[9]}: -1" in err


def test_check_finite_names_the_rows_numpy_finds():
    x = torch.randn(1000, 16)
    x[[3, 500, 999], [0, 7, 15]] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    ids = torch.arange(1000) * 10 + 1
    with pytest.raises(DatasetError) as info:
        check_finite(x, ids, x)
    expected = ids[np.flatnonzero(~np.isfinite(x.numpy()).all(axis=1))]
    named = ", ".join(map(str, expected.tolist()))
    assert f"{TENSOR}: rows {named} hold NaN or inf (3 of the 1000 rows" in str(info.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_check_finite_accepts_large_finite_values_and_ignores_integers(dtype):
    big = torch.full((4096, 64), torch.finfo(dtype).max, dtype=dtype)  # a sum would overflow; min/max does not
    check_finite(big, torch.arange(4096), big)
    check_finite(torch.arange(10).view(5, 2), torch.arange(5), None)
    bad = big.clone()
    bad[17, 3] = float("nan")
    with pytest.raises(DatasetError, match="rows 17 hold NaN"):
        check_finite(bad, torch.arange(4096), bad)


def test_trainer_refuses_class_targets_out_of_range_naming_the_seeds():
    graph = st.CSCGraph.from_edge_index(torch.randint(0, 50, (2, 400), generator=torch.Generator().manual_seed(0)), 50)
    labels = torch.arange(50) % 3
    labels[[4, 11]] = torch.tensor([3, -2])
    loader = st.Loader(st.NeighborSampler(graph, [3]), torch.randn(50, 4), labels, torch.arange(50), batch_size=50,
                       shuffle=False)
    model = st.GraphSAGE(4, 8, 3, num_layers=1)
    trainer = st.Trainer(
        model, loader, torch.optim.Adam(model.parameters()), epochs=1, report=st.engine.ReportSettings(quiet=True)
    )
    says = r"2 seed\(s\) of the batch of step 1 have a label outside \[0, 3\).*nodes 4 \(label 3\), 11 \(label -2\)"
    with pytest.raises(DatasetError, match=says):
        trainer.fit()


def test_a_diverging_loss_is_one_line_naming_the_step(cli, tiny):
    code, _, err = cli("train", "--data", tiny, "--epochs", "3", "--lr", "1e30", *TINY)
    _one_line_error(code, err)
    assert "the loss became" in err and "at step" in err and "--lr" in err


@pytest.fixture(scope="module")
def link_folder(tmp_path_factory):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    out = tmp_path_factory.mktemp("link") / "link"
    data = Data(
        edge_index=torch.randint(0, 200, (2, 1600), generator=g), x=torch.randn(200, 4, generator=g), num_nodes=200
    )
    st.datasets.from_pyg(data, out, link_split=(0.8, 0.1, 0.1), link_negatives=5, quiet=True)
    return out


def _edit_meta(folder, edit):
    meta = json.loads((folder / "meta.json").read_text())
    edit(meta)
    (folder / "meta.json").write_text(json.dumps(meta))


def _set_entry(folder, name, entry, value):
    array = np.load(folder / name, mmap_mode="r+")
    array.reshape(-1)[entry] = value
    array.flush()
    _resign(folder, name)


LINK_DAMAGE = {
    "no val split": (
        lambda f: _edit_meta(f, lambda m: m["link_split"].pop("val")),
        "meta.json: lists no 'val' link split",
    ),
    "no test split": (
        lambda f: _edit_meta(f, lambda m: m["link_split"].pop("test")),
        "meta.json: lists no 'test' link split",
    ),
    "no val negatives": (
        lambda f: _edit_meta(f, lambda m: m["link_split"]["val"].update(neg=None, neg_per_pos=None)),
        "no val negatives to rank the val edges against",
    ),
    "val edge past the nodes": (
        lambda f: _set_entry(f, "link_val_pos.npy", 0, 999),
        "link_val_pos.npy: entry 0 is node 999, which must be in [0, 200)",
    ),
    "negative id in test negatives": (
        lambda f: _set_entry(f, "link_test_neg.npy", 7, -3),
        "link_test_neg.npy: entry 7 is node -3, which must be in [0, 200)",
    ),
    "val file missing": (lambda f: (f / "link_val_pos.npy").unlink(), "link_val_pos.npy: missing"),
}


@pytest.mark.parametrize("damage", list(LINK_DAMAGE))
def test_a_link_folder_without_usable_val_or_test_edges_is_one_line(cli, link_folder, tmp_path, damage):
    import shutil

    folder = tmp_path / "link"
    shutil.copytree(link_folder, folder)
    edit, says = LINK_DAMAGE[damage]
    edit(folder)
    code, _, err = cli("train", "--task", "link", "--data", folder, "--epochs", "1", *TINY)
    _one_line_error(code, err)
    assert says in err


def test_a_link_split_without_edges_is_refused(link_folder):
    from sparsetrain.datasets.edge_split import EdgeSplit

    ds = st.datasets.load(link_folder)
    dataset_checks.check_link_splits(ds)
    ds.edge_split["test"] = EdgeSplit(torch.zeros(2, 0, dtype=torch.int64), ds.edge_split["test"].neg, None)
    with pytest.raises(DatasetError, match="link_test_pos.npy: holds no test edges; .*larger --link-split"):
        dataset_checks.check_link_splits(ds)


@pytest.fixture(scope="module")
def typed_folder(tmp_path_factory):
    from sparsetrain.datasets import synthesize

    return synthesize(tmp_path_factory.mktemp("mag") / "mag", typed=True, scale=0.001, num_classes=4, feature_dim=8,
                      seed=0, split_fractions=(0.5, 0.2, 0.2), quiet=True).path


@pytest.fixture(scope="module")
def part_split(tmp_path_factory):
    """A homogeneous dataset whose split leaves some labelled nodes out."""
    return st.datasets.synthesize(tmp_path_factory.mktemp("part") / "part", 400, 3200, feature_dim=8, num_classes=3,
                                  split_fractions=(0.5, 0.2, 0.2), seed=0, quiet=True).path


def _copy(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / folder.name)


def _entry_of_type(folder, et_index, offset):
    """The entry of indices.npy ``offset`` edges into edge type ``et_index``'s edges, and that edge type's source
    type."""
    meta = json.loads((folder / "meta.json").read_text())
    start = sum(entry["num_edges"] for entry in meta["edge_types"][:et_index])
    return start + offset, meta["edge_types"][et_index]["src"], meta["node_types"]


@pytest.mark.parametrize("kind", ["homogeneous", "typed"])
@pytest.mark.parametrize("bad", ["past the nodes", "negative"])
def test_a_resigned_graph_with_ids_outside_the_nodes_is_refused_at_open(cli, tiny, typed_folder, tmp_path, kind, bad):
    """Every entry is checked (one min/max per edge type), not only those the sampler draws: in the typed graph the
    first edge type's edges (author -> institution) are never sampled from paper seeds in two hops."""
    folder = tiny if kind == "homogeneous" else _copy(typed_folder, tmp_path)
    if kind == "homogeneous":
        entry, what, count = 5, "node", 400
    else:
        entry, src, counts = _entry_of_type(folder, 0, 3)
        what, count = f"{src!r} node", counts[src]
    value = count + 7 if bad == "past the nodes" else -1
    _set_entry(folder, "indices.npy", entry, value)
    code, _, err = cli("train", "--data", folder, "--epochs", "1", *TINY)
    _one_line_error(code, err)
    assert f"indices.npy: entry {entry} is {what} {value}, which must be in [0, {count})" in err
    code, _, info_err = cli("info", folder)
    assert code == 1 and err == info_err  # the same line as `sparsetrain info`


@pytest.mark.parametrize("kind", ["homogeneous", "typed"])
@pytest.mark.parametrize("value", [-5, 1000])
def test_a_resigned_label_outside_the_classes_is_refused_even_off_the_splits(cli, part_split, typed_folder, tmp_path,
                                                                            kind, value):
    folder = _copy(part_split if kind == "homogeneous" else typed_folder, tmp_path)
    meta = json.loads((folder / "meta.json").read_text())
    target = meta["target_type"]
    name = meta["labels"][target]["file"]
    split = np.concatenate([np.load(folder / f"{s}_idx.npy") for s in ("train", "val", "test")])
    labels = np.load(folder / name)
    outside = np.setdiff1d(np.arange(len(labels)), split)
    _set_entry(folder, name, int(outside[0]), value)
    code, _, err = cli("train", "--data", folder, "--epochs", "1", *TINY)
    _one_line_error(code, err)
    classes = meta["labels"][target]["num_classes"]
    assert f"{name}: entry {outside[0]} is label {value}, which must be in [-1, {classes})" in err


def test_graph_and_label_bounds_cost_one_pass(tiny, monkeypatch):
    """The open-time bounds checks read each array once, vectorised: no per-entry Python loop (check_range, which
    names the entry, runs only once something is out of bounds)."""
    calls = []
    monkeypatch.setattr(dataset_checks, "check_range", lambda *a, **k: calls.append(a))
    ds = st.datasets.load(tiny)
    dataset_checks.check_graph_ids(ds.graph)
    dataset_checks.check_label_values(ds)
    assert calls == []


@pytest.mark.parametrize("kind", ["homogeneous", "typed"])
def test_an_empty_val_or_test_split_is_refused_at_train_start(cli, tmp_path, kind):
    """Import takes an empty .npy for a part the user does not have; training would then report a NaN accuracy."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "edges.npy", rng.integers(0, 60, (2, 300)))
    np.save(tmp_path / "x.npy", rng.standard_normal((60, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, 60))
    np.save(tmp_path / "train.npy", np.arange(40))
    np.save(tmp_path / "val.npy", np.arange(40, 60))
    np.save(tmp_path / "empty.npy", np.zeros(0, np.int64))
    if kind == "homogeneous":
        graph = ["--edges", tmp_path / "edges.npy", "--features", tmp_path / "x.npy", "--labels", tmp_path / "y.npy"]
    else:
        graph = ["--typed-edges", f"paper,cites,paper={tmp_path / 'edges.npy'}",
                 "--node-features", f"paper={tmp_path / 'x.npy'}", "--node-labels", f"paper={tmp_path / 'y.npy'}"]
    out = tmp_path / "ds"
    code, _, err = cli("preprocess", *graph, "--train-idx", tmp_path / "train.npy", "--val-idx", tmp_path / "val.npy",
                       "--test-idx", tmp_path / "empty.npy", "--out", out, "--quiet")
    assert code == 0, err
    code, _, err = cli("train", "--data", out, "--epochs", "1", *TINY)
    _one_line_error(code, err)
    assert "test_idx.npy: holds no nodes, so training has no test accuracy to report" in err
