"""Import a PyTorch Geometric ``Data`` or ``HeteroData`` object: one loop over its node and edge stores (a ``Data``
is the one store of the one node and edge type)."""

from __future__ import annotations

import os
import warnings

import numpy as np

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.build import (
    BuildOptions,
    EdgeFeatures,
    EdgeSource,
    GraphInput,
    Source,
    TimeColumn,
    build_dataset,
)
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.input_checks import target_type_of
from sparsetrain.errors import DatasetError

_SPLIT_ATTRS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}
_KEPT = {"edge_index", "x", "y", "edge_weight", "edge_attr", "num_nodes", "time", "edge_time", *_SPLIT_ATTRS.values()}
_MERGING = ("undirected", "drop_self_loops", "drop_duplicates")


def _numpy(value, name: str) -> np.ndarray:
    try:
        return value.detach().cpu().numpy()
    except AttributeError:
        raise DatasetError(f"{name} is a {type(value).__name__}; expected a torch.Tensor") from None


def _edge_chunks(edge_index: np.ndarray, weight: np.ndarray | None, what: str, chunk: int = 1 << 22):
    if edge_index.dtype.kind not in "iu":  # never cast: 1.7 would silently become node 1
        raise DatasetError(f"{what} has dtype {edge_index.dtype}; node ids must be integers: pass edge_index.long() "
                           "(PyG's own dtype) once every id is whole")

    def chunks():
        for lo in range(0, edge_index.shape[1], chunk):
            hi = lo + chunk
            w = None if weight is None else weight[lo:hi]
            part = edge_index[:, lo:hi].astype(np.int64, copy=False)
            yield part[0], part[1], w

    return chunks


def _is_edge_time(store, attr: str) -> bool:
    """``edge_time``, or a ``time`` PyG's ``time_attr`` reads as an edge attribute (one per edge, not per node)."""
    return attr == "edge_time" or (store.is_edge_attr(attr) and not store.is_node_attr(attr))


def _numeric(values: np.ndarray, name: str, kinds: str) -> np.ndarray:
    """``values`` when their dtype is of ``kinds`` (a complex or object tensor would be cast, losing values)."""
    if values.dtype.kind not in kinds:
        raise DatasetError(f"{name} has dtype {values.dtype}; give a real-valued tensor (float or int)")
    return values


def _split_indices(mask: np.ndarray, name: str, num_nodes: int) -> np.ndarray:
    if mask.ndim == 2:  # several public splits (e.g. WikiCS): the first one is the standard
        mask = mask[:, 0]
    if mask.dtype == np.bool_:
        if len(mask) != num_nodes:  # a shorter mask would leave its tail's nodes out of the split unsaid
            raise DatasetError(f"{name} has {len(mask)} entries for {num_nodes} nodes; a boolean mask has one per "
                               "node")
        return np.flatnonzero(mask)
    if mask.dtype.kind not in "iu":
        raise DatasetError(f"{name} has dtype {mask.dtype}; give a bool mask or integer node ids")
    return mask.astype(np.int64, copy=False)  # already an index vector


def _stores(data) -> tuple[dict, dict]:
    """``{node type: (store, name)}`` and ``{edge type: (store, name)}``; a ``Data`` is the one type's one store."""
    if hasattr(data, "node_types") and hasattr(data, "edge_types"):
        return ({t: (data[t], f"data[{t!r}]") for t in data.node_types},
                {tuple(et): (data[et], f"data[{et}]") for et in data.edge_types})
    return {fmt.NODE: (data, "data")}, {fmt.EDGE: (data, "data")}


def from_pyg(data, out_dir: str | os.PathLike, *, target_type: str | None = None, **options) -> GraphDataset:
    """Write a PyG ``Data`` or ``HeteroData`` as a dataset (a ``HeteroData`` as a typed one).

    Per node type (a ``Data``: the data itself) ``x``, ``y``, ``time``, ``num_nodes`` and the split masks; per edge
    type ``edge_index``, optional ``edge_weight``, ``edge_attr``, ``time`` or ``edge_time``. ``time`` is a node time
    when it is a node attribute (one per node), an edge time when it is an edge attribute, as PyG's
    ``time_attr="time"`` reads it; ``edge_time`` is an edge time. Both are what ``train --temporal`` reads.

    ``edge_attr`` becomes the dataset's edge features (in CSC edge order); it, and edge times, are not kept, with a
    warning, when ``undirected``/``drop_self_loops``/``drop_duplicates`` merge or drop edges. Other attributes are
    not kept either, and a warning names them.

    Options are :class:`~sparsetrain.datasets.build.BuildOptions` fields (``undirected``, ``drop_self_loops``,
    ``drop_duplicates``, ``reorder``, ``add_reverse``, ``feature_dtype``, ``num_classes``, ``overwrite``,
    ``quiet``...). The target type's (default: the one node type with labels) ``train_mask``/``val_mask``/
    ``test_mask`` become the split (e.g. Planetoid's public split); without masks and with labels, a random split is
    drawn.
    """
    options = BuildOptions(**options)
    merging = [name for name in _MERGING if getattr(options, name)]
    if not all(hasattr(data, attr) for attr in ("keys", "get", "num_nodes")):
        raise DatasetError(f"from_pyg takes a torch_geometric Data or HeteroData, not a {type(data).__name__}; build "
                           "one (Data(x=..., edge_index=..., y=...)) or use from_files")
    node_stores, edge_stores = _stores(data)
    graph = GraphInput({}, provenance={"importer": "pyg", "class": type(data).__name__})
    for t, (store, name) in node_stores.items():
        x, y = store.get("x"), store.get("y")
        if x is not None:
            x = _numeric(_numpy(x, f"{name}.x"), f"{name}.x", "iufb")
            rows = x.shape[0] if x.ndim else 0
            graph.features[t] = Source.from_array(f"{name}.x", x.reshape(rows, int(np.prod(x.shape[1:]))))
        if y is not None:
            y = _numeric(_numpy(y, f"{name}.y"), f"{name}.y", "iuf")
            y = y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y
            if y.ndim != 1:
                raise DatasetError(f"{name}.y has shape {list(y.shape)}; only single-label node classification (y of "
                                   "shape [N]) is supported")
            graph.labels[t] = Source.from_array(f"{name}.y", y)
        if store.get("time") is not None and not _is_edge_time(store, "time"):
            graph.node_time[t] = TimeColumn(f"{name}.time", _numpy(store.time, f"{name}.time"))
        # PyG infers num_nodes from the largest edge id when nothing sets it; infer it here, under the files' checks
        graph.num_nodes[t] = int(store.num_nodes) if ("num_nodes" in store or x is not None or y is not None) else None
    for et, (store, name) in edge_stores.items():
        _read_edges(graph, et, store, name, merging)
    graph.target_type = target_type  # the writer settles and checks it; the masks are the target type's
    # the masks' node type: the target (the one labelled type), else a Data's one type _N (a HeteroData never has it)
    masked = target_type_of(list(graph.labels), target_type) or fmt.NODE
    if masked in node_stores:
        store, name = node_stores[masked]
        for split, attr in _SPLIT_ATTRS.items():
            if store.get(attr) is not None:
                count = graph.num_nodes.get(masked)
                count = int(store.num_nodes) if count is None else count
                indices = _split_indices(_numpy(store[attr], f"{name}.{attr}"), f"{name}.{attr}", count)
                graph.splits[split] = Source.from_array(f"{name}.{attr}", indices)
    stores = {id(store): (store, name) for store, name in [*node_stores.values(), *edge_stores.values()]}
    others = [f"{name}.{key}".removeprefix("data.") for store, name in stores.values()
              for key in sorted(set(store.keys()) - _KEPT)]
    if others:
        warnings.warn(f"from_pyg keeps edge_index, x, y, edge_weight, edge_attr, time, edge_time and the split masks; "
                      f"not kept: {', '.join(others)}", stacklevel=2)
    return build_dataset(out_dir, graph, options)


def _read_edges(graph: GraphInput, et, store, name: str, merging: list[str]) -> None:
    """One edge store's edges, weights, features and times into ``graph``."""
    if store.get("edge_index") is None:
        raise DatasetError(f"{name}.edge_index is missing; from_pyg needs a graph with edge_index [2, E]")
    edge_index = _numpy(store.edge_index, f"{name}.edge_index")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DatasetError(f"{name}.edge_index has shape {list(edge_index.shape)}; expected [2, num_edges]")
    num_edges = edge_index.shape[1]
    weight = store.get("edge_weight")
    weight = None if weight is None else _numpy(weight, f"{name}.edge_weight").astype(np.float32).reshape(-1)
    if weight is not None and len(weight) != num_edges:
        raise DatasetError(f"{name}.edge_weight has {len(weight)} entries for {num_edges} edges; give one weight per "
                           "edge")
    graph.edges[et] = EdgeSource(f"{name}.edge_index", _edge_chunks(edge_index, weight, f"{name}.edge_index"),
                                 num_edges, weighted=weight is not None, weight_name=f"{name}.edge_weight")
    kept = []  # (attribute, where it went, what it is)
    if store.get("edge_attr") is not None:
        graph.edge_features[et] = EdgeFeatures(f"{name}.edge_attr", _numpy(store.edge_attr, f"{name}.edge_attr"))
        kept.append(("edge_attr", graph.edge_features, "edge features"))
    times = [attr for attr in ("time", "edge_time") if store.get(attr) is not None and _is_edge_time(store, attr)]
    if len(times) == 2:
        raise DatasetError(f"{name}.time and {name}.edge_time both give edge times; keep one of them")
    if times:
        values = _numpy(store[times[0]], f"{name}.{times[0]}")
        if values.reshape(-1).shape[0] != num_edges:
            raise DatasetError(f"{name}.{times[0]} has {values.reshape(-1).shape[0]} entries for {num_edges} edges; "
                               "give one time per edge")
        graph.edge_time[et] = TimeColumn(f"{name}.{times[0]}", values)
        kept.append((times[0], graph.edge_time, "edge times"))
    for attr, table, what in kept if merging else ():
        del table[et]
        warnings.warn(f"from_pyg: {name}.{attr} is not kept because {', '.join(merging)} merges or drops edges; "
                      f"import without those options to keep {what}", stacklevel=3)
