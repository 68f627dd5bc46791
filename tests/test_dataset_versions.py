"""Format versions 1 and 2 still load: folders written here the way those versions laid them out (NumPy, not the
writer) open to the same tensors as the version-3 folder the writer makes from the same graph, and `info` says
which version it read."""

import json
import random

import numpy as np
import pytest
import scipy.sparse
import torch

import sparsetrain as st
from sparsetrain.datasets import format as fmt
from sparsetrain.errors import DatasetError


def _save(folder, arrays: dict[str, np.ndarray], meta: dict, version: int) -> None:
    """``arrays`` as .npy files and ``meta`` with the checksums of every one: a folder of format ``version``."""
    folder.mkdir(parents=True)
    files = {}
    for name, array in arrays.items():
        np.save(folder / name, np.ascontiguousarray(array))
        files[name] = {"dtype": str(array.dtype), "shape": list(array.shape), "sha256": fmt.sha256_file(folder / name)}
    meta = {"format": fmt.FORMAT_NAME, "format_version": version, "created_by": "sparsetrain 0.1.0", **meta,
            "files": files}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))


def _csc(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSC of the edges src -> dst by a stable sort on (dst, src): indptr, indices, the sort order (edge ids)."""
    order = np.argsort(dst * num_src + src, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=num_dst))]).astype(np.int64)
    return indptr, src[order].astype(np.int32), order.astype(np.int64)


def _cora():
    from sparsetrain.datasets.builtin import planetoid_data

    return planetoid_data("cora")


def write_version1(folder, data, link: bool = False) -> None:
    """A PyG ``Data`` as format version 1 laid it out (a homogeneous CSC, node tables, public split or link edges)."""
    src, dst = data.edge_index.numpy()
    n = data.num_nodes
    indptr, indices, _ = _csc(src, dst, n, n)
    arrays = {"indptr.npy": indptr, "indices.npy": indices, "features.npy": data.x.numpy().astype(np.float32)}
    meta = {"name": folder.name, "num_nodes": n, "num_edges": len(indices), "directed": False,
            "has_edge_weights": False, "feature_dim": int(data.x.shape[1]), "feature_dtype": "float32",
            "num_classes": None, "permutation": None, "splits": {}, "source": {"importer": "test fixture"}}
    if link:
        rng = np.random.default_rng(0)
        pos, neg = data.edge_index[:, :50].numpy().astype(np.int64), rng.integers(0, n, (2, 150)).astype(np.int64)
        train = data.edge_index[:, 50:].numpy().astype(np.int64)
        arrays |= {"link_val_pos.npy": pos, "link_val_neg.npy": neg, "link_train_pos.npy": train}
        meta["link_split"] = {"train": {"pos": "link_train_pos.npy", "neg": None, "neg_per_pos": None},
                              "val": {"pos": "link_val_pos.npy", "neg": "link_val_neg.npy", "neg_per_pos": 3}}
    else:
        arrays["labels.npy"] = data.y.numpy().astype(np.int64)
        meta["num_classes"] = int(data.y.max()) + 1
        for name in fmt.SPLIT_NAMES:
            arrays[f"{name}_idx.npy"] = np.flatnonzero(getattr(data, f"{name}_mask").numpy()).astype(np.int64)
            meta["splits"][name] = len(arrays[f"{name}_idx.npy"])
    _save(folder, arrays, meta, 1)


def fake_hetero():
    from torch_geometric.datasets import FakeHeteroDataset

    random.seed(5)
    torch.manual_seed(5)
    data = FakeHeteroDataset(num_graphs=1, num_node_types=3, num_edge_types=5, avg_num_nodes=50, num_classes=4,
                             task="node", edge_dim=2)[0]
    data["v0"].train_mask = torch.arange(data["v0"].num_nodes) % 3 == 0
    return data


def write_version2(folder, data) -> None:
    """A PyG ``HeteroData`` as format version 2 laid it out: a CSC file set per edge type, per-type node tables."""
    arrays, node_types, edge_types = {}, {}, []
    for t in data.node_types:
        node_types[t] = {"num_nodes": data[t].num_nodes, "feature_dim": int(data[t].x.shape[1]),
                         "feature_dtype": "float32", "num_classes": None}
        arrays[f"node.{t}.features.npy"] = data[t].x.numpy().astype(np.float32)
    arrays["node.v0.labels.npy"] = data["v0"].y.numpy().astype(np.int64)
    node_types["v0"]["num_classes"] = int(data["v0"].y.max()) + 1
    for et in data.edge_types:
        src, dst = data[et].edge_index.numpy()
        indptr, indices, order = _csc(src, dst, data[et[0]].num_nodes, data[et[2]].num_nodes)
        key = "___".join(et)
        arrays |= {f"edge.{key}.indptr.npy": indptr, f"edge.{key}.indices.npy": indices,
                   f"edge.{key}.edge_ids.npy": order,
                   f"edge.{key}.features.npy": data[et].edge_attr.numpy()[order].astype(np.float32)}
        edge_types.append({"src": et[0], "rel": et[1], "dst": et[2], "num_edges": len(indices), "edge_feature_dim": 2})
    arrays["train_idx.npy"] = np.flatnonzero(data["v0"].train_mask.numpy()).astype(np.int64)
    meta = {"name": folder.name, "node_types": node_types, "edge_types": edge_types, "target_type": "v0",
            "splits": {"train": len(arrays["train_idx.npy"])}, "source": {"importer": "test fixture"}}
    _save(folder, arrays, meta, 2)


def _same_graph(old, new) -> None:
    assert old.is_typed == new.is_typed and old.num_nodes == new.num_nodes and old.num_edges == new.num_edges
    assert old.node_types == new.node_types and old.edge_types == new.edge_types
    assert torch.equal(old.graph.indptr, new.graph.indptr) and torch.equal(old.graph.indices, new.graph.indices)


def test_version1_folder_loads_to_the_tensors_of_version3(tmp_path, cli):
    data = _cora()
    write_version1(tmp_path / "v1", data)
    old = st.datasets.load(tmp_path / "v1", verify=True)
    new = st.datasets.from_pyg(data, tmp_path / "v3", quiet=True)
    assert old.format_version == 1 and new.format_version == 3 and not old.is_typed
    _same_graph(old, new)
    # and both are the CSC of PyG's edge_index, by an independent route
    src, dst = data.edge_index.numpy()
    ref = scipy.sparse.csc_matrix((np.ones(len(src)), (src, dst)), shape=(data.num_nodes,) * 2)
    ref.sort_indices()
    assert np.array_equal(old.graph.indptr.numpy(), ref.indptr)
    assert np.array_equal(old.graph.indices.numpy(), ref.indices)
    assert torch.equal(old.features.tensor(), new.features.tensor()) and torch.equal(old.features.tensor(), data.x)
    assert torch.equal(old.labels, new.labels) and old.num_classes == new.num_classes == 7
    assert old.split.keys() == new.split.keys() and all(torch.equal(old.split[k], new.split[k]) for k in old.split)
    assert old.target_type == new.target_type == "_N" and old.num_features == 1433
    code, out, _ = cli("info", tmp_path / "v1")
    assert code == 0 and "format version 1" in out and "structure OK" in out
    code, out, _ = cli("info", tmp_path / "v3")
    assert code == 0 and "format version 3" in out


def test_version1_link_folder_keeps_its_edge_splits(tmp_path):
    data = _cora()
    write_version1(tmp_path / "v1", data, link=True)
    ds = st.datasets.load(tmp_path / "v1", verify=True)
    assert set(ds.edge_split) == {"train", "val"} and ds.labels is None
    assert torch.equal(ds.edge_split["val"].pos, data.edge_index[:, :50]) and ds.edge_split["val"].neg_per_pos == 3
    assert torch.equal(ds.edge_split["train"].pos, data.edge_index[:, 50:]) and ds.edge_split["train"].neg is None


def test_version2_folder_loads_to_the_tensors_of_version3(tmp_path, cli):
    data = fake_hetero()
    write_version2(tmp_path / "v2", data)
    old = st.datasets.load(tmp_path / "v2", verify=True)
    new = st.datasets.from_pyg(data, tmp_path / "v3", quiet=True)
    assert old.format_version == 2 and new.format_version == 3 and old.is_typed and old.graph.is_typed
    _same_graph(old, new)
    assert old.target_type == new.target_type == "v0" and old.num_classes == new.num_classes
    for et in data.edge_types:
        assert torch.equal(old.edge_ids[et], new.edge_ids[et])
        assert torch.equal(old.edge_features[et].tensor(), new.edge_features[et].tensor())
        # the relation is the CSC of that edge type's edge_index
        rel, ei = old.graph.relation(et), data[et].edge_index
        assert torch.equal(rel.indices.long(), ei[0, old.edge_ids[et]])
        dst = torch.repeat_interleave(torch.arange(rel.num_nodes), rel.in_degrees())
        assert torch.equal(dst, ei[1, old.edge_ids[et]])
    for t in data.node_types:
        assert torch.equal(old.features[t].tensor(), new.features[t].tensor())
        assert torch.equal(old.features[t].tensor(), data[t].x)
    assert old.labels.keys() == new.labels.keys() == {"v0"} and torch.equal(old.labels["v0"], new.labels["v0"])
    assert torch.equal(old.split["train"], new.split["train"])
    code, out, _ = cli("info", tmp_path / "v2")
    assert code == 0 and "format version 2," in out and "v0 (target)" in out and "structure OK" in out


def test_damaged_version2_relation_is_named_by_verify(tmp_path):
    data = fake_hetero()
    write_version2(tmp_path / "v2", data)
    et = data.edge_types[0]
    name = f"edge.{'___'.join(et)}.indices.npy"
    indices = np.load(tmp_path / "v2" / name)
    indices[3] = data[et[0]].num_nodes + 7
    np.save(tmp_path / "v2" / name, indices)
    meta = json.loads((tmp_path / "v2" / "meta.json").read_text())
    meta["files"][name]["sha256"] = fmt.sha256_file(tmp_path / "v2" / name)
    (tmp_path / "v2" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=rf"{name}: entry 3 is '{et[0]}' node {data[et[0]].num_nodes + 7}"):
        st.datasets.load(tmp_path / "v2", verify=True)


def test_a_newer_version_is_refused_by_name(tmp_path):
    write_version1(tmp_path / "v", _cora())
    meta = json.loads((tmp_path / "v" / "meta.json").read_text())
    meta["format_version"] = fmt.FORMAT_VERSION + 1
    (tmp_path / "v" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="reads 1 to 3; upgrade sparsetrain"):
        st.datasets.load(tmp_path / "v")
