"""The sparsetrain topology behind PyG data: one :class:`~sparsetrain.sampling.CSCGraph`, typed when the data is.

:func:`graph_of` reads a ``Data`` (no ``edge_index``: a graph without edges), a ``HeteroData``, a sparsetrain
dataset (object or folder) or a ``(FeatureStore, GraphStore)`` pair, homogeneous or typed. A ``HeteroData``
becomes a typed graph whose edge types are the data's; a ``Data`` becomes the one-type graph. Edge ids are
the caller's (``edge_index`` columns, or a graph store's COO positions), so PyG's ``edge_permutation`` is ``None``.
``time_attr`` names node or edge times (PyG's rule: on a graph store, ``"time"`` is node time, any other name edge
time); they come back per node type / edge type, indexed by node id / edge id, every one finite (the importer's rule,
:func:`~sparsetrain.datasets.readers.check_times`: a NaN time would leave every seed without neighbours). Edge
indices must be integers (:mod:`sparsetrain.pyg.ids`), as PyG's own sampler requires.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch_geometric.data import Data, HeteroData, remote_backend_utils

from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.readers import check_times
from sparsetrain.errors import NotSupportedError, SettingError
from sparsetrain.pyg.ids import checked_edge_index, checked_ids
from sparsetrain.pyg.stores import DatasetGraphStore, as_dataset
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE, CSCGraph, EdgeType


@dataclass
class PyGGraph:
    """``graph`` and what PyG's sampler contract needs beside it.

    ``hetero``: PyG sees typed data (``HeteroSamplerOutput``); else the graph is the one-type case. Left out, the
    graph's own view: the adapter's one view decision. ``node_time`` /
    ``edge_time``: ``{node_type: [N]}`` / ``{edge_type: [E]}`` (homogeneous: the one type's key), or ``None``.
    """

    graph: CSCGraph
    hetero: bool | None = None
    node_time: dict[str, torch.Tensor] | None = None
    edge_time: dict[EdgeType, torch.Tensor] | None = None
    weighted: bool = False
    num_nodes: int | dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.hetero = self.graph.is_typed if self.hetero is None else self.hetero
        self.num_nodes = self.graph.num_nodes

    @property
    def edge_types(self) -> list[EdgeType]:
        return self.graph.edge_types


def graph_of(data: Any, weight_attr: str | None = None, time_attr: str | None = None) -> PyGGraph:
    """The topology of ``data`` (see the module docstring), with edge weights ``weight_attr`` and times
    ``time_attr``."""
    if isinstance(data, Data):
        return _from_data(data, weight_attr, time_attr)
    if isinstance(data, HeteroData):
        return _from_hetero(data, weight_attr, time_attr)
    if isinstance(data, (GraphDataset, str, os.PathLike)):
        if time_attr is not None or weight_attr is not None:
            raise SettingError("time_attr / weight_attr are not read from a sparsetrain dataset; pass a Data "
                               "holding them")
        return PyGGraph(as_dataset(data).graph)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return _from_stores(*data, weight_attr, time_attr)
    raise SettingError(f"data is a {type(data).__name__}; pass a torch_geometric Data or HeteroData, a sparsetrain "
                       "dataset (or its folder), or a (FeatureStore, GraphStore) pair")


def _from_data(data: Data, weight_attr: str | None, time_attr: str | None) -> PyGGraph:
    num_nodes = int(data.num_nodes or 0)
    edge_index = data.edge_index if "edge_index" in data else torch.zeros(2, 0, dtype=torch.int64)
    checked_edge_index(edge_index, "data.edge_index")  # (the graph checks the range)
    weight = None if weight_attr is None else _attr(data, weight_attr, "weight_attr").float()
    graph = CSCGraph.from_edge_index(edge_index, num_nodes, weight)
    node_time = edge_time = None
    if time_attr is not None:
        time = _attr(data, time_attr, "time_attr")
        if data.is_node_attr(time_attr):
            node_time = {NODE_TYPE: time}
        elif data.is_edge_attr(time_attr):
            edge_time = {EDGE_TYPE: time}
        else:
            shape = list(getattr(time, "shape", []))
            raise SettingError(f"time_attr={time_attr!r} has shape {shape}: neither one time per node ({num_nodes}) "
                               f"nor one per edge ({edge_index.shape[1]}); give one of them")
    _check_times(node_time, "node", lambda _: f"data.{time_attr}")
    _check_times(edge_time, "edge", lambda _: f"data.{time_attr}")
    return PyGGraph(graph, False, node_time, edge_time, weight is not None)


def _from_hetero(data: HeteroData, weight_attr: str | None, time_attr: str | None) -> PyGGraph:
    num_nodes = {t: _num_nodes(data, t) for t in data.node_types}
    weights = None
    if weight_attr is not None:
        weights = {et: _attr(data[et], weight_attr, f"weight_attr of {et}").float() for et in data.edge_types}
    edge_index = {et: checked_edge_index(data[et].edge_index, f"data[{et}].edge_index") for et in data.edge_types}
    graph = CSCGraph.from_edge_index_dict(edge_index, num_nodes, weights)
    node_time = edge_time = None
    if time_attr is not None:
        node_time = {t: data[t][time_attr] for t in data.node_types if time_attr in data[t]}
        edge_time = {et: data[et][time_attr] for et in data.edge_types if time_attr in data[et]}
        if node_time and edge_time:
            raise SettingError(f"time_attr={time_attr!r} holds both node-level and edge-level times; keep one of "
                               "them")
        if not node_time and not edge_time:
            raise SettingError(f"time_attr={time_attr!r} is neither a node-level nor an edge-level attribute of "
                               "the data")
        node_time, edge_time = node_time or None, edge_time or None
        _check_times(node_time, "node", lambda t: f"data[{t!r}].{time_attr}")
        _check_times(edge_time, "edge", lambda et: f"data[{et}].{time_attr}")
    return PyGGraph(graph, True, node_time, edge_time, weights is not None)


def _num_nodes(data: HeteroData, node_type: str) -> int:
    """``data[node_type].num_nodes``; for a type with no node attribute, 1 + its largest id in an edge index (as PyG's
    sampler reads such a type, after PyG's warning)."""
    if data[node_type].num_nodes is not None:
        return int(data[node_type].num_nodes)
    ends = [data[et].edge_index[i] for et in data.edge_types for i in (0, 1) if et[2 * i] == node_type]
    return max((int(ids.max()) + 1 for ids in ends if ids.numel()), default=0)


def _from_stores(feature_store, graph_store, weight_attr: str | None, time_attr: str | None) -> PyGGraph:
    if weight_attr is not None:  # as PyG's own sampler
        raise NotSupportedError("weight_attr is not supported for (FeatureStore, GraphStore) data; pass a Data or "
                                "HeteroData holding that edge attribute")
    if isinstance(graph_store, DatasetGraphStore):
        view = PyGGraph(graph_store.graph)
    else:
        edge_attrs = graph_store.get_all_edge_attrs()
        hetero = any(attr.edge_type is not None for attr in edge_attrs)
        row, colptr, perm = graph_store.csc()
        for et, ids in (row.items() if isinstance(row, dict) else [(None, row)]):
            checked_ids(ids, "the graph store's edge_index" + ("" if et is None else f" of {et}"))
        if not hetero:
            graph = CSCGraph(colptr.to(torch.int64), row, edge_perm=None if perm is None else perm.to(torch.int64))
        else:
            node_types = {t for attr in feature_store.get_all_tensor_attrs() if isinstance(attr.group_name, str)
                          for t in [attr.group_name]} | {t for et in row for t in (et[0], et[-1])}
            num_nodes = {t: int(remote_backend_utils.num_nodes(feature_store, graph_store, t))
                         for t in sorted(node_types)}
            relations = {}
            for et in row:
                ids = None if perm.get(et) is None else perm[et].to(torch.int64)
                relations[tuple(et)] = CSCGraph(colptr[et].to(torch.int64), row[et], edge_perm=ids)
            graph = CSCGraph.from_relations(num_nodes, relations)
        view = PyGGraph(graph, hetero)
    if time_attr is not None:
        view.node_time, view.edge_time = _store_times(feature_store, time_attr, view.hetero)
        name = f"the feature store's {time_attr!r}"
        _check_times(view.node_time, "node", lambda t: f"{name} of {t!r}" if view.hetero else name)
        _check_times(view.edge_time, "edge", lambda et: f"{name} of {et}" if view.hetero else name)
    return view


def _store_times(feature_store, time_attr: str, hetero: bool):
    """PyG's rule for times in a feature store: node-type group names hold node times, edge-type ones edge times."""
    attrs = [attr for attr in feature_store.get_all_tensor_attrs() if attr.attr_name == time_attr]
    if not attrs:
        raise SettingError(f"time_attr={time_attr!r}: the feature store has no tensor of that name")
    tensors = {}
    for attr in attrs:
        attr.index = None
        tensors[attr.group_name] = feature_store.get_tensor(attr)
    if not hetero:
        time = next(iter(tensors.values()))
        return ({NODE_TYPE: time}, None) if time_attr == "time" else (None, {EDGE_TYPE: time})
    if all(isinstance(g, str) for g in tensors):
        return tensors, None
    if all(isinstance(g, tuple) for g in tensors):
        return None, tensors
    raise SettingError(f"time_attr={time_attr!r} is stored for both node types and edge types; keep one of them")


def check_finite_times(values: torch.Tensor, name: str, what: str) -> None:
    """Every ``what`` time (node, edge, seed) in ``values``, named ``name``, finite, else one line naming the first bad
    entry: the importer's rule (:func:`~sparsetrain.datasets.readers.check_times`)."""
    values = torch.as_tensor(values).detach().cpu().reshape(-1)
    values = values.double() if values.dtype == torch.bfloat16 else values  # (NumPy has no bfloat16)
    check_times(values.numpy(), name, lambda i: f"{what} {i}", f"{what} time")


def _check_times(times: dict | None, what: str, name_of: Callable[[Any], str]) -> None:
    for key, values in (times or {}).items():
        check_finite_times(values, name_of(key), what)


def _attr(store, name: str, what: str) -> torch.Tensor:
    if name not in store:
        raise SettingError(f"{what}={name!r}: the data has no attribute of that name")
    return store[name]
