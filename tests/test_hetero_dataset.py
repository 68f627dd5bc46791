"""Typed datasets (format 3, the typed case of the one format): PyG HeteroData, OGB heterogeneous folders and per-type
files round-trip; bad input is one line."""

import csv
import gzip
import json
import random

import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain.errors import DatasetError


def fake_hetero(seed: int = 0):
    from torch_geometric.datasets import FakeHeteroDataset

    random.seed(seed)  # FakeHeteroDataset picks edge types and sizes with Python's random
    torch.manual_seed(seed)
    data = FakeHeteroDataset(
        num_graphs=1, num_node_types=3, num_edge_types=6, avg_num_nodes=60, num_classes=4, task="node", edge_dim=3
    )[0]
    return data


def edge_multiset(src, dst):
    return sorted(zip(np.asarray(src).tolist(), np.asarray(dst).tolist()))


def csc_pairs(csc):
    indptr, indices, _ = csc.numpy()
    dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return indices.astype(np.int64), dst


def test_from_pyg_heterodata_round_trips(tmp_path):
    data = fake_hetero()
    n = data["v0"].num_nodes
    mask = torch.zeros(n, dtype=torch.bool)
    mask[::3] = True
    data["v0"].train_mask = mask
    ds = st.datasets.from_pyg(data, tmp_path / "h")
    assert isinstance(ds, st.datasets.GraphDataset) and ds.is_typed and ds.meta["format_version"] == 3
    ds = st.datasets.load(tmp_path / "h", verify=True)
    assert ds.target_type == "v0" and ds.num_classes == int(data["v0"].y.max()) + 1
    assert ds.num_nodes == {t: data[t].num_nodes for t in data.node_types}
    assert set(ds.edge_types) == set(data.edge_types)
    for et in data.edge_types:
        src, dst = csc_pairs(ds.graph.edges[et])
        ei = data[et].edge_index.numpy()
        assert edge_multiset(src, dst) == edge_multiset(ei[0], ei[1])
        # edge_ids: CSC position -> column of edge_index; edge features follow
        ids = ds.edge_ids[et].numpy()
        assert np.array_equal(ei[0, ids], src) and np.array_equal(ei[1, ids], dst)
        assert torch.equal(ds.edge_features[et], data[et].edge_attr[torch.from_numpy(ids)])
    for t in data.node_types:
        assert torch.equal(ds.features[t].tensor(), data[t].x)
    assert torch.equal(ds.labels["v0"], data["v0"].y)
    assert torch.equal(ds.split["train"], mask.nonzero().view(-1))


def _write_csv_gz(path, rows, header=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        if header is not None:
            w.writerow(header)
        w.writerows(rows)


def write_ogb_mag_folder(root, data):
    """``data`` in OGB's heterogeneous CSV layout, every file ogb's own reader needs."""
    raw = root / "raw"
    types = sorted(data.node_types)
    _write_csv_gz(raw / "num-node-dict.csv.gz", [[data[t].num_nodes for t in types]], header=types)
    triplets = sorted(data.edge_types)
    _write_csv_gz(raw / "triplet-type-list.csv.gz", [list(et) for et in triplets])
    for et in triplets:
        ei = data[et].edge_index.numpy()
        folder = raw / "relations" / "___".join(et)
        _write_csv_gz(folder / "edge.csv.gz", ei.T.tolist())
        _write_csv_gz(folder / "num-edge-list.csv.gz", [[ei.shape[1]]])
    for t in types:
        _write_csv_gz(
            raw / "node-feat" / t / "node-feat.csv.gz", [[f"{v:.6f}" for v in row] for row in data[t].x.tolist()]
        )
    _write_csv_gz(raw / "nodetype-has-label.csv.gz", [[t == "v0" for t in types]], header=types)
    _write_csv_gz(raw / "node-label" / "v0" / "node-label.csv.gz", [[y] for y in data["v0"].y.tolist()])
    split = root / "split" / "random"
    _write_csv_gz(split / "nodetype-has-split.csv.gz", [[t == "v0" for t in types]], header=types)
    perm = np.random.default_rng(0).permutation(data["v0"].num_nodes)
    for part, ids in zip(("train", "valid", "test"), np.array_split(perm, 3)):
        _write_csv_gz(split / "v0" / f"{part}.csv.gz", [[i] for i in ids])


def test_ogb_heterogeneous_folder_matches_ogbs_own_reader(tmp_path, cli):
    from ogb.io.read_graph_raw import read_csv_heterograph_raw, read_node_label_hetero, read_nodesplitidx_split_hetero

    data = fake_hetero(1)
    write_ogb_mag_folder(tmp_path / "mag", data)
    code, out, err = cli("preprocess", "--ogb", tmp_path / "mag", "--out", tmp_path / "o", "--quiet")
    assert code == 0, err
    ds = st.datasets.load(tmp_path / "o", verify=True)
    graph = read_csv_heterograph_raw(str(tmp_path / "mag" / "raw"))[0]
    labels = read_node_label_hetero(str(tmp_path / "mag" / "raw"))
    train, valid, test = read_nodesplitidx_split_hetero(str(tmp_path / "mag" / "split" / "random"))
    assert ds.num_nodes == dict(graph["num_nodes_dict"])
    for et, ei in graph["edge_index_dict"].items():
        assert edge_multiset(*csc_pairs(ds.graph.edges[et])) == edge_multiset(ei[0], ei[1])
    for t, x in graph["node_feat_dict"].items():
        assert np.allclose(ds.features[t].numpy(), x, atol=1e-6)
    assert np.array_equal(ds.labels["v0"].numpy(), labels["v0"][:, 0])
    for ours, theirs in (("train", train), ("val", valid), ("test", test)):
        assert np.array_equal(ds.split[ours].numpy(), np.sort(theirs["v0"]))
    code, out, _ = cli("info", tmp_path / "o")
    assert code == 0 and "v0" in out and "(target)" in out and "v2, e0, v1" in out and "structure OK" in out


def test_typed_csv_files_via_cli_with_reverse_edges(tmp_path, cli):
    rng = np.random.default_rng(3)
    writes = np.stack([rng.integers(0, 40, 200), rng.integers(0, 70, 200)], 1)
    cites = np.stack([rng.integers(0, 70, 300), rng.integers(0, 70, 300)], 1)
    np.savetxt(tmp_path / "writes.csv", writes, fmt="%d", delimiter=",", header="src,dst", comments="")
    np.savetxt(tmp_path / "cites.csv", cites, fmt="%d", delimiter=",", header="src,dst", comments="")
    np.save(tmp_path / "paper_x.npy", rng.standard_normal((70, 5)).astype(np.float32))
    np.save(tmp_path / "paper_y.npy", rng.integers(0, 3, 70))
    code, _, err = cli(
        "preprocess",
        "--typed-edges",
        f"author,writes,paper={tmp_path / 'writes.csv'}",
        "--typed-edges",
        f"paper,cites,paper={tmp_path / 'cites.csv'}",
        "--node-features",
        f"paper={tmp_path / 'paper_x.npy'}",
        "--node-labels",
        f"paper={tmp_path / 'paper_y.npy'}",
        "--node-count",
        "author=45",
        "--add-reverse",
        "--out",
        tmp_path / "o",
        "--quiet",
    )
    assert code == 0, err
    ds = st.datasets.load(tmp_path / "o", verify=True)
    assert ds.num_nodes == {"author": 45, "paper": 70} and ds.target_type == "paper"
    assert edge_multiset(*csc_pairs(ds.graph.edges[("author", "writes", "paper")])) == edge_multiset(
        writes[:, 0], writes[:, 1]
    )
    assert edge_multiset(*csc_pairs(ds.graph.edges[("paper", "rev_writes", "author")])) == edge_multiset(
        writes[:, 1], writes[:, 0]
    )
    assert sum(v.numel() for v in ds.split.values()) == 70


def test_bad_typed_input_is_one_line_and_writes_nothing(tmp_path, cli):
    bad = tmp_path / "writes.csv"
    bad.write_text("src,dst\n0,1\n3,99\n")
    code, out, err = cli("preprocess", "--typed-edges", f"author,writes,paper={bad}", "--node-count", "paper=50",
                         "--out", tmp_path / "o", "--quiet")
    assert code == 1 and not (tmp_path / "o").exists()
    line = err.strip()
    assert "\n" not in line and "writes.csv" in line and "line 3" in line and "'paper' node id 99" in line
    with pytest.raises(DatasetError, match="not a usable type name"):
        st.datasets.from_pyg(_with_bad_type_name(), tmp_path / "p")


def _with_bad_type_name():
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["pa/per"].x = torch.zeros(3, 2)
    data["pa/per", "cites", "pa/per"].edge_index = torch.tensor([[0], [1]])
    return data


def test_damaged_typed_meta_is_a_clear_error(tmp_path):
    st.datasets.from_pyg(fake_hetero(), tmp_path / "h")
    meta = json.loads((tmp_path / "h" / "meta.json").read_text())
    meta["edge_types"][0]["dst"] = "nope"
    (tmp_path / "h" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="names node type 'nope'"):
        st.datasets.load(tmp_path / "h")


@pytest.mark.parametrize("flag", ["--node-features", "--node-labels"])
def test_a_misspelt_node_type_is_an_error_naming_the_known_types(tmp_path, cli, flag):
    """Issue 29: ``--node-features papr=...`` used to create a third node type with no edges."""
    np.savetxt(tmp_path / "writes.csv", [[0, 1], [2, 3]], fmt="%d", delimiter=",", header="src,dst", comments="")
    np.save(
        tmp_path / "table.npy",
        np.zeros((4, 2), dtype=np.float32) if flag == "--node-features" else np.zeros(4, dtype=np.int64),
    )
    code, out, err = cli(
        "preprocess",
        "--typed-edges",
        f"author,writes,paper={tmp_path / 'writes.csv'}",
        flag,
        f"papr={tmp_path / 'table.npy'}",
        "--out",
        tmp_path / "o",
        "--quiet",
    )
    line = err.strip()
    assert code == 1 and not (tmp_path / "o").exists() and "\n" not in line
    assert "'papr'" in line and "author, paper" in line and "spelling" in line and "table.npy" in line
