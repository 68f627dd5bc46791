"""Reliability, round five's own adversarial pass (issue 48) over the round's new code: the ``train --config`` file,
``predict`` / ``load_model``, ``plot`` and the metrics log's CSV twin, ``--patience`` / ``--tensorboard``, the DGL-style
loader, typed partitions. Each case ends in one line naming the problem and its fix (exit status 1 from the CLI), or in
the right behaviour, and nothing already written is lost: the data folders' and users' files are compared byte for
byte before and after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsetrain.datasets import load, synthesize
from sparsetrain.dgl import DataLoader, DGLNeighborSampler
from sparsetrain.engine.plot import read_records
from sparsetrain.engine.predict import predict
from sparsetrain.engine.run import train
from sparsetrain.engine.run_config import read_config
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.errors import SettingError, SparsetrainError
from sparsetrain.partition import PartitionOptions, partition_dataset


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """``d``: a 200-node dataset (4 features, 3 classes); ``d6``: another, 6 features; ``run``: one epoch of
    GraphSAGE on ``d`` with checkpoints and a metrics log; ``tp``: the typed synthetic graph in 2 parts."""
    root = tmp_path_factory.mktemp("r5new")
    synthesize(root / "d", 200, 2000, feature_dim=4, num_classes=3, seed=1, quiet=True)
    synthesize(root / "d6", 200, 2000, feature_dim=6, num_classes=3, seed=2, quiet=True)
    summary = train(TrainSettings(data=root / "d", epochs=1, fanouts=[4, 4], batch_size=64,
                                  checkpoint_dir=root / "run", log=root / "run" / "m.jsonl", quiet=True))
    (root / "test_acc.json").write_text(json.dumps(summary["test_acc"]))
    synthesize(root / "t", typed=True, scale=0.0005, quiet=True)
    partition_dataset(root / "t", root / "tp", PartitionOptions(2, quiet=True))
    return root


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(code, err: str, *words: str) -> str:
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def _resign(path: Path) -> None:
    """Rewrite a checkpoint's ``.sha256`` for its edited content (a tamperer who re-signs)."""
    path.with_name(path.name + ".sha256").write_text(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n")


# ---------------------------------------------------------------- the config file

CONFIGS = [
    ("unk.toml", "batch_sise = 5\n", "unknown key 'batch_sise'"),
    ("type.toml", 'batch_size = "big"\n', "batch_size='big': must be an integer"),
    ("float.toml", "batch_size = 5.5\n", "must be an integer"),
    ("bool.toml", "[sampling]\nbatch_size = true\n", "sampling.batch_size=True"),
    ("range.toml", "[sampling]\nbatch_size = 0\n", "batch_size=0"),
    ("seed.toml", "seed = 1e30\n", "must be an integer"),
    ("nan.toml", "lr = nan\n", "lr=nan"),
    ("fanout.toml", 'fanouts = [5, "a"]\n', "fanouts=[5, 'a']"),
    ("twice.toml", "fanout = [3]\nfanouts = [4]\n", "already sets"),
    ("bad.json", '{"batch_size": 4,\n', "not valid JSON"),
    ("list.yaml", "- 1\n", "holds a list"),
    ("bin.toml", b"\xff\xfe", "not valid TOML"),
    ("x.ini", "a=1\n", "unknown format .ini"),
    ("inside.toml", 'checkpoint_dir = "{d}/ck"\nepochs = 1\n', "dataset folder"),
    ("log.toml", 'metrics_log = "{d}/m.jsonl"\n', "dataset folder"),
]


@pytest.mark.parametrize("name, text, words", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_a_hostile_config_is_one_line_and_the_dataset_kept(root, cli, tmp_path, name, text, words):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text.replace("{d}", str(root / "d")))
    before = _digest(root / "d")
    code, _, err = cli("train", "--data", root / "d", "--config", path, "--quiet")
    _one_line(code, err, words)
    assert _digest(root / "d") == before


def test_a_config_key_may_be_the_flags_name(tmp_path):
    """``--fanout`` and ``--metrics-log`` are read from ``fanout`` / ``metrics_log`` as from the fields' names."""
    (tmp_path / "flags.toml").write_text('fanout = [3, 2]\nmetrics_log = "m.jsonl"\n')
    (tmp_path / "fields.toml").write_text('fanouts = [3, 2]\nlog = "m.jsonl"\n')
    (tmp_path / "nested.toml").write_text('[sampling]\nfanouts = [3, 2]\n[report]\nlog = "m.jsonl"\n')
    got = [read_config(tmp_path / f) for f in ("flags.toml", "fields.toml", "nested.toml")]
    assert got[0] == got[1] == got[2]
    assert list(got[0]["fanouts"].values) == [3, 2] and got[0]["log"] == Path("m.jsonl")


# ---------------------------------------------------------------- predict / load_model


def _tampered(root: Path, tmp_path: Path, edit) -> Path:
    run = tmp_path / "run"
    shutil.copytree(root / "run", run)
    state = torch.load(run / "best.pt", weights_only=True)
    state = edit(state)
    torch.save(state, run / "best.pt")
    _resign(run / "best.pt")
    return run


def _set(state, key, value):
    state[key] = value
    return state


def _set_run(state, key, value):
    state["run"][key] = value
    return state


def _nan_weight(state):
    next(iter(state["model"].values())).fill_(float("nan"))
    return state


TAMPERED = [
    ("not-a-dict", lambda s: [1, 2, 3], "records no run settings"),
    ("no-weights", lambda s: {k: v for k, v in s.items() if k != "model"}, "model weights record"),
    ("dataset-int", lambda s: _set_run(s, "dataset", 5), "dataset record"),
    ("model-unknown", lambda s: _set_run(s, "model", "nope"), "recorded settings are not valid (name='nope'"),
    ("hidden-negative", lambda s: _set_run(s, "hidden", -5), "hidden=-5"),
    ("run-a-list", lambda s: _set(s, "run", [1]), "records no run settings"),
    ("nan-weight", _nan_weight, "NaN or infinite"),
]


@pytest.mark.parametrize("name, edit, words", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_a_tampered_resigned_checkpoint_is_one_line(root, cli, tmp_path, name, edit, words):
    run = _tampered(root, tmp_path, edit)
    code, _, err = cli("predict", "--checkpoint", run, "--out", tmp_path / "p.npy")
    _one_line(code, err, "best.pt", words)
    assert not (tmp_path / "p.npy").exists()


@pytest.mark.parametrize("argv, words", [
    (["--out", "{d}/p.npy"], "dataset folder"),
    (["--out", "{d}/meta.json"], "suffix must be one of"),
    (["--out", "{tp}/x.npy"], "partitioned folder"),
    (["--out", "{tp}/part-0/x.npy"], "partitioned folder"),
    (["--out", "{users}/keep.npy"], "already exists; pass --overwrite"),
    (["--out", "{users}/keep.txt/p.npy"], "is a file, not a folder"),
    (["--out", "{tmp}/p.npy", "--device", "tpu"], "--device tpu"),
    (["--out", "{tmp}/p.npy", "--batch-size", "0"], "--batch-size 0"),
    (["--out", "{tmp}/p.npy", "--data", "{tp}"], "is a partitioned folder"),
    (["--out", "{tmp}/p.npy", "--data", "{d6}"], "do not fit the model"),
], ids=["in-dataset", "over-meta", "in-partitioned", "in-part", "existing", "under-file", "device", "batch-size",
        "data-partitioned", "other-dataset"])
def test_predict_outputs_and_arguments(root, cli, tmp_path, argv, words):
    users = tmp_path / "users"
    users.mkdir()
    (users / "keep.npy").write_bytes(b"mine")
    (users / "keep.txt").write_text("mine")
    args = [a.format(d=root / "d", d6=root / "d6", tp=root / "tp", users=users, tmp=tmp_path) for a in argv]
    before = {n: _digest(root / n) for n in ("d", "tp")}
    code, _, err = cli("predict", "--checkpoint", root / "run", *args)
    _one_line(code, err, words)
    assert {n: _digest(root / n) for n in ("d", "tp")} == before
    assert (users / "keep.npy").read_bytes() == b"mine" and (users / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "p.npy").exists()


def test_predict_overwrite_replaces_with_the_reported_predictions(root, cli, tmp_path):
    """``--overwrite`` replaces an existing file with the run's predictions: their test accuracy, computed here in
    NumPy from the file and the dataset's labels, is the one the run reported."""
    out = tmp_path / "p.npy"
    out.write_bytes(b"old")
    code, _, err = cli("predict", "--checkpoint", root / "run", "--out", out, "--overwrite")
    assert code == 0, err
    scores = np.load(out)
    ds = load(root / "d")
    test = np.asarray(ds.split["test"])
    accuracy = (scores[test].argmax(1) == np.asarray(ds.labels)[test]).mean()
    reported = json.loads((root / "test_acc.json").read_text())
    assert scores.shape == (200, 3) and accuracy == pytest.approx(reported, abs=1e-12)


@pytest.mark.parametrize("kwargs, error", [
    ({"batch_size": 2.5}, TypeError), ({"batch_size": 0}, ValueError), ({"embeddings": "no"}, TypeError),
    ({"memory_budget": -1}, ValueError), ({"overwrite": 1}, TypeError), ({"which": "worst"}, ValueError),
    ({"device": "cuda:99"}, ValueError),
], ids=["bs-float", "bs-zero", "embeddings-str", "budget", "overwrite-int", "which", "device"])
def test_predict_arguments_are_checked_when_called(root, tmp_path, kwargs, error):
    with pytest.raises(error) as raised:
        predict(root / "run", tmp_path / "p.npy", **kwargs)
    assert isinstance(raised.value, SparsetrainError) and len(str(raised.value).splitlines()) == 1
    assert not (tmp_path / "p.npy").exists()


def test_embeddings_of_a_one_layer_model_is_one_line(root, tmp_path):
    train(TrainSettings(data=root / "d", epochs=1, fanouts=[3], batch_size=64, checkpoint_dir=tmp_path / "one",
                        quiet=True))
    with pytest.raises(SettingError, match="one layer .*no hidden layer"):
        predict(tmp_path / "one", tmp_path / "e.npy", embeddings=True)


# ---------------------------------------------------------------- plot and the metrics log's twin


@pytest.mark.parametrize("out, words", [
    ("{d}/meta.json", "ending in .png"),
    ("{d}/x.png", "dataset folder"),
    ("{tp}/x.png", "partitioned folder"),
    ("{run}/m.jsonl", "ending in .png"),
    ("{tmp}/dir.png", "is a folder"),
], ids=["over-meta", "in-dataset", "in-partitioned", "over-log", "a-folder"])
def test_plot_never_writes_over_data(root, cli, tmp_path, out, words):
    (tmp_path / "dir.png").mkdir()
    before = {n: _digest(root / n) for n in ("d", "tp", "run")}
    code, _, err = cli("plot", root / "run" / "m.jsonl", "--out",
                       out.format(d=root / "d", tp=root / "tp", run=root / "run", tmp=tmp_path))
    _one_line(code, err, words)
    assert {n: _digest(root / n) for n in ("d", "tp", "run")} == before


@pytest.mark.parametrize("text, words", [
    ("", "holds no loss"), ('{"step": 1, "loss": 0.5}\n{garbled\n', "not a metrics log"), ("[1, 2]\n", "record 1 is a"),
    ("5\n", "record 1 is a"), ('{"step": "x", "loss": "nan"}\n', "holds no loss"),
], ids=["empty", "garbled", "list", "number", "strings"])
def test_plot_of_a_broken_log_is_one_line(cli, tmp_path, text, words):
    (tmp_path / "m.jsonl").write_text(text)
    code, _, err = cli("plot", tmp_path / "m.jsonl")
    _one_line(code, err, words)
    assert not (tmp_path / "m.png").exists()


def test_plot_reads_the_logs_records(root):
    records = read_records(root / "run" / "m.jsonl")
    lines = [json.loads(line) for line in (root / "run" / "m.jsonl").read_text().splitlines() if line.strip()]
    assert records == lines and any("loss" in r for r in records)


@pytest.mark.parametrize("argv, words", [
    (["--metrics-log", "{tmp}/users.jsonl"], "CSV twin"),
    (["--metrics-log", "{tmp}/l.jsonl", "--summary-json", "{tmp}/l.csv"], "CSV twin"),
    (["--metrics-log", "{tmp}/l.jsonl", "--summary-json", "{tmp}/l.jsonl"], "metrics log"),
    (["--tensorboard", "{tmp}/users.csv"], "not a folder"),
    (["--tensorboard", "{d}/tb"], "dataset folder"),
    (["--patience", "0"], "--patience"), (["--patience", "-1"], "--patience"), (["--patience", "1.5"], "--patience"),
], ids=["twin-over-users-csv", "summary-is-twin", "summary-is-log", "tb-a-file", "tb-in-dataset", "patience-0",
        "patience-neg", "patience-float"])
def test_train_report_outputs_keep_every_file(root, cli, tmp_path, argv, words):
    (tmp_path / "users.csv").write_text("id,name\n1,alice\n")
    before = _digest(root / "d")
    args = [a.format(tmp=tmp_path, d=root / "d") for a in argv]
    code, _, err = cli("train", "--data", root / "d", "--epochs", "1", "--quiet", *args)
    _one_line(code, err, words)
    assert (tmp_path / "users.csv").read_text() == "id,name\n1,alice\n" and _digest(root / "d") == before
    assert not (tmp_path / "l.jsonl").exists()


# ---------------------------------------------------------------- the DGL-style loader (no DGL needed to build one)


def _loader(root, **kwargs):
    ds = load(root / "d")
    sampler_kwargs = kwargs.pop("sampler", {})
    indices = kwargs.pop("indices", torch.arange(10))
    return DataLoader(ds, indices, DGLNeighborSampler(kwargs.pop("fanouts", [3, 3]), **sampler_kwargs), **kwargs)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"batch_size": 0}, ValueError, "batch_size=0"),
    ({"batch_size": 2.5}, TypeError, "batch_size=2.5"),
    ({"batch_size": True}, TypeError, "batch_size=True"),
    ({"drop_last": "no"}, TypeError, "drop_last='no'"),
    ({"shuffle": "no"}, TypeError, "shuffle='no'"),
    ({"use_ddp": "yes"}, TypeError, "use_ddp='yes'"),
    ({"sampler": {"replace": "no"}}, TypeError, "replace='no'"),
    ({"sampler": {"prefetch_node_feats": [1]}}, ValueError, "prefetch_node_feats"),
    ({"fanouts": [-2, 5]}, ValueError, "fanouts"),
    ({"fanouts": [2.5, 5]}, ValueError, "fanouts"),
    ({"fanouts": 5}, ValueError, "fanouts=5"),
    ({"indices": "abc"}, ValueError, "indices"),
    ({"indices": torch.tensor([0.0, 1.0])}, ValueError, "indices"),
    ({"indices": torch.ones(200, dtype=torch.bool)}, ValueError, "indices"),
    ({"indices": {"paper": torch.arange(3)}}, ValueError, "no node type 'paper'; key the ids by its node types ['_N']"),
    ({"device": "tpu"}, ValueError, "device='tpu'"),
    ({"bogus": 1}, TypeError, "'bogus'"),
], ids=["bs-0", "bs-float", "bs-bool", "drop-last-str", "shuffle-str", "ddp-str", "replace-str", "prefetch-int",
        "fanout-neg", "fanout-float", "fanout-int", "indices-str", "indices-float", "indices-mask", "indices-type",
        "device", "unknown-kw"])
def test_dgl_loader_arguments_are_checked_when_built(root, kwargs, error, words):
    with pytest.raises(error) as raised:
        _loader(root, **kwargs)
    assert isinstance(raised.value, SparsetrainError) and words in str(raised.value)
    assert len(str(raised.value).splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_dgl_loader_on_a_missing_gpu_is_refused_when_built(root):
    with pytest.raises(ValueError, match="no CUDA device is visible"):
        _loader(root, device="cuda")


def test_dgl_loader_reads_numpy_ints_and_one_prefetch_name(root):
    loader = _loader(root, batch_size=np.int64(4), drop_last=np.bool_(True), sampler={"prefetch_node_feats": "feat"})
    assert len(loader) == 10 // 4 and loader.batch_size == 4 and type(loader.batch_size) is int
    assert loader.settings.prefetch_node_feats == ["feat"]


@pytest.mark.parametrize("indices", [torch.tensor([0, 200]), torch.tensor([-1, 3])], ids=["past-end", "negative"])
def test_dgl_loader_seeds_out_of_range_are_one_line(root, indices):
    loader = _loader(root, indices=indices, batch_size=2)
    with pytest.raises(ValueError, match="outside \\[0, 200\\)"):
        loader._batch(torch.arange(2))


# ---------------------------------------------------------------- typed partitions


def _edited_parts(root: Path, tmp_path: Path, edit) -> Path:
    parts = tmp_path / "tp"
    shutil.copytree(root / "tp", parts)
    edit(parts)
    return parts


def _zero_labels(parts: Path) -> None:
    path = next((parts / "part-0").glob("node.*.labels.npy"))
    array = np.load(path)
    array[:] = 0
    np.save(path, array)


def _drop_type_from_meta(parts: Path) -> None:
    meta = json.loads((parts / "part-0" / "meta.json").read_text())
    meta["node_types"].pop(next(t for t in meta["node_types"] if t != meta["target_type"]))
    (parts / "part-0" / "meta.json").write_text(json.dumps(meta))


def _edit_manifest(parts: Path) -> None:
    manifest = json.loads((parts / "manifest.json").read_text())
    manifest["num_parts"] = 3
    (parts / "manifest.json").write_text(json.dumps(manifest))


EDITS = [
    ("missing-type-file", lambda p: next((p / "part-0").glob("node.*.local_to_global.npy")).unlink(), "missing"),
    ("labels-zeroed", _zero_labels, "sha256 does not match"),
    ("type-dropped", _drop_type_from_meta, "differs from the one the manifest recorded"),
    ("manifest-edited", _edit_manifest, "manifest was edited"),
    ("manifest-garbled", lambda p: (p / "manifest.json").write_text("{"), "not valid JSON"),
]


@pytest.mark.parametrize("verb", ["partition-info", "train"])
@pytest.mark.parametrize("name, edit, words", EDITS, ids=[e[0] for e in EDITS])
def test_a_tampered_typed_partition_is_one_line(root, cli, tmp_path, verb, name, edit, words):
    parts = _edited_parts(root, tmp_path, edit)
    argv = ["partition-info", parts] if verb == "partition-info" else ["train", "--data", parts, "--epochs", "1",
                                                                       "--quiet"]
    code, _, err = cli(*argv)
    _one_line(code, err, words, "re-run `sparsetrain partition`")


# ---------------------------------------------------------------- the IGB importer


def _igb_missing_relation(folder: Path) -> None:
    shutil.rmtree(folder / "author__affiliated_to__institute")


def _igb_edit(path: str, edit):
    def apply(folder: Path) -> None:
        array = np.load(folder / path)
        np.save(folder / path, edit(array))
    return apply


def _set_item(index, value):
    def edit(array):
        array = array.astype(np.float64) if isinstance(value, float) and array.dtype.kind in "iu" else array.copy()
        array[index] = value
        return array
    return edit


def _truncate(path: str, cut: int):
    def apply(folder: Path) -> None:
        data = (folder / path).read_bytes()
        (folder / path).write_bytes(data[: len(data) - cut])
    return apply


IGB_COUNTS = ["--node-count", "paper=40", "--node-count", "author=55"]
IGB_CASES = [
    ("missing-relation", _igb_missing_relation, [], "author__affiliated_to__institute/edge_index.npy: missing"),
    ("nan-feature", _igb_edit("author/node_feat.npy", _set_item((3, 1), np.nan)), [], "row 3, column 1: nan"),
    ("wrong-count", lambda f: None, ["--node-count", "paper=41", "--node-count", "author=55"], "has 40 rows"),
    ("default-count", lambda f: None, None, "IGBH has 100000 paper nodes"),
    ("truncated-npy", _truncate("fos/node_feat.npy", 10), [], "not a readable .npy file"),
    ("garbage-npy", lambda f: (f / "fos" / "node_feat.npy").write_bytes(b"garbage"), [], "has no .npy header"),
    ("label-too-big", _igb_edit("paper/node_label_19.npy", _set_item(0, 25)), [], "label 25 must be in [0, 19)"),
    ("label-negative", _igb_edit("paper/node_label_19.npy", _set_item(0, -5)), [], "label -5"),
    ("label-fraction", _igb_edit("paper/node_label_19.npy", _set_item(0, 2.5)), [], "2.5 is not an integer"),
    ("labels-short", _igb_edit("paper/node_label_19.npy", lambda a: a[:-3]), [], "has 37 rows"),
    ("edge-past-end", _igb_edit("paper__cites__paper/edge_index.npy", _set_item((0, 1), 10**6)), [],
     "node id 1000000"),
    ("edge-negative", _igb_edit("author__affiliated_to__institute/edge_index.npy", _set_item((0, 0), -1)), [],
     "node id -1"),
    ("edge-3-columns", _igb_edit("paper__topic__fos/edge_index.npy", lambda a: np.concatenate([a, a[:, :1]], 1)),
     [], "shape [num_edges, 2]"),
    ("edge-floats", _igb_edit("paper__topic__fos/edge_index.npy", lambda a: a.astype(np.float64)), [],
     "integer array"),
    ("features-1d", _igb_edit("fos/node_feat.npy", lambda a: a[:, 0]), [], "of shape [num_fos_nodes, dim]"),
    ("count-negative", lambda f: None, ["--node-count", "paper=-4"], "--node-count paper=-4"),
    ("count-unknown-type", lambda f: None, ["--node-count", "nope=4"], "no node type 'nope'"),
    ("add-reverse", lambda f: None, ["--add-reverse"], "--add-reverse does not apply"),
]


@pytest.mark.parametrize("name, edit, extra, words", IGB_CASES, ids=[c[0] for c in IGB_CASES])
def test_a_broken_igb_folder_is_one_line(cli, tmp_path, name, edit, extra, words):
    from tests.test_igb import write_igb

    write_igb(tmp_path / "igb")
    edit(tmp_path / "igb" / "tiny" / "processed")
    before = _digest(tmp_path / "igb")
    counts = [] if extra is None else (IGB_COUNTS if not any(a.startswith("--node-count") for a in extra) else [])
    code, _, err = cli("preprocess", "--igb", tmp_path / "igb", "--out", tmp_path / "out", *counts, *(extra or []),
                       "--quiet")
    _one_line(code, err, words)
    assert _digest(tmp_path / "igb") == before and not (tmp_path / "out").exists()


def test_a_headerless_igb_file_of_the_wrong_size_is_one_line(cli, tmp_path):
    from tests.test_igb import write_igb

    write_igb(tmp_path / "igb", "large", headerless=True)
    _truncate("paper/node_feat.npy", 4)(tmp_path / "igb" / "large" / "processed")
    code, _, err = cli("preprocess", "--igb", tmp_path / "igb", "--size", "large", "--out", tmp_path / "out",
                       *IGB_COUNTS, "--quiet")
    _one_line(code, err, "is not 40 rows of headerless float32")


# ---------------------------------------------------------------- R-GAT


@pytest.mark.parametrize("argv, words", [
    (["--data", "{d}", "--model", "rgat"], "homogeneous dataset"),
    (["--data", "{t}", "--model", "rgat", "--step", "static"], "--step static"),
    (["--data", "{t}", "--model", "rgat", "--fuse-last-hop"], "--fuse-last-hop"),
    (["--data", "{t}", "--model", "rgat", "--task", "link"], "--task link"),
], ids=["homogeneous", "static", "fused", "link"])
def test_rgat_where_it_does_not_apply_is_one_line(root, cli, argv, words):
    code, _, err = cli("train", *[a.format(d=root / "d", t=root / "t") for a in argv], "--epochs", "1", "--quiet")
    _one_line(code, err, words)


def test_predict_of_an_rgat_run_on_the_wrong_dataset_is_one_line(root, cli, tmp_path):
    train(TrainSettings(data=root / "t", model="rgat", epochs=1, fanouts=[2, 2], batch_size=256,
                        checkpoint_dir=tmp_path / "rgat", quiet=True))
    code, _, err = cli("predict", "--checkpoint", tmp_path / "rgat", "--data", root / "d", "--out", tmp_path / "p.npy")
    _one_line(code, err, "settings do not fit", "give the dataset the run trained on")
    code, _, err = cli("predict", "--checkpoint", tmp_path / "rgat", "--out", tmp_path / "p.npy", "--embeddings")
    _one_line(code, err, "--embeddings")
    code, _, err = cli("predict", "--checkpoint", root / "run", "--data", root / "t", "--out", tmp_path / "p.npy")
    _one_line(code, err, "settings do not fit")
    assert not (tmp_path / "p.npy").exists()


@pytest.mark.parametrize("text, words", [
    ("fanouts = []\n", "--fanout: no hop given"),
    ('fanouts = {"nope,x,y" = [3]}\n', "edge type ('nope', 'x', 'y')"),
    ("data = 5\n", "data=5"),
    ('resume = "yes"\n', "resume='yes'"),
    ("[model]\nquiet = true\n", "unknown key model.quiet"),
    ("model = {name = 5}\n", "model.name=5"),
    ("fanouts = [3, 99999999999]\n", "99999999999"),
], ids=["no-hop", "edge-type-on-homogeneous", "data-int", "resume-str", "key-in-wrong-part", "name-int", "huge"])
def test_more_hostile_configs_are_one_line(root, cli, tmp_path, text, words):
    (tmp_path / "c.toml").write_text(text)
    code, _, err = cli("train", "--data", root / "d", "--config", tmp_path / "c.toml", "--epochs", "1", "--quiet")
    _one_line(code, err, words)


@pytest.mark.dgl
@pytest.mark.parametrize("sampler_kwargs, words", [
    ({"prefetch_node_feats": ["feat"]}, "has no such node data"),
    ({"prefetch_labels": ["label"]}, "has no such node data"),
    ({"prefetch_edge_feats": ["w"]}, "has no such edge data"),
], ids=["node", "label", "edge"])
def test_dgl_prefetch_of_data_the_dgl_graph_lacks_is_one_line(sampler_kwargs, words):
    dgl = pytest.importorskip("dgl")
    g = dgl.graph((torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0])), num_nodes=5)
    loader = DataLoader(g, torch.tensor([0, 1]), DGLNeighborSampler([2], **sampler_kwargs), batch_size=2)
    with pytest.raises(ValueError, match=words):
        next(iter(loader))


@pytest.mark.parametrize("epochs", ["1000001", str(10**20)])
def test_epochs_past_the_bound_is_one_line(root, cli, epochs):
    code, _, err = cli("train", "--data", root / "d", "--epochs", epochs, "--quiet")
    _one_line(code, err, "--epochs", "at most 1,000,000")


def test_predict_from_another_directory_finds_a_relative_dataset(root, cli, tmp_path, monkeypatch):
    """A run given ``--data d`` relative to its directory records the dataset's absolute path, so ``predict`` from
    elsewhere needs no ``--data``; its predictions score the run's test accuracy."""
    monkeypatch.chdir(root)
    summary = train(TrainSettings(data=Path("d"), epochs=1, fanouts=[4, 4], batch_size=64,
                                  checkpoint_dir=tmp_path / "rel", quiet=True))
    monkeypatch.chdir(tmp_path)
    result = predict(tmp_path / "rel", tmp_path / "p.npy")
    assert result["test_acc"] == pytest.approx(summary["test_acc"])
