"""`DatasetMeta`: the dataset's description a run is planned on, by type; a homogeneous dataset the one-type case."""

import hashlib

import numpy as np

import sparsetrain as st
from sparsetrain.engine.dataset_meta import DatasetMeta


def test_a_homogeneous_dataset_is_described_as_its_one_type(tmp_path):
    ds = st.datasets.synthesize(tmp_path / "h", 300, 2400, feature_dim=8, num_classes=3, seed=0, quiet=True)
    meta = DatasetMeta.of(ds)
    raw = np.load(tmp_path / "h" / "features.npy")
    assert not meta.is_typed and meta.node_types == ["_N"] and meta.edge_types == [("_N", "_E", "_N")]
    assert meta.num_nodes == {"_N": 300} and meta.num_edges == {("_N", "_E", "_N"): ds.graph.indices.numel()}
    assert meta.features == {"_N": (8, raw.nbytes, 8 * raw.itemsize)} and meta.num_features == {"_N": 8}
    assert meta.num_classes == {"_N": 3} and meta.target_type == "_N"
    assert meta.split == {name: len(np.load(tmp_path / "h" / f"{name}_idx.npy")) for name in ("train", "val", "test")}
    assert meta.meta_sha256 == hashlib.sha256((tmp_path / "h" / "meta.json").read_bytes()).hexdigest()
    graph = ds.graph
    assert meta.graph_bytes == graph.indptr.numel() * 8 + graph.indices.numel() * graph.indices.element_size()
    assert meta.link_train_edges is None and not meta.node_time and not meta.edge_time


def test_a_typed_dataset_is_described_by_type(tmp_path):
    ds = st.datasets.synthesize(tmp_path / "t", typed=True, scale=0.001, quiet=True)
    meta = DatasetMeta.of(ds)
    assert meta.is_typed and meta.target_type == "paper"
    assert meta.num_nodes == {et[2]: len(ds.graph.relation(et).indptr) - 1 for et in ds.edge_types}  # its columns
    assert sum(meta.num_edges.values()) == ds.graph.indices.numel()
    for t in meta.node_types:
        table = ds.features_by_type.get(t)
        assert meta.num_features[t] == (0 if table is None else table.shape[1])
        if table is not None:
            assert meta.features[t].nbytes == table.numpy().nbytes
    assert set(meta.num_classes) == set(ds.labels_by_type)
