"""IGB's heterogeneous layout imported as it ships (``from_igb``, ``preprocess --igb``), against the same graph built
by NumPy and ``from_files``; and the IGBH-shaped synthetic graph (``synth --preset igbh-*``)."""

import json
import os

import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain.datasets.igb import FULL_LABELLED, from_igb, node_types, relations
from sparsetrain.errors import DatasetError

COUNTS = {"paper": 40, "author": 55, "institute": 6, "fos": 9, "journal": 5, "conference": 3}


def write_igb(root, size="tiny", *, headerless=False, dim=4, seed=0, label_dtype=np.float32, counts=COUNTS):
    """A small IGBH folder as IGB ships it: ``root/<size>/processed/...``; ``headerless``: the paper and author
    features and the labels as raw memory maps (large/full). Returns the arrays written."""
    rng = np.random.default_rng(seed)
    folder = root / size / "processed"
    arrays = {"features": {}, "edges": {}}
    for t in node_types(size):
        x = rng.standard_normal((counts[t], dim)).astype(np.float32)
        arrays["features"][t] = x
        (folder / t).mkdir(parents=True, exist_ok=True)
        if headerless and t in ("paper", "author"):
            x.tofile(folder / t / "node_feat.npy")
        else:
            np.save(folder / t / "node_feat.npy", x)
    for name, classes in (("node_label_19.npy", 19), ("node_label_2K.npy", 2983)):
        y = rng.integers(0, classes, counts["paper"]).astype(label_dtype)
        arrays[classes] = y
        (y.tofile if headerless else lambda p, y=y: np.save(p, y))(folder / "paper" / name)
    for et in relations(size):
        n = 3 * counts[et[0]]
        e = np.stack([rng.integers(0, counts[et[0]], n), rng.integers(0, counts[et[2]], n)], axis=1)
        if et[1] == "cites":
            e[:3, 1] = e[:3, 0]  # some self-loops: the reference drops them before adding one per paper
        arrays["edges"][et] = e.astype(np.int64)
        (folder / "__".join(et)).mkdir(parents=True, exist_ok=True)
        np.save(folder / "__".join(et) / "edge_index.npy", e.astype(np.int64))
    return arrays


def reference_edges(edges, num_papers):
    """The reference's edge dict (graphlearn-for-pytorch's IGBH dataset), by NumPy: cites without self-loops plus
    one loop per paper, both directions; every other relation and its rev_ reverse."""
    cites = edges[("paper", "cites", "paper")]
    cites = cites[cites[:, 0] != cites[:, 1]]
    loops = np.repeat(np.arange(num_papers), 2).reshape(-1, 2)
    one_way = np.concatenate([cites, loops])
    out = {("paper", "cites", "paper"): np.concatenate([one_way, one_way[:, ::-1]])}
    out.update({et: e for et, e in edges.items() if et[1] != "cites"})
    out.update({(et[2], f"rev_{et[1]}", et[0]): e[:, ::-1] for et, e in edges.items() if et[1] != "cites"})
    return out


def through_files(tmp_path, arrays, classes, splits, labels=None):
    """The same graph written by NumPy into plain files and imported with ``from_files``."""
    files = tmp_path / "files"
    files.mkdir()
    edges = {}
    for k, (et, e) in enumerate(reference_edges(arrays["edges"], len(arrays["features"]["paper"])).items()):
        np.save(files / f"e{k}.npy", np.ascontiguousarray(e))
        edges[et] = files / f"e{k}.npy"
    features = {}
    for t, x in arrays["features"].items():
        np.save(files / f"x_{t}.npy", x)
        features[t] = files / f"x_{t}.npy"
    np.save(files / "y.npy", arrays[classes] if labels is None else labels)
    split_files = {}
    for name, ids in splits.items():
        np.save(files / f"{name}.npy", np.asarray(ids, dtype=np.int64))
        split_files[name] = files / f"{name}.npy"
    return st.datasets.from_files(tmp_path / "ref", edges, features=features, labels={"paper": files / "y.npy"},
                                  splits=split_files, target_type="paper", num_classes=classes, quiet=True)


def checksums(ds) -> dict:
    return json.loads((ds.path / "meta.json").read_text())["files"]


def test_tiny_layout_imports_as_the_reference_reads_it(tmp_path):
    arrays = write_igb(tmp_path / "igb")
    ds = from_igb(tmp_path / "igb", tmp_path / "out", size="tiny", num_nodes={"paper": 40, "author": 55}, quiet=True)
    n = 40  # IGB's split: the first 60% train, the next 20% validate, the rest test, by id
    ref = through_files(tmp_path, arrays, 19, {"train": range(24), "val": range(24, 32), "test": range(32, n)})
    assert checksums(ds) == checksums(ref)
    assert ds.target_type == "paper" and ds.num_classes == 19
    assert set(ds.edge_types) == {*relations("tiny"), ("author", "rev_written_by", "paper"),
                                  ("institute", "rev_affiliated_to", "author"), ("fos", "rev_topic", "paper")}
    # cites: 2 * (citations without loops + one loop per paper)
    e = arrays["edges"][("paper", "cites", "paper")]
    assert ds.num_edges[("paper", "cites", "paper")] == 2 * ((e[:, 0] != e[:, 1]).sum() + n)
    assert torch.equal(ds.labels["paper"], torch.from_numpy(arrays[19].astype(np.int64)))


def test_headerless_large_files_are_sized_from_the_counts(tmp_path):
    arrays = write_igb(tmp_path / "igb", "large", headerless=True)
    counts = {"paper": 40, "author": 55}
    ds = from_igb(tmp_path / "igb", tmp_path / "out", size="large", classes=2983, num_nodes=counts, quiet=True)
    assert set(ds.node_types) == set(COUNTS) and ds.num_nodes == COUNTS
    assert ("journal", "rev_published", "paper") in ds.edge_types and ("paper", "venue", "conference") in ds.edge_types
    ref = through_files(tmp_path, arrays, 2983, {"train": range(24), "val": range(24, 32), "test": range(32, 40)})
    assert checksums(ds) == checksums(ref)
    # the same folder with headers reads the same
    write_igb(tmp_path / "headed", "large")
    again = from_igb(tmp_path / "headed", tmp_path / "out2", size="large", classes=2983, num_nodes=counts, quiet=True)
    assert checksums(again) == checksums(ds)


def test_full_labels_only_the_published_prefix(tmp_path, monkeypatch):
    monkeypatch.setitem(FULL_LABELLED, 19, 30)  # IGBH-full labels its first 227,130,858 papers; here the first 30
    arrays = write_igb(tmp_path / "igb", "full", headerless=True)
    ds = from_igb(tmp_path / "igb", tmp_path / "out", size="full", num_nodes={"paper": 40, "author": 55}, quiet=True)
    y = ds.labels["paper"].numpy()
    assert (y[30:] == -1).all() and np.array_equal(y[:30], arrays[19][:30].astype(np.int64))
    assert [len(ds.split[k]) for k in ("train", "val", "test")] == [18, 6, 6]


def test_mlperf_split_is_split_seeds_permutation(tmp_path):
    write_igb(tmp_path / "igb")
    ds = from_igb(tmp_path / "igb", tmp_path / "out", split="mlperf", validation_frac=0.1,
                  num_nodes={"paper": 40, "author": 55}, quiet=True)
    torch.manual_seed(42)  # MLPerf's split_seeds.py, by hand
    order = torch.randperm(40)
    for name, ids in (("train", order[:24]), ("val", order[24:28]), ("test", order[28:])):
        assert torch.equal(ds.split[name], ids.sort().values)  # the writer stores a split sorted


@pytest.mark.parametrize(("damage", "message"), [
    ("missing relation", "paper__topic__fos/edge_index.npy: missing; IGBH-tiny has the relation"),
    ("wrong count", "has 40 rows but IGBH has 100000 paper nodes"),
    ("nan feature", "NaN"),
    ("short headerless", "the count is wrong"),
    ("out of range", "author"),
    ("bad label", "label 19"),
])
def test_a_damaged_folder_is_one_line(tmp_path, damage, message):
    size = "large" if damage == "short headerless" else "tiny"
    write_igb(tmp_path / "igb", size, headerless=size == "large")
    folder = tmp_path / "igb" / size / "processed"
    counts = {"paper": 40, "author": 55}
    if damage == "missing relation":
        (folder / "paper__topic__fos" / "edge_index.npy").unlink()
    elif damage == "wrong count":
        counts = None
    elif damage == "nan feature":
        x = np.load(folder / "fos" / "node_feat.npy")
        x[3, 1] = np.nan
        np.save(folder / "fos" / "node_feat.npy", x)
    elif damage == "short headerless":
        raw = (folder / "paper" / "node_label_19.npy").read_bytes()
        (folder / "paper" / "node_label_19.npy").write_bytes(raw[:-4])
    elif damage == "out of range":
        e = np.load(folder / "paper__written_by__author" / "edge_index.npy")
        e[5, 1] = 55
        np.save(folder / "paper__written_by__author" / "edge_index.npy", e)
    elif damage == "bad label":
        y = np.load(folder / "paper" / "node_label_19.npy")
        y[7] = 19
        np.save(folder / "paper" / "node_label_19.npy", y)
    with pytest.raises(DatasetError) as info:
        from_igb(tmp_path / "igb", tmp_path / "out", size=size, num_nodes=counts, quiet=True)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_preprocess_igb_cli(cli, tmp_path):
    arrays = write_igb(tmp_path / "igb")
    code, out, err = cli("preprocess", "--igb", tmp_path / "igb", "--size", "tiny", "--classes", "2983",
                         "--node-count", "paper=40", "--node-count", "author=55", "--out", tmp_path / "out")
    assert code == 0, err
    ds = st.datasets.load(tmp_path / "out")
    assert ds.num_classes == 2983 and torch.equal(ds.labels["paper"], torch.from_numpy(arrays[2983].astype(np.int64)))
    code, _, err = cli("preprocess", "--igb", tmp_path / "igb", "--size", "tiny", "--add-reverse", "--out",
                       tmp_path / "o2")
    assert code == 1 and "--add-reverse" in err and "\n" not in err.strip()


def test_igbh_preset_has_igbs_counts_and_learnable_labels(tmp_path):
    from sparsetrain.datasets.presets import IGBH_EDGES, IGBH_NODES

    ds = st.datasets.synthesize(tmp_path / "a", preset="igbh-tiny", scale=0.002, feature_dim=8, seed=1, quiet=True)
    again = st.datasets.synthesize(tmp_path / "b", preset="igbh-tiny", scale=0.002, feature_dim=8, seed=1, quiet=True)
    assert checksums(ds) == checksums(again)
    assert ds.num_nodes == {t: round(n * 0.002) for t, n in IGBH_NODES["tiny"].items()}
    assert set(ds.features) == set(IGBH_NODES["tiny"]) and ds.num_classes == 19
    # stored as the import stores IGBH: the relations with IGB's counts (scaled), their reverses, cites symmetrised
    for k, et in enumerate(relations("tiny")[1:], start=1):
        e = round(IGBH_EDGES["tiny"][k] * 0.002)
        assert ds.num_edges[et] == e and ds.num_edges[(et[2], f"rev_{et[1]}", et[0])] == e
    cites = ds.graph.edges[("paper", "cites", "paper")]
    y = ds.labels["paper"]
    dst = torch.repeat_interleave(torch.arange(cites.num_nodes), cites.in_degrees())
    src = cites.indices.long()
    assert (src == dst).sum() == 2 * ds.num_nodes["paper"]  # each paper's self-loop, once per direction
    assert (y[src[src != dst]] == y[dst[src != dst]]).float().mean() > 0.6  # learnable: citations mostly same class


def test_synth_igbh_preset_cli(cli, tmp_path):
    code, out, err = cli("synth", "--preset", "igbh-tiny", "--scale", "0.001", "--feature-dim", "4", "--out",
                         tmp_path / "g")
    assert code == 0, err
    assert "paper (target) 19 classes" in out
    code, _, err = cli("synth", "--preset", "igbh-tiny", "--nodes", "10", "--out", tmp_path / "h")
    assert code == 1 and "drop --nodes" in err and "\n" not in err.strip()


def _rss_file_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    return 0


def test_streamed_reads_equal_the_map_and_leave_no_pages_mapped(tmp_path):
    """The importer reads IGB's files with positioned reads: the rows equal the map's, and walking a 64 MiB headerless
    file leaves the process's file-backed resident set where it was (a walk through the map would add the file)."""
    from sparsetrain.datasets.igb import _open, _read

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 3)).astype(np.float32)
    np.save(tmp_path / "h.npy", x)
    x.tofile(tmp_path / "raw.npy")
    y = np.arange(50, dtype=np.float32).reshape(50, 1)
    np.save(tmp_path / "y.npy", y)
    headed = _open(tmp_path / "h.npy", "rows", 1000, None, "float32")
    raw = _open(tmp_path / "raw.npy", "rows", 1000, None, "float32")
    labels = _open(tmp_path / "y.npy", "labels", 50, 0, "float32").reshape(-1)
    for lo, hi in ((0, 7), (993, 1000), (990, 2000), (400, 400)):
        for array in (headed, raw):
            got = _read(array, lo, hi)
            assert type(got) is np.ndarray and np.array_equal(got, x[lo:hi])
    assert np.array_equal(_read(labels, 10, 20), np.arange(10, 20, dtype=np.float32))
    if not os.path.exists("/proc/self/status"):
        return
    big = tmp_path / "big.npy"
    rows = (64 << 20) // 16
    np.arange(2 * rows, dtype=np.int64).tofile(big)
    edges = _open(big, "edges", None, 2, "int64")
    before = _rss_file_kb()
    total = sum(int(_read(edges, lo, lo + (1 << 18))[:, 1].sum()) for lo in range(0, rows, 1 << 18))
    assert total == int(np.arange(1, 2 * rows, 2, dtype=np.int64).sum())
    assert _rss_file_kb() - before < 16 << 10  # KiB: the 64 MiB walked did not stay resident
