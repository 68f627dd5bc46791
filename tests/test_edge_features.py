"""Edge features in the dataset format: from_pyg keeps ``edge_attr`` in CSC order, the loader gathers them per block."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from sparsetrain.datasets import from_pyg, load
from sparsetrain.engine import Loader
from sparsetrain.errors import DatasetError
from sparsetrain.sampling import NeighborSampler


def multigraph_data(num_nodes: int = 200, num_edges: int = 1500, dim: int = 3, seed: int = 0) -> Data:
    """Directed, with parallel edges and self-loops, in random order, features a plain torch reference can check."""
    rng = np.random.default_rng(seed)
    edge_index = torch.from_numpy(rng.integers(0, num_nodes, (2, num_edges)))
    return Data(
        edge_index=edge_index,
        edge_attr=torch.from_numpy(rng.standard_normal((num_edges, dim)).astype(np.float32)),
        x=torch.randn(num_nodes, 4),
        y=torch.from_numpy(rng.integers(0, 3, num_nodes)),
        num_nodes=num_nodes,
    )


def rows_by_edge(edge_index: torch.Tensor, attr: torch.Tensor) -> dict[tuple[int, int], list[tuple[float, ...]]]:
    out = defaultdict(list)
    for s, d, row in zip(*edge_index.tolist(), attr.tolist()):
        out[(s, d)].append(tuple(row))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("reorder", [None, "degree"])
def test_from_pyg_keeps_edge_attr_in_csc_order(tmp_path, reorder):
    data = multigraph_data()
    ds = from_pyg(data, tmp_path / "g", reorder=reorder, quiet=True)
    assert (
        ds.edge_features.shape == (data.num_edges, 3)
        and ds.meta["files"][ds.meta["edge_types"][0]["features"]]["shape"][1] == 3
    )
    src, dst = ds.graph.to_edge_index()
    if ds.original_ids is not None:
        src, dst = ds.original_ids[src], ds.original_ids[dst]
    stored = ds.edge_features.gather(torch.arange(ds.num_edges))
    assert rows_by_edge(torch.stack([src, dst]), stored) == rows_by_edge(data.edge_index, data.edge_attr)
    assert torch.equal(load(tmp_path / "g").edge_features.gather(torch.arange(5)), stored[:5])


def test_from_pyg_says_what_it_does_not_keep(tmp_path):
    data = multigraph_data()
    data.edge_label = torch.zeros(data.num_edges)
    with pytest.warns(UserWarning, match="not kept: edge_label"):
        from_pyg(data, tmp_path / "a", quiet=True)
    del data.edge_label
    with pytest.warns(UserWarning, match="edge_attr is not kept because undirected"):
        ds = from_pyg(data, tmp_path / "b", undirected=True, quiet=True)
    assert ds.edge_features is None and "edge_features.npy" not in ds.meta["files"]


def test_bad_edge_attr_is_a_one_line_error_naming_the_row(tmp_path):
    data = multigraph_data()
    data.edge_attr[7, 1] = float("nan")
    with pytest.raises(DatasetError, match=r"data\.edge_attr: row 7, column 1: nan"):
        from_pyg(data, tmp_path / "c", quiet=True)
    assert not (tmp_path / "c").exists()
    data.edge_attr = torch.randn(3, 2)
    with pytest.raises(DatasetError, match="one row of at least one feature per edge"):
        from_pyg(data, tmp_path / "d", quiet=True)


def test_loader_attaches_each_blocks_edge_features(tmp_path):
    data = multigraph_data()
    ds = from_pyg(data, tmp_path / "g", quiet=True)
    loader = Loader(NeighborSampler(ds.graph, [4, 3], seed=0), ds.features, ds.labels, torch.arange(40), batch_size=16,
                    prefetch=0, edge_features=ds.edge_features)
    reference = rows_by_edge(data.edge_index, data.edge_attr)
    for mb in loader:
        assert len(mb.edge_attr) == len(mb.blocks)
        for block, attr in zip(mb.blocks, mb.edge_attr):
            assert attr.shape == (block.num_edges, 3)
            src, dst = mb.input_nodes[block.edge_index]
            for s, d, row in zip(src.tolist(), dst.tolist(), attr.tolist()):
                assert tuple(row) in reference[(s, d)]


def test_loader_attaches_typed_edge_features_per_edge_type(tmp_path):
    from torch_geometric.data import HeteroData

    rng = np.random.default_rng(1)
    data = HeteroData()
    data["paper"].x, data["paper"].y = torch.randn(120, 4), torch.from_numpy(rng.integers(0, 3, 120))
    data["author"].x = torch.randn(80, 4)
    writes = torch.stack([torch.from_numpy(rng.integers(0, 80, 600)), torch.from_numpy(rng.integers(0, 120, 600))])
    data["author", "writes", "paper"].edge_index = writes
    data["author", "writes", "paper"].edge_attr = torch.from_numpy(rng.standard_normal((600, 2)).astype(np.float32))
    data["paper", "cites", "paper"].edge_index = torch.from_numpy(rng.integers(0, 120, (2, 500)))
    ds = from_pyg(data, tmp_path / "g", quiet=True)
    assert ds.is_typed and set(ds.edge_features) == {("author", "writes", "paper")}
    loader = Loader(NeighborSampler(ds.graph, [4, 3], seed_type="paper", seed=0), dict(ds.features), ds.labels["paper"],
                    torch.arange(60), batch_size=16, prefetch=0, edge_features=dict(ds.edge_features))
    et = ("author", "writes", "paper")
    reference = rows_by_edge(writes, data[et].edge_attr)
    checked = 0
    for mb in loader:
        for block, attr in zip(mb.blocks, mb.edge_attr):
            assert set(attr) == {et}
            src_local, dst_local = block.edge_index[et]
            src, dst = mb.input_nodes["author"][src_local], mb.input_nodes["paper"][dst_local]
            assert attr[et].shape == (len(src), 2)
            for s, d, row in zip(src.tolist(), dst.tolist(), attr[et].tolist()):
                assert tuple(row) in reference[(s, d)]
                checked += 1
    assert checked > 100
