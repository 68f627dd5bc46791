"""`NeighborLoader`, `LinkNeighborLoader`: PyG's loaders (same signatures, same batch fields) on sparsetrain's sampler.

The two-line change in a PyG script is the import. ``data`` may also be a sparsetrain dataset
(object or folder): it is served through :class:`~sparsetrain.pyg.stores.DatasetFeatureStore` and
:class:`~sparsetrain.pyg.stores.DatasetGraphStore` (``input_nodes`` may then name a split,
``"train"``), and batches gain ``edge_attr`` gathered from the dataset's edge features.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch_geometric.loader
from torch_geometric.data import HeteroData
from torch_geometric.loader.base import DataLoaderIterator

from sparsetrain._phases import phase
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.errors import InputError, SettingError
from sparsetrain.pyg.device import Placement, loader_device
from sparsetrain.pyg.graph import check_finite_times
from sparsetrain.pyg.ids import checked_edge_index, checked_ids
from sparsetrain.pyg.partitioned import is_partitioned, partitioned_loader_args
from sparsetrain.pyg.sampler import PyGNeighborSampler
from sparsetrain.pyg.stores import DatasetFeatureStore, DatasetGraphStore, as_dataset
from sparsetrain.pyg.workers import SamplingThreads, epoch_length, uses_threads
from sparsetrain.sampling.edge_seeds import EXCLUDE_MODES
from sparsetrain.storage.rows import gather_rows


class _SamplingThreadsMixin:
    """``num_workers > 0``, no ``multiprocessing_context``: batches made in threads (:mod:`sparsetrain.pyg.workers`).
    Every epoch reserves its batch keys when it starts (:mod:`sparsetrain.pyg.keys`)."""

    def _get_iterator(self):
        sampler = getattr(self, "node_sampler", None) or getattr(self, "link_sampler", None)
        if not self.sampling_threads:
            if isinstance(sampler, PyGNeighborSampler):
                sampler.keys.start_epoch(epoch_length(self._index_sampler))
            return super()._get_iterator()
        batches = SamplingThreads(self, sampler)  # (its epochs, persistent ones too, reserve their keys)
        return batches if self.filter_per_worker else DataLoaderIterator(batches, self.filter_fn)


class _DeviceMixin:
    """``device=``: batches cut from data placed on that device (:mod:`sparsetrain.pyg.device`)."""

    placement: Placement | None = None

    def _place(self, data, device):
        """The data the loader cuts batches from: ``data`` itself, or placed on ``device``."""
        if device is None:
            return data
        self.placement = Placement(data, device)
        return self.placement.data

    def filter_fn(self, out):
        with phase("fetch"):  # the batch cut from the data: its features, labels and edges
            if self.placement is None:
                return super().filter_fn(out)
            return self.placement.finish(super().filter_fn(self.placement.sampled(out)))


class NeighborLoader(_SamplingThreadsMixin, _DeviceMixin, torch_geometric.loader.NeighborLoader):
    """``torch_geometric.loader.NeighborLoader`` with :class:`sparsetrain.pyg.PyGNeighborSampler` behind it.

    Arguments and batch fields are PyG's (``x``, ``y``, ``edge_index``, ``n_id``, ``e_id``, ``edge_attr``,
    ``batch_size``, ``input_id``, ``num_sampled_nodes``, ``num_sampled_edges``). ``seed`` fixes the
    sampler's random stream. A dataset's ``features`` store may be swapped (e.g. a ``CachedFeatures``).
    ``num_workers > 0`` samples in that many threads of this process (:mod:`sparsetrain.pyg.workers`; the same
    batches as ``num_workers=0``, no ``__main__`` guard needed); pass ``multiprocessing_context`` for processes.
    ``device`` (not in PyG; cuGraph-PyG's idea): sample on that GPU and yield batches already there, the data's
    tensors moved to it when they fit, node features otherwise read zero-copy from pinned host memory
    (:mod:`sparsetrain.pyg.device`); the same batches as without it. A ``Data`` already on a GPU samples there too.
    """

    def __init__(self, data, num_neighbors, input_nodes=None, input_time=None, replace: bool = False,
                 subgraph_type="directional", disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: str | None = None, weight_attr: str | None = None, transform=None,
                 transform_sampler_output=None, is_sorted: bool = False, filter_per_worker: bool | None = None,
                 neighbor_sampler: PyGNeighborSampler | None = None, directed: bool = True, *, seed: int | None = None,
                 features=None, device=None, **kwargs: Any) -> None:
        self.edge_features = None
        if isinstance(data, (GraphDataset, str, os.PathLike)):
            ds = as_dataset(data)
            if isinstance(input_nodes, str):
                if input_nodes not in ds.split:
                    raise SettingError(f"input_nodes={input_nodes!r} is not a split of {ds.path} (it has "
                                       f"{', '.join(ds.split) or 'none'})")
                input_nodes = ds.split[input_nodes]
            self.edge_features = getattr(ds, "edge_features", None)
            data = (DatasetFeatureStore(ds, features), DatasetGraphStore(ds))
        elif is_partitioned(data):
            input_nodes, kwargs = partitioned_loader_args(
                data, input_nodes, kwargs, seed if neighbor_sampler is None else neighbor_sampler.seed)
        elif features is not None:
            raise SettingError("features= replaces a sparsetrain dataset's feature store; with other data, put "
                               "features in the data")
        self.sampling_threads = uses_threads(kwargs.get("num_workers", 0), kwargs.get("multiprocessing_context"))
        device = loader_device(data, device)  # a Data already on a GPU is placed as device= would place it
        placed = self._place(data, device)
        kwargs = unpinned_on_gpu(kwargs, device)
        if neighbor_sampler is None:
            neighbor_sampler = PyGNeighborSampler(data, num_neighbors, subgraph_type=subgraph_type, replace=replace,
                                                  disjoint=disjoint, temporal_strategy=temporal_strategy,
                                                  time_attr=time_attr, weight_attr=weight_attr, is_sorted=is_sorted,
                                                  directed=directed, seed=seed, device=device)
        input_nodes = _on_host(_checked_input_nodes(input_nodes, getattr(neighbor_sampler, "num_nodes", None)))
        super().__init__(placed, num_neighbors, input_nodes=input_nodes, input_time=input_time, replace=replace,
                         subgraph_type=subgraph_type, disjoint=disjoint, temporal_strategy=temporal_strategy,
                         time_attr=time_attr, weight_attr=weight_attr, transform=transform,
                         transform_sampler_output=transform_sampler_output, is_sorted=is_sorted,
                         filter_per_worker=filter_per_worker, neighbor_sampler=neighbor_sampler, directed=directed,
                         **kwargs)
        _check_per_seed(self.input_data.node, {"input_time": self.input_data.time})

    def filter_fn(self, out):
        data = super().filter_fn(out)
        if self.edge_features is not None and "e_id" in data:
            data.edge_attr = gather_rows(self.edge_features, data.e_id.to(torch.int64))
        return data


class LinkNeighborLoader(_SamplingThreadsMixin, _DeviceMixin, torch_geometric.loader.LinkNeighborLoader):
    """``torch_geometric.loader.LinkNeighborLoader`` with :class:`sparsetrain.pyg.PyGNeighborSampler` behind it.

    Arguments and batch fields are PyG's (``edge_label_index``/``edge_label`` for binary negatives,
    ``src_index``/``dst_pos_index``/``dst_neg_index`` for triplet ones, ``n_id``, ``e_id``, ``input_id``, ...).
    ``seed`` fixes the sampler's random stream (neighbors and negatives); ``num_workers`` as in
    :class:`NeighborLoader`. ``exclude_seed_edges`` (not in PyG) removes edges from the sampled subgraph, so a
    model cannot read a positive label off the graph: ``"none"`` (default) keeps them all, as PyG's loader does;
    ``"self"`` removes every sampled edge ``u -> v`` that is a positive seed edge of the batch (parallel copies
    too); ``"reverse"`` also ``v -> u`` (for undirected graphs). Negatives are never removed. ``device`` as in
    :class:`NeighborLoader` (seed edges joining two node types are sampled on the CPU, the batches still land there).
    """

    def __init__(self, data, num_neighbors, edge_label_index=None, edge_label=None, edge_label_time=None,
                 replace: bool = False, subgraph_type="directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", neg_sampling=None, neg_sampling_ratio=None,
                 time_attr: str | None = None, weight_attr: str | None = None, transform=None,
                 transform_sampler_output=None, is_sorted: bool = False, filter_per_worker: bool | None = None,
                 neighbor_sampler: PyGNeighborSampler | None = None, directed: bool = True, *, seed: int | None = None,
                 exclude_seed_edges: str = "none", device=None, **kwargs: Any) -> None:
        if isinstance(data, (GraphDataset, str, os.PathLike)):
            raise SettingError("LinkNeighborLoader takes a Data, HeteroData or (FeatureStore, GraphStore); for a "
                               "sparsetrain dataset pass (DatasetFeatureStore(ds), DatasetGraphStore(ds)) and "
                               "edge_label_index=(None, edge_label_index)")
        if exclude_seed_edges not in EXCLUDE_MODES:
            choices = ", ".join(map(repr, EXCLUDE_MODES))
            raise SettingError(f"exclude_seed_edges={exclude_seed_edges!r}; choose one of {choices}")
        self.sampling_threads = uses_threads(kwargs.get("num_workers", 0), kwargs.get("multiprocessing_context"))
        device = loader_device(data, device)  # a Data already on a GPU is placed as device= would place it
        placed = self._place(data, device)
        kwargs = unpinned_on_gpu(kwargs, device)
        if neighbor_sampler is None:
            neighbor_sampler = PyGNeighborSampler(data, num_neighbors, subgraph_type=subgraph_type, replace=replace,
                                                  disjoint=disjoint, temporal_strategy=temporal_strategy,
                                                  time_attr=time_attr, weight_attr=weight_attr, is_sorted=is_sorted,
                                                  directed=directed, seed=seed,
                                                  device=_link_sampling_device(data, edge_label_index, device))
        if exclude_seed_edges != "none":
            if not isinstance(neighbor_sampler, PyGNeighborSampler):
                raise SettingError(f"exclude_seed_edges={exclude_seed_edges!r} needs sparsetrain's sampler; "
                                   "leave neighbor_sampler unset or pass a sparsetrain.pyg.PyGNeighborSampler")
            neighbor_sampler.exclude_seed_edges = exclude_seed_edges
        edge_label_index = _checked_edge_label_index(edge_label_index, getattr(neighbor_sampler, "num_nodes", None))
        super().__init__(placed, num_neighbors, edge_label_index=edge_label_index, edge_label=edge_label,
                         edge_label_time=edge_label_time, replace=replace, subgraph_type=subgraph_type,
                         disjoint=disjoint, temporal_strategy=temporal_strategy, neg_sampling=neg_sampling,
                         neg_sampling_ratio=neg_sampling_ratio, time_attr=time_attr, weight_attr=weight_attr,
                         transform=transform, transform_sampler_output=transform_sampler_output, is_sorted=is_sorted,
                         filter_per_worker=filter_per_worker, neighbor_sampler=neighbor_sampler, directed=directed,
                         **kwargs)
        _check_per_seed(self.input_data.row, {"edge_label": self.input_data.label,
                                              "edge_label_time": self.input_data.time})


def unpinned_on_gpu(kwargs: dict, device: torch.device | None) -> dict:
    """The loader's keyword arguments with ``pin_memory`` off when batches are cut on a GPU: they are there already, and
    torch's pinning of a batch would try to pin its GPU tensors (a RuntimeError at the first batch)."""
    if device is None or device.type != "cuda" or not kwargs.get("pin_memory"):
        return kwargs
    return {**kwargs, "pin_memory": False}


def _checked_input_nodes(input_nodes, num_nodes: int | dict[str, int] | None):
    """``input_nodes`` in any of PyG's forms (ids or a bool mask; typed: a node type, or ``(node type, ids or mask or
    None)``), its ids checked (:func:`~sparsetrain.pyg.ids.checked_ids`) against ``num_nodes`` (per node type when a
    dict, an int for untyped data; None: not checked)."""
    hetero = isinstance(input_nodes, str) or (isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2
                                             and isinstance(input_nodes[0], str))
    if num_nodes is None:
        return input_nodes
    if hetero != isinstance(num_nodes, dict):
        fix = "ids (or a bool mask), not a node type" if hetero else "a node type or (node type, ids)"
        raise SettingError(f"input_nodes={_shown(input_nodes)} but the data is {_kind(num_nodes)}; pass {fix}")
    if not hetero:
        return input_nodes if input_nodes is None else checked_ids(input_nodes, "input_nodes", num_nodes, mask=True)
    node_type, ids = (input_nodes, None) if isinstance(input_nodes, str) else input_nodes
    if node_type not in num_nodes:
        raise InputError(f"input_nodes names node type {node_type!r}; the data's node types are "
                         f"{', '.join(map(repr, num_nodes))}")
    return input_nodes if ids is None else (node_type, checked_ids(ids, f"input_nodes of {node_type!r}",
                                                                   num_nodes[node_type], mask=True))


def _on_host(input_nodes):
    """``input_nodes``' ids (or mask) on the host. PyG's loader cuts every batch's seeds out of them with a host index:
    on a GPU tensor that is a blocking copy of the index, a host wait a batch that stops the host from running ahead of
    the GPU (a GPU sampler uploads host seeds itself, without a wait)."""
    if torch.is_tensor(input_nodes):
        return input_nodes.cpu()
    if isinstance(input_nodes, tuple) and len(input_nodes) == 2 and torch.is_tensor(input_nodes[1]):
        return input_nodes[0], input_nodes[1].cpu()
    return input_nodes


def _checked_edge_label_index(edge_label_index, num_nodes: int | dict[str, int] | None):
    """``edge_label_index`` in any of PyG's forms (``[2, E]`` ids; typed: an edge type, or ``(edge type, ids or
    None)``; a graph store's: ``(None, ids)``), its ids checked against ``num_nodes`` (per node type when a dict, an
    int for untyped data; None: not checked)."""
    seq = isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) > 0
    if seq and isinstance(edge_label_index[0], str):
        return edge_label_index  # an edge type: its own edges, checked with the graph
    first = edge_label_index[0] if seq else None
    pair = seq and len(edge_label_index) == 2 and (first is None or (
        isinstance(first, (tuple, list)) and all(isinstance(name, str) for name in first)))
    edge_type, ids = edge_label_index if pair else (None, edge_label_index)
    if num_nodes is None:
        return edge_label_index
    if (edge_type is not None) != isinstance(num_nodes, dict):
        fix = "an edge type or (edge type, [2, E] ids)" if isinstance(num_nodes, dict) else "[2, E] ids"
        raise SettingError(f"edge_label_index={_shown(edge_label_index)} but the data is {_kind(num_nodes)}; pass "
                           f"{fix}")
    if ids is None:
        return edge_label_index
    if edge_type is None:
        ids = checked_edge_index(ids, "edge_label_index", num_nodes, num_nodes)
    else:
        src, dst = num_nodes.get(edge_type[0]), num_nodes.get(edge_type[-1])
        ids = checked_edge_index(ids, f"edge_label_index of {tuple(edge_type)}", src, dst)
    return (edge_type, ids) if pair else ids


def _kind(num_nodes) -> str:
    return "typed (HeteroData)" if isinstance(num_nodes, dict) else "untyped (Data)"


def _shown(value) -> str:
    """A short form of an argument for a message: a tensor by its shape and dtype."""
    if isinstance(value, torch.Tensor):
        return f"<tensor {list(value.shape)} {value.dtype}>"
    if isinstance(value, (tuple, list)) and len(value) > 3:
        return f"<{type(value).__name__} of {len(value)}>"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(map(_shown, value)) + ")"
    return repr(value)


def _check_per_seed(seeds: torch.Tensor, fields: dict[str, torch.Tensor | None]) -> None:
    """Each per-seed tensor in ``fields`` (labels, times) has one entry per seed; times are finite."""
    for name, values in fields.items():
        if values is None:
            continue
        if values.dim() == 0 or values.shape[0] != seeds.numel():
            raise InputError(f"{name} has shape {list(values.shape)} for {seeds.numel()} seeds; give one entry "
                             "per seed, in the seeds' order")
        if name.endswith("time"):
            check_finite_times(values, name, "seed")


def _link_sampling_device(data, edge_label_index, device):
    """Where link batches are sampled: ``device``, unless the seed edges join two node types (seeds of two types
    sample on the CPU only, for now)."""
    if device is None or not isinstance(data, HeteroData):
        return device
    edge_type = edge_label_index[0] if isinstance(edge_label_index, (tuple, list)) else edge_label_index
    if isinstance(edge_type, str):
        edge_type = data._to_canonical(edge_type)
    return device if isinstance(edge_type, tuple) and edge_type[0] == edge_type[-1] else None
