"""sparsetrain.pyg refuses, in one line at construction, the input PyG's own loader fails on (or silently misreads).

The reference is PyG's NeighborLoader / LinkNeighborLoader (torch-sparse backend here) on the same input: where it
raises, ours raises an instance of the same builtin (``except`` clauses keep working); where it casts, drops or
truncates, ours refuses; valid input of another integer width gives the batches int64 gives. Times follow the
importer's rule: ``from_pyg`` refuses the same NaN/inf times.
"""

from __future__ import annotations

import pytest
import torch
import torch_geometric.loader as pyg_loader
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import EdgeSamplerInput, NodeSamplerInput

import sparsetrain.pyg as stp
from sparsetrain.datasets import from_pyg
from sparsetrain.errors import InputError, NotSupportedError, SparsetrainError
from tests.pyg_backend import needs_pyg_sampler

N = 60


def _data(**attrs) -> Data:
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(N, 3, generator=g), y=torch.randint(0, 2, (N,), generator=g),
                edge_index=torch.randint(0, N, (2, 400), generator=g), num_nodes=N)
    for name, value in attrs.items():
        data[name] = value
    return data


def _hetero() -> HeteroData:
    g = torch.Generator().manual_seed(1)
    data = HeteroData()
    data["paper"].x, data["author"].x = torch.randn(40, 3, generator=g), torch.randn(20, 3, generator=g)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, 40, (2, 150), generator=g)
    data["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 20, (100,), generator=g),
                                                                torch.randint(0, 40, (100,), generator=g)])
    return data


def _float_edges(data):
    data.edge_index = data.edge_index.float()
    return data


def _float_typed_edges(data):
    data["paper", "cites", "paper"].edge_index = data["paper", "cites", "paper"].edge_index.double()
    return data


AS_FLOAT = torch.tensor([1.7, 2.2, 3.9])
FLOAT_CASES = {  # name: (loader, the data it is given, its keywords), the argument named in our message
    "input_nodes": ("NeighborLoader", _data, {"input_nodes": AS_FLOAT}, "input_nodes"),
    "edge_index": ("NeighborLoader", lambda: _float_edges(_data()), {}, "data.edge_index"),
    "edge_label_index": ("LinkNeighborLoader", _data, {"edge_label_index": torch.tensor([[1.5, 2.0], [3.0, 4.5]])},
                         "edge_label_index"),
    "typed input_nodes": ("NeighborLoader", _hetero, {"input_nodes": ("paper", AS_FLOAT)}, "input_nodes of 'paper'"),
    "typed edge_index": ("NeighborLoader", lambda: _float_typed_edges(_hetero()),
                         {"input_nodes": ("paper", torch.tensor([1]))}, "edge_index"),
    "typed edge_label_index": ("LinkNeighborLoader", _hetero,
                               {"edge_label_index": (("author", "writes", "paper"), torch.tensor([[1.0], [2.5]]))},
                               "edge_label_index of ('author', 'writes', 'paper')"),
}


@needs_pyg_sampler
@pytest.mark.parametrize("case", sorted(FLOAT_CASES))
def test_float_ids_are_refused_where_pyg_raises(case):
    loader, data, kwargs, named = FLOAT_CASES[case]
    with pytest.raises(Exception) as pyg_error:
        next(iter(getattr(pyg_loader, loader)(data(), [3], batch_size=2, **kwargs)))
    with pytest.raises(NotSupportedError, match=r"dtype torch\.float(32|64).*pass \.long\(\)") as ours:
        getattr(stp, loader)(data(), [3], batch_size=2, **kwargs)
    assert isinstance(ours.value, type(pyg_error.value)), (type(pyg_error.value), ours.value)
    assert isinstance(ours.value, (TypeError, RuntimeError, SparsetrainError)) and named in str(ours.value)
    assert "\n" not in str(ours.value)


def test_the_sampler_refuses_float_seeds_itself():
    sampler = stp.PyGNeighborSampler(_data(), [3], seed=0)
    with pytest.raises(NotSupportedError, match="inputs.node has dtype torch.float32"):
        sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=AS_FLOAT))
    with pytest.raises(NotSupportedError, match="inputs.col has dtype torch.float64"):
        sampler.sample_from_edges(EdgeSamplerInput(None, torch.tensor([1, 2]), torch.tensor([2.0, 3.5]).double()))
    nodes = torch.tensor([3, 4])
    ours = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=nodes))
    assert torch.equal(ours.node[:2], nodes)  # valid seeds still sample (seeds first, as PyG)


def test_edge_label_index_as_nested_lists_is_read_as_ids():
    data, pairs = _data(), [[1, 2, 7], [3, 4, 9]]
    got = next(iter(stp.LinkNeighborLoader(data, [3], edge_label_index=pairs, batch_size=3, seed=0)))
    assert torch.equal(got.n_id[got.edge_label_index], torch.tensor(pairs))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16])
def test_narrower_integer_ids_give_the_batches_of_int64(dtype):
    data = _data()
    seeds = torch.tensor([5, 9, 11, 40])
    base = [b.n_id for b in stp.NeighborLoader(data, [4, 2], input_nodes=seeds, batch_size=2, seed=1)]
    narrow = _data(edge_index=data.edge_index.to(torch.int32))
    got = [b.n_id for b in stp.NeighborLoader(narrow, [4, 2], input_nodes=seeds.to(dtype), batch_size=2, seed=1)]
    assert len(got) == len(base) == 2 and all(map(torch.equal, got, base))


def test_a_bool_mask_of_every_node_is_its_ids_and_any_other_length_is_refused():
    data, mask = _data(), torch.zeros(N, dtype=torch.bool)
    mask[[3, 17, 42]] = True
    by_mask = [b.n_id for b in stp.NeighborLoader(data, [3], input_nodes=mask, batch_size=2, seed=2)]
    by_ids = [b.n_id for b in stp.NeighborLoader(data, [3], input_nodes=torch.tensor([3, 17, 42]), batch_size=2,
                                                 seed=2)]
    assert len(by_mask) == 2 and all(map(torch.equal, by_mask, by_ids))
    for length in (N - 1, N + 1):  # PyG drops a short mask's tail silently (and reads past a long one)
        with pytest.raises(InputError, match=f"bool mask of shape \\[{length}\\] for {N} nodes"):
            stp.NeighborLoader(data, [3], input_nodes=torch.ones(length, dtype=torch.bool), batch_size=2)
    with pytest.raises(InputError, match="input_nodes of 'paper' is a bool mask of shape \\[39\\] for 40 nodes"):
        stp.NeighborLoader(_hetero(), [3], input_nodes=("paper", torch.ones(39, dtype=torch.bool)), batch_size=2)


OUT_OF_RANGE = {
    "negative input_nodes": ("NeighborLoader", _data, {"input_nodes": torch.tensor([-1, 2])}, r"\[-1, 2\]"),
    "input_nodes >= N": ("NeighborLoader", _data, {"input_nodes": torch.tensor([2, N])}, rf"\[2, {N}\]"),
    "edge_label_index >= N": ("LinkNeighborLoader", _data, {"edge_label_index": torch.tensor([[1, 2], [N, 4]])},
                              "row 1"),
    "typed input_nodes": ("NeighborLoader", _hetero, {"input_nodes": ("author", torch.tensor([20]))},
                          r"outside \[0, 20\)"),
    "typed edge_label_index": ("LinkNeighborLoader", _hetero,
                               {"edge_label_index": (("author", "writes", "paper"), torch.tensor([[25], [3]]))},
                               r"row 0 \(sources\) has ids in \[25, 25\], outside \[0, 20\)"),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_ids_out_of_range_are_refused_at_construction_as_pyg_s_index_error(case):
    # PyG's loader (torch-sparse) raises IndexError at the first batch, or reads past the graph and dies of SIGBUS:
    # not run here
    loader, data, kwargs, message = OUT_OF_RANGE[case]
    with pytest.raises(InputError, match=message) as ours:
        getattr(stp, loader)(data(), [3], batch_size=2, **kwargs)
    assert isinstance(ours.value, IndexError) and isinstance(ours.value, ValueError)


SHAPES = {  # what PyG misreads or asserts on without a message
    "1-D edge_label_index": ("LinkNeighborLoader", _data, {"edge_label_index": torch.tensor([1, 2, 3, 4])},
                             InputError, r"shape \[4\]; pass \[2, num_edges\]"),
    "3-row edge_label_index": ("LinkNeighborLoader", _data, {"edge_label_index": torch.zeros(3, 4, dtype=torch.long)},
                               InputError, r"shape \[3, 4\]"),
    "2-D input_nodes": ("NeighborLoader", _data, {"input_nodes": torch.tensor([[1, 2]])}, InputError,
                        r"shape \[1, 2\]; pass a 1-D tensor"),
    "edge_label too short": ("LinkNeighborLoader", _data, {"edge_label_index": torch.tensor([[1, 2], [3, 4]]),
                                                           "edge_label": torch.ones(1)}, InputError,
                             r"edge_label has shape \[1\] for 2 seeds"),
    "input_time too short": ("NeighborLoader", lambda: _data(time=torch.arange(N)),
                             {"time_attr": "time", "input_nodes": torch.tensor([1, 2, 3]),
                              "input_time": torch.tensor([5, 6])}, InputError, r"input_time has shape \[2\]"),
    "a 3-tuple input_nodes": ("NeighborLoader", _data, {"input_nodes": ("paper", torch.tensor([1]), 3)},
                              NotSupportedError, "input_nodes is a tuple that is not a tensor of ids"),
    "uint8 input_nodes": ("NeighborLoader", _data, {"input_nodes": torch.tensor([1, 2], dtype=torch.uint8)},
                          NotSupportedError, "uint8 .*as a mask"),
    "float list input_nodes": ("NeighborLoader", _data, {"input_nodes": [1.5, 2.0]}, NotSupportedError,
                               "torch.float32"),
    "ids for typed data": ("NeighborLoader", _hetero, {"input_nodes": torch.tensor([1])}, stp.SettingError,
                           r"data is typed \(HeteroData\); pass a node type or \(node type, ids\)"),
    "a node type for untyped data": ("NeighborLoader", _data, {"input_nodes": ("paper", torch.tensor([1]))},
                                     stp.SettingError, r"data is untyped \(Data\)"),
    "an unknown node type": ("NeighborLoader", _hetero, {"input_nodes": ("venue", torch.tensor([1]))},
                             InputError, "node type 'venue'; the data's node types are"),
    "time_attr of neither length": ("NeighborLoader", lambda: _data(time=torch.arange(N + 3)), {"time_attr": "time"},
                                    stp.SettingError, rf"shape \[{N + 3}\]: neither one time per node \({N}\) "
                                    r"nor one per edge \(400\)"),
    "untyped edge_label_index for typed data": ("LinkNeighborLoader", _hetero,
                                                {"edge_label_index": torch.tensor([[1], [2]])}, stp.SettingError,
                                                "an edge type or"),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_misshapen_input_is_refused_in_one_line(case):
    loader, data, kwargs, error, message = SHAPES[case]
    with pytest.raises(error, match=message) as ours:
        getattr(stp, loader)(data(), [3], batch_size=2, **kwargs)
    assert "\n" not in str(ours.value)


def _typed_times(value: float) -> HeteroData:
    data = _hetero()
    data["paper"].time, data["author"].time = torch.arange(40.0), torch.arange(20.0)
    data["author"].time[7] = value
    return data


def _node_times(value: float) -> Data:
    time = torch.arange(float(N))
    time[5] = value
    return _data(time=time)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_times_that_are_not_finite_are_refused_as_the_importer_refuses_them(value, tmp_path):
    data = _node_times(value)
    with pytest.raises(ValueError, match="not a finite number"):  # the importer's rule
        from_pyg(data, tmp_path / "ds")
    with pytest.raises(SparsetrainError, match=r"data\.time: node 5: node time (nan|inf|-inf) is not a finite"):
        stp.NeighborLoader(data, [3], time_attr="time", batch_size=2)
    with pytest.raises(SparsetrainError, match=r"data\['author'\]\.time: node 7: node time"):
        stp.NeighborLoader(_typed_times(value), [3], time_attr="time", input_nodes="paper", batch_size=2)
    edge_time = torch.zeros(400)
    edge_time[9] = value
    with pytest.raises(SparsetrainError, match=r"data\.edge_time: edge 9: edge time"):
        stp.NeighborLoader(_data(edge_time=edge_time), [3], time_attr="edge_time", input_time=torch.zeros(N),
                           batch_size=2)
    seeds = torch.tensor([1, 2, 3])
    with pytest.raises(SparsetrainError, match=r"input_time: seed 1: seed time"):
        stp.NeighborLoader(_node_times(1.0), [3], time_attr="time", input_nodes=seeds,
                           input_time=torch.tensor([4.0, value, 5.0]), batch_size=2)
    with pytest.raises(SparsetrainError, match=r"edge_label_time: seed 0: seed time"):
        stp.LinkNeighborLoader(_node_times(1.0), [3], time_attr="time", edge_label_index=torch.tensor([[1], [2]]),
                               edge_label_time=torch.tensor([value]), batch_size=2)


def test_finite_times_still_sample_no_neighbour_later_than_its_seed():
    data = _node_times(3.0)
    edges = 0
    for batch in stp.NeighborLoader(data, [-1], time_attr="time", batch_size=4, seed=0):
        src, dst = batch.n_id[batch.edge_index]
        assert bool((data.time[src] <= data.time[dst]).all())
        edges += src.numel()
    later = data.time[data.edge_index[0]] <= data.time[data.edge_index[1]]
    assert edges == int(later.sum()) > 0  # every edge no later than its seed, once (NaN times gave none)


@needs_pyg_sampler
def test_a_node_type_without_attributes_counts_its_nodes_from_the_edges_as_pyg_does():
    data = _hetero()
    del data["author"].x  # PyG warns that it cannot infer num_nodes, then samples the edges' ids
    kwargs = {"input_nodes": ("paper", torch.arange(8)), "batch_size": 8}
    with pytest.warns(UserWarning):
        ref = next(iter(pyg_loader.NeighborLoader(data, [-1], **kwargs)))
        ours = next(iter(stp.NeighborLoader(data, [-1], seed=0, **kwargs)))
    assert ours["author"].n_id.numel() > 0
    for node_type in ("paper", "author"):
        assert sorted(ours[node_type].n_id.tolist()) == sorted(ref[node_type].n_id.tolist())


def test_the_dataset_feature_store_refuses_float_indices_and_short_masks(tmp_path):
    from torch_geometric.data.feature_store import TensorAttr

    data = _data()
    fs = stp.DatasetFeatureStore(from_pyg(data, tmp_path / "ds", quiet=True))
    ids = torch.tensor([4, 0, 4, N - 1])
    assert torch.equal(fs[TensorAttr(None, "y", ids.to(torch.int32))], data.y[ids])
    assert torch.equal(fs[TensorAttr(None, "y", 7)], data.y[[7]])
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[2, 9]] = True
    assert torch.equal(fs[TensorAttr(None, "y", mask)], data.y[mask])
    with pytest.raises(NotSupportedError, match="the index of 'x' has dtype torch.float32"):
        fs[TensorAttr(None, "x", ids.float() + 0.5)]
    with pytest.raises(InputError, match=f"bool mask of shape \\[{N - 1}\\] for {N} nodes"):
        fs[TensorAttr(None, "y", mask[1:])]


def test_a_graph_store_s_edge_label_index_pair_is_checked_and_a_dataset_is_pointed_to_it(tmp_path):
    data = _data()
    ds = from_pyg(data, tmp_path / "ds", quiet=True)
    stores, pairs = (stp.DatasetFeatureStore(ds), stp.DatasetGraphStore(ds)), torch.tensor([[1, 2, 7], [3, 4, 9]])
    got = next(iter(stp.LinkNeighborLoader(stores, [3], edge_label_index=(None, pairs), batch_size=3, seed=0)))
    assert torch.equal(got.n_id[got.edge_label_index], pairs)
    with pytest.raises(NotSupportedError, match="edge_label_index has dtype torch.float32"):
        stp.LinkNeighborLoader(stores, [3], edge_label_index=(None, pairs.float()), batch_size=3)
    with pytest.raises(stp.SettingError, match=r"for a sparsetrain dataset pass \(DatasetFeatureStore\(ds\)"):
        stp.LinkNeighborLoader(str(ds.path), [3], edge_label_index=pairs, batch_size=3)


@pytest.mark.parametrize("num_neighbors", [None, 3, "a", [1.5], [-2], [2**40]])
def test_num_neighbors_that_is_not_a_list_of_counts_is_one_line_naming_num_neighbors(num_neighbors):
    with pytest.raises(ValueError) as info:
        stp.NeighborLoader(_data(), num_neighbors=num_neighbors, batch_size=4)
    message = str(info.value)
    assert isinstance(info.value, SparsetrainError) and "\n" not in message
    assert message.startswith(f"num_neighbors={num_neighbors!r}") and "fanouts=" not in message


def test_an_empty_list_of_input_nodes_is_an_empty_epoch_not_a_float_dtype_error():
    loader = stp.NeighborLoader(_data(), num_neighbors=[2], batch_size=4, input_nodes=[])
    assert len(loader) == 0 and list(loader) == []
