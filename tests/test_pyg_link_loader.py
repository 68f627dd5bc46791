"""sparsetrain.pyg.LinkNeighborLoader against torch_geometric's: same batch fields, same subgraphs with all neighbors."""

import pytest
import torch
import torch_geometric.loader
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from sparsetrain.pyg import LinkNeighborLoader
from tests.pyg_backend import needs_pyg_sampler

N = 80


def _data():
    g = torch.Generator().manual_seed(0)
    ei = to_undirected(torch.randint(0, N, (2, 300), generator=g), num_nodes=N)
    return Data(x=torch.randn(N, 5, generator=g), edge_index=ei, num_nodes=N)


def _edges(batch):
    return set(zip(batch.n_id[batch.edge_index[0]].tolist(), batch.n_id[batch.edge_index[1]].tolist()))


@needs_pyg_sampler
def test_all_neighbors_give_pyg_s_subgraphs():
    data = _data()
    label_index = data.edge_index[:, :40]
    ours = LinkNeighborLoader(data, [-1, -1], edge_label_index=label_index, batch_size=16, seed=0)
    theirs = torch_geometric.loader.LinkNeighborLoader(data, [-1, -1], edge_label_index=label_index, batch_size=16)
    for a, b in zip(ours, theirs):
        assert set(a.n_id.tolist()) == set(b.n_id.tolist())
        assert _edges(a) == _edges(b)
        assert torch.equal(a.n_id[a.edge_label_index], b.n_id[b.edge_label_index])
        # num_sampled_nodes/edges: given as pyg-lib gives them (PyG on torch-sparse leaves them out)
        assert set(a.keys()) - {"num_sampled_nodes", "num_sampled_edges"} == set(b.keys()) and torch.equal(a.input_id, b.input_id)
        assert torch.equal(a.x, data.x[a.n_id])
        assert torch.equal(data.edge_index[:, a.e_id], a.n_id[a.edge_index])  # e_id: the caller's edge ids


@needs_pyg_sampler
def test_binary_and_triplet_fields_match_pyg_s():
    data = _data()
    label_index = data.edge_index[:, :32]
    for neg in (dict(neg_sampling="binary"), dict(neg_sampling=dict(mode="triplet", amount=3))):
        ours = next(iter(LinkNeighborLoader(data, [5, 5], edge_label_index=label_index, batch_size=16, seed=1, **neg)))
        theirs = next(iter(torch_geometric.loader.LinkNeighborLoader(data, [5, 5], edge_label_index=label_index, batch_size=16, **neg)))
        assert set(ours.keys()) - {"num_sampled_nodes", "num_sampled_edges"} == set(theirs.keys())
        for key in theirs.keys():
            if isinstance(theirs[key], torch.Tensor) and key not in ("x", "edge_index", "n_id", "e_id"):
                assert ours[key].shape == theirs[key].shape and ours[key].dtype == theirs[key].dtype, key
        if "edge_label_index" in ours:
            assert torch.equal(ours.n_id[ours.edge_label_index[:, :16]], label_index[:, ours.input_id])
            assert torch.equal(ours.edge_label, torch.cat([torch.ones(16), torch.zeros(16)]))
        else:
            assert torch.equal(ours.n_id[ours.src_index], label_index[0, ours.input_id])
            assert torch.equal(ours.n_id[ours.dst_pos_index], label_index[1, ours.input_id])
            assert ours.dst_neg_index.shape == (16, 3)


def test_same_seed_same_batches():
    data = _data()
    runs = [[b.n_id for b in LinkNeighborLoader(data, [3, 3], edge_label_index=data.edge_index[:, :40], batch_size=8,
                                                 neg_sampling="binary", seed=7)] for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))
