"""Import a PyTorch Geometric ``Data`` or ``HeteroData`` object."""

from __future__ import annotations

import os
import warnings

import numpy as np

from sparsetrain._deprecation import moved_attribute
from sparsetrain.datasets.build import BuildOptions, EdgeFeatures, EdgeSource, Source, TimeColumn, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.input_checks import target_type_of
from sparsetrain.errors import DatasetError

_SPLIT_ATTRS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}
_KEPT = {"edge_index", "x", "y", "edge_weight", "edge_attr", "num_nodes", "time", "edge_time", *_SPLIT_ATTRS.values()}
_MERGING = ("undirected", "drop_self_loops", "drop_duplicates")


def _numpy(value, what: str) -> np.ndarray:
    try:
        return value.detach().cpu().numpy()
    except AttributeError:
        raise DatasetError(f"data.{what} is a {type(value).__name__}; expected a torch.Tensor") from None


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


def _times(store, what: str, options: BuildOptions, num_edges: int) -> tuple[TimeColumn | None, TimeColumn | None]:
    """A node or edge store's ``time`` (node-level or edge-level, as PyG's ``time_attr`` reads it) and ``edge_time``:
    (node times, edge times). Edge times are not kept, with a warning, when the options merge or drop edges."""
    node_time = edge_time = None
    for attr in ("time", "edge_time"):
        value = store.get(attr) if hasattr(store, "get") else getattr(store, attr, None)
        if value is None:
            continue
        values = _numpy(value, f"{what}.{attr}".removeprefix("."))
        name = f"data{what}.{attr}"
        is_edge = attr == "edge_time" or (store.is_edge_attr(attr) and not store.is_node_attr(attr))
        if not is_edge:
            node_time = TimeColumn(name, values)
            continue
        if edge_time is not None:
            raise DatasetError(f"data{what}.time and data{what}.edge_time both give edge times; keep one of them")
        if values.reshape(-1).shape[0] != num_edges:
            raise DatasetError(f"{name} has {values.reshape(-1).shape[0]} entries for {num_edges} edges; give one time "
                               "per edge")
        edge_time = TimeColumn(name, values)
    merging = [name for name in _MERGING if getattr(options, name)]
    if edge_time is not None and merging:
        warnings.warn(f"from_pyg: {edge_time.name} is not kept because {', '.join(merging)} merges or drops edges; "
                      "import without those options to keep edge times", stacklevel=3)
        edge_time = None
    return node_time, edge_time


def _split_indices(mask: np.ndarray, name: str) -> np.ndarray:
    if mask.ndim == 2:  # several public splits (e.g. WikiCS): the first one is the standard
        mask = mask[:, 0]
    if mask.dtype == np.bool_:
        return np.flatnonzero(mask)
    if mask.dtype.kind not in "iu":
        raise DatasetError(f"data.{name}_mask has dtype {mask.dtype}; give a bool mask or integer node ids")
    return mask.astype(np.int64, copy=False)  # already an index vector


def from_pyg(data, out_dir: str | os.PathLike, **options) -> GraphDataset:
    """Write a PyG ``Data`` (``edge_index``, optional ``x``, ``y``, ``edge_weight``, ``edge_attr``, ``time``,
    ``edge_time`` and split masks) as a dataset.

    ``time`` is a node time when it is a node attribute (one per node), an edge time when it is an edge attribute,
    as PyG's ``time_attr="time"`` reads it; ``edge_time`` is an edge time. Both are what ``train --temporal`` reads.

    ``edge_attr`` becomes the dataset's edge features (in CSC edge order); it is not kept, with a
    warning, when ``undirected``/``drop_self_loops``/``drop_duplicates`` merge or drop edges. Other
    attributes are not kept either, and a warning names them.

    Options are :class:`~sparsetrain.datasets.build.BuildOptions` fields
    (``undirected``, ``drop_self_loops``, ``drop_duplicates``, ``reorder``,
    ``feature_dtype``, ``num_classes``, ``overwrite``, ``quiet``...). The
    ``train_mask``/``val_mask``/``test_mask`` become the split (e.g. Planetoid's
    public split); without masks and with labels, a random split is drawn.
    A ``HeteroData`` is written as a typed dataset (:func:`from_pyg_typed`).
    """
    if hasattr(data, "node_types") and hasattr(data, "edge_types"):
        return from_pyg_typed(data, out_dir, **options)
    if getattr(data, "edge_index", None) is None:
        raise DatasetError("data.edge_index is missing; from_pyg needs a graph with edge_index [2, E]")
    edge_index = _numpy(data.edge_index, "edge_index")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DatasetError(f"data.edge_index has shape {list(edge_index.shape)}; expected [2, num_edges]")
    weight = getattr(data, "edge_weight", None)
    weight = None if weight is None else _numpy(weight, "edge_weight").astype(np.float32).reshape(-1)
    if weight is not None and len(weight) != edge_index.shape[1]:
        raise DatasetError(f"data.edge_weight has {len(weight)} entries for {edge_index.shape[1]} edges; give one "
                           "weight per edge")
    chunks = _edge_chunks(edge_index, weight, "data.edge_index")
    edges = EdgeSource("data.edge_index", chunks, edge_index.shape[1], weighted=weight is not None,
                       weight_name="data.edge_weight")

    options = BuildOptions(**options)
    others = sorted(set(data.keys()) - _KEPT)
    if others:
        warnings.warn(f"from_pyg keeps edge_index, x, y, edge_weight, edge_attr, time, edge_time and the split masks; "
                      f"not kept: {', '.join(others)}", stacklevel=2)
    node_time, edge_time = _times(data, "", options, edge_index.shape[1])
    edge_features = None
    if getattr(data, "edge_attr", None) is not None:
        merging = [name for name in ("undirected", "drop_self_loops", "drop_duplicates") if getattr(options, name)]
        if merging:
            warnings.warn(f"from_pyg: data.edge_attr is not kept because {', '.join(merging)} merges or drops edges; "
                          "import without those options to keep edge features", stacklevel=2)
        else:
            edge_features = EdgeFeatures("data.edge_attr", _numpy(data.edge_attr, "edge_attr"))

    features = labels = None
    if getattr(data, "x", None) is not None:
        x = _numpy(data.x, "x")
        features = Source.from_array("data.x", x.reshape(len(x), -1))
    if getattr(data, "y", None) is not None:
        y = _numpy(data.y, "y")
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise DatasetError(f"data.y has shape {list(y.shape)}; only single-label node classification (y of shape "
                               "[N]) is supported")
        labels = Source.from_array("data.y", y)
    splits = {}
    for name, attr in _SPLIT_ATTRS.items():
        mask = getattr(data, attr, None)
        if mask is not None:
            splits[name] = Source.from_array(f"data.{attr}", _split_indices(_numpy(mask, attr), name))

    # PyG infers num_nodes from the largest edge id when nothing sets it; infer it here instead, under the same checks
    # as files.
    explicit = "num_nodes" in data or features is not None or labels is not None
    return build_dataset(
        out_dir,
        edges,
        num_nodes=int(data.num_nodes) if explicit else None,
        features=features,
        labels=labels,
        splits=splits,
        options=options,
        provenance={"importer": "pyg", "class": type(data).__name__},
        edge_features=edge_features,
        node_time=node_time,
        edge_time=edge_time,
    )


def from_pyg_typed(data, out_dir: str | os.PathLike, *, target_type: str | None = None, **options) -> GraphDataset:
    """Write a PyG ``HeteroData`` (per node type ``x``, ``y``, ``time``, ``num_nodes``, split masks; per edge type
    ``edge_index``, optional ``edge_attr``, ``time`` or ``edge_time``) as a typed dataset. ``target_type`` defaults to
    the one node type with labels.

    Options are :class:`~sparsetrain.datasets.build.BuildOptions` fields (``add_reverse``, ``overwrite``...).
    """
    num_nodes, features, labels, splits, node_time, edge_time = {}, {}, {}, {}, {}, {}
    build_options = BuildOptions(**options)
    for t in data.node_types:
        store = data[t]
        if store.get("time") is not None:
            node_time[t] = TimeColumn(f"data[{t!r}].time", _numpy(store.time, f"[{t!r}].time"))
        x = store.get("x")
        y = store.get("y")
        if x is not None:
            features[t] = Source.from_array(f"data[{t!r}].x", (a := _numpy(x, f"[{t!r}].x")).reshape(len(a), -1))
        if y is not None:
            y = _numpy(y, f"[{t!r}].y")
            y = y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y
            if y.ndim != 1:
                raise DatasetError(f"data[{t!r}].y has shape {list(y.shape)}; only single-label node classification (y "
                                   "of shape [N]) is supported")
            labels[t] = Source.from_array(f"data[{t!r}].y", y)
        num_nodes[t] = int(store.num_nodes) if ("num_nodes" in store or x is not None or y is not None) else None
    labelled = [t for t in data.node_types if data[t].get("y") is not None]
    target_type = target_type_of(labelled, target_type, "HeteroData")
    if target_type is not None:
        for name, attr in _SPLIT_ATTRS.items():
            mask = data[target_type].get(attr)
            if mask is not None:
                splits[name] = Source.from_array(f"data[{target_type!r}].{attr}",
                                                 _split_indices(_numpy(mask, attr), name))
    edges, edge_features = {}, {}
    for et in data.edge_types:
        store = data[et]
        edge_index = _numpy(store.edge_index, f"[{et}].edge_index")
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise DatasetError(f"data[{et}].edge_index has shape {list(edge_index.shape)}; expected [2, num_edges]")
        what = f"data[{et}].edge_index"
        edges[tuple(et)] = EdgeSource(what, _edge_chunks(edge_index, None, what), edge_index.shape[1])
        if store.get("edge_attr") is not None:
            edge_features[tuple(et)] = EdgeFeatures(f"data[{et}].edge_attr",
                                                    _numpy(store.edge_attr, f"[{et}].edge_attr"))
        times = [a for a in ("time", "edge_time") if store.get(a) is not None]
        if len(times) == 2:
            raise DatasetError(f"data[{et}].time and data[{et}].edge_time both give edge times; keep one of them")
        if times:
            edge_time[tuple(et)] = TimeColumn(f"data[{et}].{times[0]}", _numpy(store[times[0]], f"[{et}].{times[0]}"))
    return build_dataset(out_dir, edges, num_nodes=num_nodes, features=features, labels=labels, target_type=target_type,
                         splits=splits, edge_features=edge_features, options=build_options, node_time=node_time,
                         edge_time=edge_time, provenance={"importer": "pyg", "class": type(data).__name__})


_RENAMED = {"from_pyg_hetero": "sparsetrain.datasets.pyg:from_pyg_typed"}


def __getattr__(name: str):
    """``from_pyg_hetero`` (renamed ``from_pyg_typed``) resolves for one release, with a ``DeprecationWarning``."""
    return moved_attribute(__name__, _RENAMED, name)
