import json

import numpy as np
import pytest
import torch

import sparsetrain as st
from tests.conftest import run_module


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return st.datasets.synthesize(
        tmp_path_factory.mktemp("s") / "g", 5000, 100_000, feature_dim=32, num_classes=10, seed=3, quiet=True
    )


def test_exact_sizes_undirected_and_clean(synth):
    g = synth.graph
    assert (synth.num_nodes, synth.num_edges, synth.num_features, synth.num_classes) == (5000, 100_000, 32, 10)
    col = torch.repeat_interleave(torch.arange(g.num_nodes), g.in_degrees())
    rows = g.indices.long()
    assert not torch.any(rows == col), "self loops"
    keys = rows * g.num_nodes + col
    assert keys.unique().numel() == keys.numel(), "duplicate edges"
    assert torch.equal(keys.sort().values, (col * g.num_nodes + rows).sort().values), "not symmetric"
    assert synth.meta["directed"] is False


def test_degrees_are_heavy_tailed(synth):
    deg = synth.graph.in_degrees().double()
    assert deg.max() > 8 * deg.mean()
    assert deg.median() < deg.mean()


def test_same_seed_same_bytes(synth, tmp_path):
    again = st.datasets.synthesize(
        tmp_path / "again", 5000, 100_000, feature_dim=32, num_classes=10, seed=3, quiet=True
    )
    other = st.datasets.synthesize(
        tmp_path / "other", 5000, 100_000, feature_dim=32, num_classes=10, seed=4, quiet=True
    )
    def files(ds):
        return {k: v["sha256"] for k, v in ds.meta["files"].items()}
    assert files(again) == files(synth)
    assert files(other)["indices.npy"] != files(synth)["indices.npy"]


def _nearest_centroid_accuracy(x, y, train, test, classes):
    centroids = torch.stack([x[train][y[train] == c].mean(0) for c in range(classes)])
    pred = torch.cdist(x[test], centroids).argmin(1)
    return (pred == y[test]).double().mean().item()


def test_labels_are_learnable_and_the_graph_helps(synth):
    x, y = synth.features.tensor().double(), synth.labels
    train, test = synth.split["train"], synth.split["test"]
    g = synth.graph
    col = torch.repeat_interleave(torch.arange(g.num_nodes), g.in_degrees())
    neigh = (
        torch.zeros_like(x).index_add_(0, col, x[g.indices.long()]) / g.in_degrees().clamp(min=1).unsqueeze(1).double()
    )
    chance = 1 / synth.num_classes
    alone = _nearest_centroid_accuracy(x, y, train, test, synth.num_classes)
    with_graph = _nearest_centroid_accuracy(torch.cat([x, neigh], 1), y, train, test, synth.num_classes)
    assert alone > 2 * chance
    assert with_graph > alone + 0.1
    assert with_graph > 6 * chance


def test_homophily(synth):
    g = synth.graph
    col = torch.repeat_interleave(torch.arange(g.num_nodes), g.in_degrees())
    same = (synth.labels[g.indices.long()] == synth.labels[col]).double().mean().item()
    assert same > 0.6


@pytest.mark.parametrize("verb", ["preprocess", "synth", "info"])
def test_every_verb_has_help(cli, verb):
    code, out, _ = cli(verb, "--help")
    assert code == 0 and "usage: sparsetrain " + verb in out


def test_cli_synth_then_info(cli, tmp_path):
    out = tmp_path / "demo"
    code, stdout, _ = cli(
        "synth", "--nodes", 2000, "--edges", 20000, "--feature-dim", 8, "--classes", 5, "--reorder", "degree", "--out",
        out,
    )
    assert code == 0 and "2000 nodes, 20000 edges" in stdout
    code, stdout, _ = cli("info", out)
    assert code == 0
    assert "nodes        2,000" in stdout and "edges        20,000" in stdout
    assert "checksums    all" in stdout and "reordered    by degree" in stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["permutation"]["file"] == "original_ids.npy"


def test_cli_odd_edge_count_is_a_clear_error(cli, tmp_path):
    code, _, stderr = cli("synth", "--nodes", 100, "--edges", 101, "--out", tmp_path / "x")
    assert code != 0 and "even" in stderr and not (tmp_path / "x").exists()


def test_python_dash_m_matches_console_script(tmp_path):
    result = run_module("--version")
    assert result.returncode == 0 and result.stdout.startswith("sparsetrain ")


def test_preprocess_from_an_ogb_folder_via_cli(cli, tmp_path):
    import gzip

    raw = tmp_path / "ogbn_tiny" / "raw"
    raw.mkdir(parents=True)
    with gzip.open(raw / "edge.csv.gz", "wt") as f:
        f.write("0,1\n1,2\n2,3\n")
    with gzip.open(raw / "node-label.csv.gz", "wt") as f:
        f.write("0\n1\n0\n1\n")
    with gzip.open(raw / "node-feat.csv.gz", "wt") as f:
        f.write("0.5\n1.5\n2.5\n3.5\n")
    code, _, stderr = cli(
        "preprocess", "--ogb", tmp_path / "ogbn_tiny", "--undirected", "--out", tmp_path / "o", "--quiet"
    )
    assert code == 1 and "no split folder" in stderr and "--split random" in stderr  # never a silent random split
    code, _, stderr = cli(
        "preprocess",
        "--ogb",
        tmp_path / "ogbn_tiny",
        "--undirected",
        "--split",
        "random",
        "--out",
        tmp_path / "o",
        "--quiet",
    )
    assert code == 0, stderr
    ds = st.datasets.load(tmp_path / "o")
    assert ds.num_edges == 6 and ds.num_classes == 2 and not ds.directed
    assert np.array_equal(ds.graph.indptr.numpy(), [0, 1, 3, 5, 6])


def test_float16_bits_match_numpy_cast():
    from sparsetrain.datasets.synth import _float16_bits

    rng = np.random.default_rng(0)
    np_errors = np.errstate(all="ignore")
    np_errors.__enter__()
    values = np.concatenate(
        [
            rng.standard_normal(200_000) * 10.0 ** rng.integers(-9, 6, 200_000),  # normals, subnormals, overflow
            rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),  # every bit pattern
            np.float32(
                [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65520, 65519.99, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14]
            ),
        ]
    ).astype(np.float32)
    bits = np.empty(values.shape, np.uint16)
    _float16_bits(values.view(np.uint32), bits)
    expected = values.astype(np.float16)
    np_errors.__exit__(None, None, None)
    nan = np.isnan(expected)
    assert np.array_equal(bits.view(np.float16)[nan].view(np.uint16) & 0x7C00, np.full(nan.sum(), 0x7C00, np.uint16))
    assert np.array_equal(bits[~nan], expected[~nan].view(np.uint16))


def test_papers100m_preset_shape_at_small_scale(cli, tmp_path):
    out = tmp_path / "p"
    code, _, stderr = cli(
        "synth", "--preset", "papers100m", "--nodes", 20000, "--edges", 300000, "--out", out, "--quiet"
    )
    assert code == 0, stderr
    ds = st.datasets.load(out, verify=True)
    assert (ds.num_features, ds.num_classes, ds.features.dtype) == (128, 172, torch.float16)
    labelled = (ds.labels >= 0).sum().item()
    assert labelled == round(0.0139 * 20000) and (ds.labels >= -1).all()
    split = torch.cat([ds.split[k] for k in ("train", "val", "test")])
    assert len(split) == labelled and (ds.labels[split] >= 0).all()  # only labelled nodes, all of them
    assert abs(len(ds.split["train"]) / labelled - 0.7804) < 0.01


def test_synth_does_not_depend_on_the_bucket_count(synth, tmp_path, monkeypatch):
    import sparsetrain.datasets.csc as csc
    import sparsetrain.datasets.synth as synth_module

    monkeypatch.setattr(synth_module, "PAIRS_PER_BUCKET", 5000)
    monkeypatch.setattr(synth_module, "DRAW_CHUNK", 7000)
    monkeypatch.setattr(csc, "BUCKET_EDGES", 3000)
    small = st.datasets.synthesize(
        tmp_path / "small", 5000, 100_000, feature_dim=32, num_classes=10, seed=3, quiet=True
    )
    for name in ("indptr.npy", "indices.npy", "features.npy", "labels.npy", "train_idx.npy"):
        assert small.meta["files"][name]["sha256"] == synth.meta["files"][name]["sha256"], name
