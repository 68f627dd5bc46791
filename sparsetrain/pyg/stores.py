"""PyG's remote-backend interfaces over a sparsetrain dataset: ``(DatasetFeatureStore(ds), DatasetGraphStore(ds))``.

PyG's loaders accept a ``(FeatureStore, GraphStore)`` pair in place of a ``Data``. These two serve a
dataset folder without loading it: node features through sparsetrain's storage tiers (the dataset's
memory-mapped store, or any :class:`~sparsetrain.storage.FeatureSource` such as a ``CachedFeatures``
in front of it), labels from memory, and the topology as the dataset's own CSC arrays. Both are
read-only: ``put``/``remove`` report failure, as PyG's interface allows.
"""

from __future__ import annotations

import os

import torch
from torch_geometric.data import FeatureStore, GraphStore
from torch_geometric.data.feature_store import TensorAttr
from torch_geometric.data.graph_store import EdgeAttr, EdgeLayout

from sparsetrain.datasets.dataset import GraphDataset, load
from sparsetrain.errors import SettingError
from sparsetrain.pyg.ids import checked_ids
from sparsetrain.sampling.graph import CSCGraph
from sparsetrain.storage.base import FeatureSource
from sparsetrain.storage.rows import gather_rows


def as_dataset(data: GraphDataset | str | os.PathLike) -> GraphDataset:
    """A loaded dataset for a dataset object or folder."""
    return data if isinstance(data, GraphDataset) else load(data)


class DatasetFeatureStore(FeatureStore):
    """Node attributes ``x`` (features) and ``y`` (labels) of a sparsetrain dataset, as PyG's ``FeatureStore``.

    ``features`` replaces the dataset's own store (e.g. a ``CachedFeatures`` over ``ds.features``).
    Edge features are not served here: PyG's loaders index every attribute of a homogeneous
    feature store by node ids (``sparsetrain.pyg.NeighborLoader`` attaches ``edge_attr``).
    """

    def __init__(self, data: GraphDataset | str | os.PathLike, features: FeatureSource | None = None) -> None:
        super().__init__()
        self.dataset = as_dataset(data)
        self.features = features if features is not None else self.dataset.features
        self._tables = {name: table for name,
                        table in (("x", self.features), ("y", self.dataset.labels)) if table is not None}

    def _table(self, attr: TensorAttr):
        table = self._tables.get(attr.attr_name)
        if table is None or attr.group_name is not None:
            return None
        return table

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor | None:
        table = self._table(attr)
        if table is None:
            return None
        index = attr.index if attr.is_set("index") else None
        if index is None or isinstance(index, slice):
            index = torch.arange(table.shape[0])[index if isinstance(index, slice) else slice(None)]
        else:
            index = torch.as_tensor(index)
            index = index.view(-1) if index.dim() == 0 else index
            mask = index.dtype == torch.bool
            index = checked_ids(index, f"the index of {attr.attr_name!r}", table.shape[0] if mask else None, mask=True)
            index = index.nonzero().view(-1) if mask else index.to(torch.int64)
        if isinstance(table, torch.Tensor):
            return table[index]
        return gather_rows(table, index)

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        table = self._table(attr)
        return None if table is None else tuple(table.shape)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=None, attr_name=name) for name in self._tables]

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        return False

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return False

    def __repr__(self) -> str:
        return f"DatasetFeatureStore({self.dataset.path}, attrs={list(self._tables)})"


class DatasetGraphStore(GraphStore):
    """The topology of a sparsetrain dataset (or any :class:`~sparsetrain.sampling.CSCGraph`) as PyG's ``GraphStore``,
    in CSC layout.

    ``csc()`` hands out the graph's own arrays: ``indptr`` as is, ``indices`` as is when they are int64
    (PyG's samplers need int64; int32 indices are widened once, on first use). Edge ids are the
    graph's CSC positions (or its ``edge_perm``, returned as the permutation).
    """

    def __init__(self, data: GraphDataset | CSCGraph | str | os.PathLike) -> None:
        super().__init__()
        self.graph = data if isinstance(data, CSCGraph) else as_dataset(data).graph
        self._indices64: torch.Tensor | None = None

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        n = self.graph.num_nodes
        return [EdgeAttr(edge_type=None, layout=EdgeLayout.CSC, is_sorted=True, size=(n, n))]

    def _get_edge_index(self, edge_attr: EdgeAttr):
        if edge_attr.edge_type is not None:
            return None
        if edge_attr.layout != EdgeLayout.CSC:
            raise SettingError("DatasetGraphStore holds the graph in CSC layout only; ask for layout='csc' (got "
                               f"{edge_attr.layout.value!r})")
        if self._indices64 is None:
            self.graph.check_files()
            indices = self.graph.indices
            self._indices64 = indices if indices.dtype == torch.int64 else indices.to(torch.int64)
        return self._indices64, self.graph.indptr

    def _edge_to_layout(self, attr: EdgeAttr, layout: EdgeLayout, store: bool = False):
        row, col, perm = super()._edge_to_layout(attr, layout, store)
        if layout == EdgeLayout.CSC and perm is None:
            perm = self.graph.edge_perm
        return row, col, perm

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        return False

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return False

    def __repr__(self) -> str:
        return f"DatasetGraphStore({self.graph!r})"
