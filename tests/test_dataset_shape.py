"""One shape for a dataset (issue 38): fields by node and edge type, a homogeneous dataset the one-type case, the
unsuffixed names views at the API edge; and one import path, so one graph gives the same arrays from every source."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain.errors import DatasetError

NODE, EDGE = "_N", ("_N", "_E", "_N")


def _checksums(path):
    meta = json.loads((path / "meta.json").read_text())
    return {name: entry["sha256"] for name, entry in meta["files"].items()}


def test_a_homogeneous_dataset_is_the_one_type_case(tmp_path):
    (tmp_path / "e.csv").write_text("src,dst,t\n0,1,5\n1,2,6\n2,0,7\n2,1,8\n")
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float32).reshape(3, 2))
    np.save(tmp_path / "y.npy", np.array([0, 1, -1]))
    ds = st.datasets.from_files(tmp_path / "ds", tmp_path / "e.csv", features=tmp_path / "x.npy",
                                labels=tmp_path / "y.npy", edge_time_column="t", quiet=True)
    assert not ds.is_typed and list(ds.features_by_type) == [NODE] and ds.features is ds.features_by_type[NODE]
    assert ds.labels_by_type[NODE].tolist() == [0, 1, -1] and ds.labels is ds.labels_by_type[NODE]
    assert ds.num_nodes_by_type == {NODE: 3} and ds.num_nodes == 3
    assert ds.num_edges_by_type == {EDGE: 4} and ds.num_edges == 4
    assert ds.num_features_by_type == {NODE: 2} and ds.num_features == 2
    assert sorted(ds.edge_time_by_type[EDGE].tolist()) == [5, 6, 7, 8] and ds.edge_time is ds.edge_time_by_type[EDGE]
    assert ds.edge_ids_by_type == {} and ds.edge_ids is None  # a homogeneous import keeps no edge ids file
    assert ds.node_time_by_type == {} and ds.node_time is None and ds.edge_features is None and ds.has_times
    bare = st.datasets.GraphDataset(ds.path, ds.meta, ds.graph)  # direct construction: every by-type field empty
    assert bare.features is None and bare.labels is None and bare.features_by_type == {} and not bare.has_times
    assert bare.num_features == 0 and bare.num_nodes == 3


def test_a_typed_dataset_s_views_are_its_dicts_and_sources_agree(tmp_path):
    from torch_geometric.data import HeteroData

    rng = np.random.default_rng(0)
    writes = np.stack([rng.integers(0, 5, 30), rng.integers(0, 8, 30)])
    cites = rng.integers(0, 8, (2, 20))
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.integers(0, 3, 8)
    data = HeteroData()
    data["paper"].x, data["paper"].y = torch.from_numpy(x), torch.from_numpy(y)
    data["author"].num_nodes = 5
    data["paper", "cites", "paper"].edge_index = torch.from_numpy(cites)
    data["author", "writes", "paper"].edge_index = torch.from_numpy(writes)
    ds = st.datasets.from_pyg(data, tmp_path / "pyg", add_reverse=True, quiet=True)
    assert ds.is_typed and ds.features == ds.features_by_type and ds.labels == ds.labels_by_type
    assert ds.num_nodes == ds.num_nodes_by_type == {"paper": 8, "author": 5}
    assert ds.num_features == ds.num_features_by_type == {"paper": 3, "author": 0}
    assert ds.num_edges == ds.num_edges_by_type and ds.num_edges_by_type[("paper", "rev_writes", "author")] == 30
    assert ds.edge_time == {} and ds.node_time == {} and not ds.has_times
    # the same graph as files: the same arrays, byte for byte
    for name, edges in (("w.csv", writes), ("c.csv", cites)):
        (tmp_path / name).write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in edges.T))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    files = st.datasets.from_files(tmp_path / "files", {"paper,cites,paper": tmp_path / "c.csv",
                                                        ("author", "writes", "paper"): tmp_path / "w.csv"},
                                   features={"paper": tmp_path / "x.npy"}, labels={"paper": tmp_path / "y.npy"},
                                   num_nodes={"author": 5}, add_reverse=True, quiet=True)
    assert files.node_types == ds.node_types == ["paper", "author"] and len(_checksums(tmp_path / "pyg")) == 8
    assert _checksums(tmp_path / "files") == _checksums(tmp_path / "pyg")


def test_tables_must_have_the_shape_of_the_edges(tmp_path):
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n1,0\n")
    np.save(tmp_path / "x.npy", np.ones((2, 2), np.float32))
    with pytest.raises(DatasetError, match="features=.*with edges by edge type give it as a dict by node type"):
        st.datasets.from_files(tmp_path / "a", {"a,r,a": tmp_path / "e.csv"}, features=tmp_path / "x.npy")
    with pytest.raises(DatasetError, match="labels=.*with edges of one file give it as one file"):
        st.datasets.from_files(tmp_path / "b", tmp_path / "e.csv", labels={"a": tmp_path / "x.npy"})
    with pytest.raises(DatasetError, match="target_type='paper'.*drop --target-type"):
        st.datasets.from_files(tmp_path / "c", tmp_path / "e.csv", target_type="paper")
    assert not any(p.name in "abc" for p in tmp_path.iterdir())


def test_synth_typed_is_synthesize_typed_and_refuses_the_homogeneous_sizes(tmp_path, cli):
    code, stdout, stderr = cli("synth", "--typed", "--scale", "0.001", "--classes", "3", "--feature-dim", "4",
                               "--out", tmp_path / "cli")
    assert code == 0, stderr
    assert "1940 nodes, 42222 edges, paper 4 features" in stdout and "paper (target) 3 classes" in stdout
    ds = st.datasets.synthesize(tmp_path / "py", typed=True, scale=0.001, num_classes=3, feature_dim=4, quiet=True)
    assert ds.is_typed and len(ds.edge_types) == 8 and ds.num_features_by_type["paper"] == 4  # reverses added
    assert _checksums(tmp_path / "cli") == _checksums(tmp_path / "py")
    for extra, words in ((["--nodes", "5"], "drop --nodes"), (["--label-fraction", "0.5"], "drop --label-fraction"),
                         (["--preset", "papers100m"], "--typed sizes the graph with --scale and keeps its node order; "
                                                      "drop --preset"),
                         (["--reorder", "degree"], "drop --reorder"),
                         # a 0 was read as "the default" (349 classes, 128 features) and written, exit 0
                         (["--classes", "0"], "--classes 0: need at least 1 feature and 2 classes"),
                         (["--feature-dim", "0"], "--feature-dim 0 / --classes 349: need at least 1 feature")):
        code, _, stderr = cli("synth", "--typed", *extra, "--out", tmp_path / "no", "--quiet")
        assert code == 1 and len(stderr.strip().splitlines()) == 1 and words in stderr, (extra, stderr)
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("key", [("a", "r"), 5, (1, 2, 3), ("a", "", "b"), ("a", "r", "b", "c")])
def test_an_edge_type_that_is_not_three_names_is_one_line(tmp_path, key):
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n1,0\n2,1\n")
    with pytest.raises(DatasetError, match=r"edge type .*: write it as src,rel,dst or a \(src, rel, dst\) tuple"):
        st.datasets.from_files(tmp_path / "out", {key: tmp_path / "e.csv"}, quiet=True)
    assert not (tmp_path / "out").exists()


def test_node_counts_are_whole_numbers_numpy_ones_included(tmp_path):
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n1,0\n2,1\n")
    edges = {("a", "r", "b"): tmp_path / "e.csv"}
    ds = st.datasets.from_files(tmp_path / "ok", edges, num_nodes={"a": np.int64(5), "b": np.int32(4)}, quiet=True)
    assert ds.num_nodes_by_type == {"a": 5, "b": 4}
    for bad in (5.0, "5", True):
        with pytest.raises(DatasetError, match=f"the count of node type 'a' is {bad!r}; give a whole number"):
            st.datasets.from_files(tmp_path / "no", edges, num_nodes={"a": bad, "b": 4}, quiet=True)
    with pytest.raises(DatasetError, match="num_nodes is 4.0; give a whole number"):
        st.datasets.from_files(tmp_path / "no", tmp_path / "e.csv", num_nodes=4.0, quiet=True)
    assert not (tmp_path / "no").exists()


def _hetero():
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(0)
    h = HeteroData()
    h["a"].x, h["a"].y = torch.randn(10, 4, generator=g), torch.randint(0, 3, (10,), generator=g)
    h["b"].x = torch.randn(6, 3, generator=g)
    h["a", "r", "b"].edge_index = torch.stack([torch.arange(10), torch.arange(10) % 6])
    h["b", "s", "a"].edge_index = torch.stack([torch.arange(6), torch.arange(6)])
    return h


@pytest.mark.parametrize("edit, says", [
    (lambda h: setattr(h["c"], "x", torch.zeros(0, 4)), "node type 'c' has 0 nodes"),
    (lambda h: setattr(h["a"], "train_mask", torch.ones(5, dtype=torch.bool)),
     "data['a'].train_mask has 5 entries for 10 nodes; a boolean mask has one per node"),
    (lambda h: setattr(h["a"], "x", torch.ones(10, 2, dtype=torch.complex64)),
     "data['a'].x has dtype complex64; give a real-valued tensor"),
], ids=["type without nodes", "short mask", "complex features"])
def test_from_pyg_refuses_in_one_line_what_it_cast_dropped_or_crashed_on(tmp_path, edit, says):
    h = _hetero()
    edit(h)
    with pytest.raises(DatasetError, match=re.escape(says)) as info:
        st.datasets.from_pyg(h, tmp_path / "out", quiet=True)
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()


def test_from_pyg_of_something_else_is_one_line(tmp_path):
    with pytest.raises(DatasetError, match="takes a torch_geometric Data or HeteroData, not a dict"):
        st.datasets.from_pyg({"edge_index": torch.zeros(2, 3, dtype=torch.long)}, tmp_path / "out", quiet=True)


def test_a_full_length_mask_still_gives_the_split(tmp_path):
    h = _hetero()
    h["a"].train_mask = torch.arange(10) < 4
    h["a"].val_mask, h["a"].test_mask = (torch.arange(10) >= 4) & (torch.arange(10) < 7), torch.arange(10) >= 7
    ds = st.datasets.from_pyg(h, tmp_path / "out", quiet=True)
    assert ds.split["train"].tolist() == [0, 1, 2, 3] and ds.split["test"].tolist() == [7, 8, 9]
