import numpy as np
import pytest
import torch
from torch_geometric.utils import to_torch_csc_tensor

import sparsetrain as st


@pytest.fixture(scope="module")
def cora_ds(cora_data, tmp_path_factory):
    return st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("ds") / "cora", quiet=True)


def test_cora_sizes_and_public_split(cora_ds):
    assert cora_ds.num_nodes == 2708
    assert cora_ds.num_edges == 10556
    assert cora_ds.num_features == 1433
    assert cora_ds.num_classes == 7
    assert {k: v.numel() for k, v in cora_ds.split.items()} == {"train": 140, "val": 500, "test": 1000}
    assert cora_ds.meta["directed"] is False
    assert cora_ds.graph.indices.dtype == torch.int32


def test_cora_csc_matches_pyg(cora_data, cora_ds):
    n = cora_data.num_nodes
    ref = to_torch_csc_tensor(cora_data.edge_index, size=(n, n))
    assert torch.equal(ref.ccol_indices(), cora_ds.graph.indptr)
    assert torch.equal(ref.row_indices(), cora_ds.graph.indices.long())


def test_cora_tables_and_masks(cora_data, cora_ds):
    assert torch.equal(cora_ds.features, cora_data.x)
    assert torch.equal(cora_ds.labels, cora_data.y)
    for name, mask in (("train", cora_data.train_mask), ("val", cora_data.val_mask), ("test", cora_data.test_mask)):
        assert torch.equal(cora_ds.split[name], mask.nonzero().view(-1))


def test_reload_is_memory_mapped_and_verifies(cora_ds):
    ds = st.datasets.load(cora_ds.path, verify=True)
    assert isinstance(ds.features.numpy().base, np.memmap) or ds.features.numpy().base is not None
    assert ds.meta["files"]["indices.npy"]["sha256"] == cora_ds.meta["files"]["indices.npy"]["sha256"]


@pytest.mark.parametrize("method", ["degree", "rcm"])
def test_reorder_keeps_a_map_back(cora_data, method, tmp_path):
    ds = st.datasets.from_pyg(cora_data, tmp_path / method, reorder=method, quiet=True)
    old = ds.original_ids
    assert sorted(old.tolist()) == list(range(2708))
    assert ds.meta["permutation"]["method"] == method
    assert torch.equal(ds.features, cora_data.x[old])
    assert torch.equal(ds.labels, cora_data.y[old])
    assert torch.equal(old[ds.split["train"]].sort().values, cora_data.train_mask.nonzero().view(-1))
    # the edge set maps back exactly
    col = torch.repeat_interleave(torch.arange(ds.num_nodes), ds.graph.in_degrees())
    mapped = torch.stack([old[ds.graph.indices.long()], old[col]])
    def key(ei):
        return (ei[0] * 10_000 + ei[1]).sort().values
    assert torch.equal(key(mapped), key(cora_data.edge_index))


def test_degree_order_puts_hubs_first(cora_data, tmp_path):
    ds = st.datasets.from_pyg(cora_data, tmp_path / "deg", reorder="degree", quiet=True)
    deg = ds.graph.in_degrees()
    assert torch.all(deg[:-1] >= deg[1:])


def test_rcm_shrinks_bandwidth(cora_data, tmp_path):
    def mean_gap(ds):
        col = torch.repeat_interleave(torch.arange(ds.num_nodes), ds.graph.in_degrees())
        return (ds.graph.indices.long() - col).abs().float().mean().item()

    plain = st.datasets.from_pyg(cora_data, tmp_path / "plain", quiet=True)
    rcm = st.datasets.from_pyg(cora_data, tmp_path / "rcm", reorder="rcm", quiet=True)
    assert mean_gap(rcm) < 0.5 * mean_gap(plain)
