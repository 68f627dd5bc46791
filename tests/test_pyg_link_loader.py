"""sparsetrain.pyg.LinkNeighborLoader against torch_geometric's: same batch fields, same subgraphs with all
neighbors."""

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
        assert set(a.keys()) - {"num_sampled_nodes", "num_sampled_edges"} == set(b.keys()) and torch.equal(
            a.input_id, b.input_id
        )
        assert torch.equal(a.x, data.x[a.n_id])
        assert torch.equal(data.edge_index[:, a.e_id], a.n_id[a.edge_index])  # e_id: the caller's edge ids


@needs_pyg_sampler
def test_binary_and_triplet_fields_match_pyg_s():
    data = _data()
    label_index = data.edge_index[:, :32]
    for neg in (dict(neg_sampling="binary"), dict(neg_sampling=dict(mode="triplet", amount=3))):
        ours = next(iter(LinkNeighborLoader(data, [5, 5], edge_label_index=label_index, batch_size=16, seed=1, **neg)))
        theirs = next(
            iter(
                torch_geometric.loader.LinkNeighborLoader(
                    data, [5, 5], edge_label_index=label_index, batch_size=16, **neg
                )
            )
        )
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


def _pairs(edge_index: torch.Tensor) -> set:
    return set(zip(edge_index[0].tolist(), edge_index[1].tolist()))


@pytest.mark.parametrize("mode", ["self", "reverse"])
def test_exclude_seed_edges_removes_exactly_the_seed_edges_from_the_sampled_subgraph(mode):
    data = _data()
    label_index = data.edge_index[:, :60]  # seed edge i is graph edge i, so input_id are the seed edges' ids
    kwargs = dict(edge_label_index=label_index, batch_size=20, neg_sampling="binary", seed=5)
    kept = list(LinkNeighborLoader(data, [4, 3], exclude_seed_edges=mode, **kwargs))
    full = list(LinkNeighborLoader(data, [4, 3], **kwargs))  # same seed: the same draws before the exclusion
    for a, b in zip(kept, full):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_label_index, b.edge_label_index)
        seed_pairs = _pairs(data.edge_index[:, a.input_id])
        if mode == "reverse":
            seed_pairs |= {(v, u) for u, v in seed_pairs}
        # expected: the full batch's edges (by e_id) whose endpoints are not a (reversed) seed edge
        expected = [e for e in b.e_id.tolist() if tuple(data.edge_index[:, e].tolist()) not in seed_pairs]
        assert sorted(a.e_id.tolist()) == sorted(expected) and len(expected) < b.e_id.numel()
        assert not set(a.e_id.tolist()) & set(a.input_id.tolist())
        assert torch.equal(data.edge_index[:, a.e_id], a.n_id[a.edge_index])  # e_id still names each batch edge


@needs_pyg_sampler
@pytest.mark.parametrize("mode", ["none", "self", "reverse"])
def test_exclude_seed_edges_is_pyg_s_subgraph_minus_the_seed_edges(mode):
    data = _data()
    label_index = data.edge_index[:, :40]
    ours = LinkNeighborLoader(data, [-1, -1], edge_label_index=label_index, batch_size=16, seed=0,
                              exclude_seed_edges=mode)
    theirs = torch_geometric.loader.LinkNeighborLoader(data, [-1, -1], edge_label_index=label_index, batch_size=16)
    for a, b in zip(ours, theirs):
        seed_pairs = set() if mode == "none" else _pairs(label_index[:, b.input_id])
        if mode == "reverse":
            seed_pairs |= {(v, u) for u, v in seed_pairs}
        assert set(a.n_id.tolist()) == set(b.n_id.tolist())
        assert _edges(a) == _edges(b) - seed_pairs


def test_exclude_seed_edges_names_its_choices():
    data = _data()
    with pytest.raises(ValueError, match="exclude_seed_edges='both'; choose one of 'none', 'self', 'reverse'"):
        LinkNeighborLoader(data, [3], edge_label_index=data.edge_index[:, :10], exclude_seed_edges="both")


def test_weighted_negatives_are_prepared_once_not_every_batch(monkeypatch):
    """The loader's link sampler is kept across batches: weighted negatives sum their weights over every node once."""
    from torch_geometric.sampler import NegativeSampling

    import sparsetrain.sampling.negatives as negatives

    prepared, real = [], negatives._weights_cdf
    monkeypatch.setattr(negatives, "_weights_cdf", lambda *args: prepared.append(args[2]) or real(*args))
    data = _data()
    dst_weight = torch.zeros(N)
    dst_weight[:10] = 1.0  # negatives end only at nodes 0-9
    loader = LinkNeighborLoader(data, [3, 3], edge_label_index=data.edge_index[:, :40], batch_size=8, seed=7,
                                neg_sampling=NegativeSampling("binary", dst_weight=dst_weight))
    batches = list(loader) + list(loader)
    assert len(batches) == 10 and prepared == ["dst_weight"]
    for batch in batches:
        negative_ends = batch.n_id[batch.edge_label_index[1, 8:]]
        assert negative_ends.numel() == 8 and int(negative_ends.max()) < 10
    dst_weight[:10], dst_weight[10:20] = 0.0, 1.0  # changed in place: the next batches draw from the new weights
    negative_ends = [b.n_id[b.edge_label_index[1, 8:]] for b in loader]
    assert prepared == ["dst_weight", "dst_weight"]
    assert all(int(ends.min()) >= 10 and int(ends.max()) < 20 for ends in negative_ends)


def test_a_link_sampler_that_sampled_pickles_into_a_worker():
    import pickle

    from torch_geometric.sampler import EdgeSamplerInput

    from sparsetrain.pyg.keys import batch_key

    data = _data()
    loader = LinkNeighborLoader(data, [3, 3], edge_label_index=data.edge_index[:, :40], batch_size=8, seed=7,
                                neg_sampling="binary")
    next(iter(loader))
    sampler = loader.link_sampler  # (it keeps its link sampler, which holds a lock, after a batch)
    unpickled = pickle.loads(pickle.dumps(sampler))
    seeds = EdgeSamplerInput(torch.arange(8), data.edge_index[0, :8], data.edge_index[1, :8])
    with batch_key(3):
        ours = sampler.sample_from_edges(seeds, loader.neg_sampling)
        theirs = unpickled.sample_from_edges(seeds, loader.neg_sampling)
    for field in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(ours, field), getattr(theirs, field)), field
    assert torch.equal(ours.metadata[1], theirs.metadata[1])  # edge_label_index, negatives included
