"""The one writer every importer feeds: edges, node tables and splits -> a dataset folder (format version 3).

Every input is by type (a :class:`GraphInput`; a homogeneous graph is its one-type case) and every graph runs one
sequence: the options checked against the graph's kind once (:data:`~sparsetrain.datasets.applicable.IMPORT_RULES`:
cleaning, link splits and node orders apply to one node and one edge type only, so for a typed graph those steps are
off and do nothing), the CSC of every edge type built from two streaming passes over its edges
(:mod:`~sparsetrain.datasets.topology`, each type's columns after the last's), a link split and a node order when
asked, then features and labels streamed straight into their (possibly permuted) rows. Without a reordering, memory
is a few arrays per node plus one chunk or bucket, whatever the edge count. Everything goes into a temp folder that is
renamed into place only when complete.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from sparsetrain._sigbus import watch
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.applicable import IMPORT_RULES, ONE_TYPE, TYPED, ImportContext, refuse_inapplicable
from sparsetrain.datasets.clustering import CLUSTERS_FILE, cluster_order
from sparsetrain.datasets.csc import RawCSC, write_permuted
from sparsetrain.datasets.dataset import GraphDataset, load
from sparsetrain.datasets.edge_split import (
    DEFAULT_NEG_PER_POS,
    EdgeSplit,
    check_edge_split,
    check_fractions,
    random_edge_split,
)
from sparsetrain.datasets.format import EdgeType
from sparsetrain.datasets.input_checks import target_type_of
from sparsetrain.datasets.node_tables import random_split, read_splits, write_features, write_labels
from sparsetrain.datasets.presets import DEFAULT_SPLIT
from sparsetrain.datasets.readers import check_times
from sparsetrain.datasets.reorder import METHODS, node_order
from sparsetrain.datasets.sources import EdgeFeatures, EdgeSource, GraphInput, Source, TimeColumn
from sparsetrain.datasets.topology import build_topology, infer_counts, node_counts
from sparsetrain.datasets.writer import DatasetWriter
from sparsetrain.errors import DatasetError

__all__ = ["BuildOptions", "EdgeFeatures", "EdgeSource", "GraphInput", "Source", "TimeColumn", "build_dataset"]

_MERGING = ("undirected", "drop_self_loops", "drop_duplicates", "link_split")
"""Options that merge or drop edges (so edge features and edge times, one per given edge, cannot follow)."""


@dataclass(frozen=True)
class _Layout:
    """What a dataset folder stores that differs by the graph's kind (:data:`LAYOUTS`)."""

    keep_edge_ids: bool
    """``edge_ids.npy``: each edge's row in its edge type's edge list (a one-type graph's edge ids are its CSC
    positions; its cleaning may merge or drop edges)."""
    records_order: bool
    """``meta.json``'s ``permutation`` entry (None: the ids as imported); a typed graph keeps its node order."""


LAYOUTS = {ONE_TYPE: _Layout(keep_edge_ids=False, records_order=True),
           TYPED: _Layout(keep_edge_ids=True, records_order=False)}
"""What the folder stores, by the graph's kind (:attr:`GraphInput.kind`), read once per import."""


@dataclass
class BuildOptions:
    """How to clean and lay out the graph. ``undirected`` adds reverse edges and merges duplicates (as PyG's
    ``to_undirected``); ``add_reverse`` (a typed graph's) also stores ``(dst, "rev_" + rel, src)`` for every edge type
    (PyG's ``ToUndirected``).

    ``num_classes``: labels must lie in ``[0, C)``; an int for every labelled node type, or a dict by node type.
    """

    undirected: bool = False
    drop_self_loops: bool = False
    drop_duplicates: bool = False
    reorder: str | None = None
    feature_dtype: str = "float32"
    num_classes: int | dict[str, int] | None = None
    split_fractions: tuple[float, float, float] = DEFAULT_SPLIT
    seed: int = 0
    overwrite: bool = False
    quiet: bool = False
    link_split: tuple[float, float, float] | None = None
    link_negatives: int = DEFAULT_NEG_PER_POS
    add_reverse: bool = False

    def __post_init__(self) -> None:
        if self.reorder in ("none", ""):
            self.reorder = None
        if self.reorder is not None and self.reorder not in METHODS:
            raise DatasetError(f"reorder={self.reorder!r} is not known; choose one of: none, {', '.join(METHODS)}")
        if self.feature_dtype not in fmt.FEATURE_DTYPES:
            raise DatasetError(f"feature dtype {self.feature_dtype!r} is not supported; "
                               f"choose one of {', '.join(fmt.FEATURE_DTYPES)}")
        classes = self.num_classes.values() if isinstance(self.num_classes, dict) else [self.num_classes]
        for c in classes:
            if c is not None and c < 1:
                raise DatasetError(f"num_classes={c} must be at least 1")
        fractions = tuple(float(f) for f in self.split_fractions)
        if len(fractions) != 3 or not all(f >= 0 for f in fractions) or sum(fractions) > 1 + 1e-9:
            raise DatasetError(f"split fractions {self.split_fractions} must be three non-negative numbers "
                               "(train, val, test) summing to at most 1, e.g. 0.6,0.2,0.2")
        self.split_fractions = fractions
        if self.link_split is not None:
            self.link_split = check_fractions(self.link_split)
        if isinstance(self.link_negatives, bool) or not isinstance(self.link_negatives, int) or self.link_negatives < 0:
            raise DatasetError(f"link_negatives={self.link_negatives!r}: give the number of fixed negatives per "
                               "val/test positive (an int >= 0)")

    def classes_of(self, node_type: str, target_type: str | None) -> int | None:
        """The class count of a node type's labels: a dict's entry, or an int for the target type."""
        if isinstance(self.num_classes, dict):
            return self.num_classes.get(node_type)
        return self.num_classes if node_type == target_type else None


def _import_context(graph: GraphInput, options: BuildOptions) -> ImportContext:
    """The graph's kind and the options (and inputs) :data:`IMPORT_APPLIES` reads, each named as the user gave it."""
    given = {name: f"{name}=True (--{name.replace('_', '-')})" for name in ("undirected", "drop_self_loops",
                                                                          "drop_duplicates", "add_reverse")
             if getattr(options, name)}
    if options.reorder:
        given["reorder"] = f"reorder={options.reorder!r} (--reorder)"
    if options.link_split is not None:
        given["link_split"] = "link_split=... (--link-split)"
    if graph.edge_splits:
        given["edge_splits"] = f"the source's link splits ({', '.join(graph.edge_splits)})"
    weighted = [source for source in graph.edges.values() if source.weighted]
    if weighted:
        given["edge_weights"] = f"{weighted[0].weight_name or weighted[0].name}: an edge weight column"
    if graph.target_type not in (None, fmt.NODE):
        given["target_type"] = f"target_type={graph.target_type!r} (--target-type)"
    reserved = [name for name in (*graph.node_types, *(et[1] for et in graph.edges)) if name in _RESERVED]
    if reserved:
        given["reserved_names"] = f"the type name {reserved[0]!r}"
    return ImportContext(graph.kind, given)


_RESERVED = (fmt.NODE, fmt.EDGE[1])
"""The names of a homogeneous graph's one node type and relation: never a typed graph's."""


def _check_types(graph: GraphInput, options: BuildOptions) -> None:
    """Options and inputs for the graph's kind (:data:`IMPORT_RULES`), type names usable in file names, every table
    for a type (edge type) the graph has."""
    if not graph.edges:
        raise DatasetError("a dataset needs at least one edge type; give edges for some (src, rel, dst)")
    refuse_inapplicable(IMPORT_RULES, _import_context(graph, options), DatasetError)
    for t in graph.node_types:
        if t not in _RESERVED:
            fmt.check_type_name(t, "node type")
    for et in graph.edges:
        if et[1] not in _RESERVED:
            fmt.check_type_name(et[1], "relation")
    node_types = graph.node_types
    for what, table in (("features", graph.features), ("labels", graph.labels), ("node times", graph.node_time)):
        for t, source in table.items():
            if t not in node_types:
                raise DatasetError(f"{source.name}: gives the {what} of node type {t!r}, which no edge type or node "
                                   f"count names (node types: {', '.join(node_types)}); check the type's spelling")
    for what, table in (("edge features", graph.edge_features), ("times", graph.edge_time)):
        for et, values in table.items():
            if et not in graph.edges:
                raise DatasetError(f"{values.name}: gives the {what} of edge type {et}, which has no edges (edge "
                                   f"types: {', '.join(map(str, graph.edges))}); check the type's spelling")


def _with_reverses(graph: GraphInput, add_reverse: bool) -> GraphInput:
    """``graph`` with ``(dst, "rev_" + rel, src)`` after every edge type that has no such type already; a reverse
    edge is the same edge, so it keeps its features and its time."""
    if not add_reverse:
        return graph
    edges, edge_features, edge_time = {}, {}, {}
    for et, source in graph.edges.items():
        reverse = (et[2], f"rev_{et[1]}", et[0])
        for key in (et, reverse):
            if key is reverse and reverse in graph.edges:
                continue
            edges[key] = source if key is et else source.reversed()
            if et in graph.edge_features:
                edge_features[key] = graph.edge_features[et]
            if et in graph.edge_time:
                edge_time[key] = graph.edge_time[et]
    return replace(graph, edges=edges, edge_features=edge_features, edge_time=edge_time)


def build_dataset(out_dir: str | os.PathLike, graph: GraphInput, options: BuildOptions | None = None) -> GraphDataset:
    """Validate everything, write the dataset folder atomically, and return it loaded.

    ``graph`` (see :class:`~sparsetrain.datasets.sources.GraphInput`) holds every input by type; a homogeneous graph
    is its one-type case. ``options.link_split`` draws link-prediction splits (see
    :mod:`sparsetrain.datasets.edge_split`). Edge features and edge times (row ``i`` = the source's edge ``i``) are
    written in the dataset's CSC edge order; every edge must be kept (no ``undirected``, ``drop_self_loops``,
    ``drop_duplicates`` or ``link_split``). Node times (one per node) and edge times are what temporal sampling reads.
    """
    options = options or BuildOptions()
    target_type = _check_inputs(graph, options)
    layout = LAYOUTS[graph.kind]
    counts, nodes_from = node_counts(graph.node_types, graph.num_nodes, graph.features, graph.labels, graph.node_time)
    counts, nodes_from = infer_counts(counts, graph.edges, nodes_from)
    graph = _with_reverses(graph, options.add_reverse)
    out_dir = Path(out_dir)
    with DatasetWriter(out_dir, options.overwrite) as writer:
        with_ids = layout.keep_edge_ids or bool(graph.edge_features) or bool(graph.edge_time)
        topology = build_topology(writer, graph.edges, counts, nodes_from, options, with_ids)
        counts, csc, num_edges = topology.counts, topology.csc, dict(topology.num_edges)
        meta = {"name": out_dir.name, "node_types": counts, "edge_types": [], "features": {}, "labels": {},
                "directed": not topology.symmetric, "target_type": target_type, "splits": {}}
        # link splits, node orders and cleaning apply to a graph of one node and one edge type (IMPORT_RULES): off,
        # they do nothing
        csc, links = _link_split(csc, graph.edge_splits, topology.symmetric, options, meta, num_edges)
        order = _node_order(writer, csc, options, meta, layout.records_order)
        final = _write_csc(writer, csc, order, from_scratch=options.link_split is None,
                           keep_ids=layout.keep_edge_ids)
        meta["has_edge_weights"] = final.weights is not None
        meta["edge_types"] = [{"src": et[0], "rel": et[1], "dst": et[2], "num_edges": num_edges[et], "features": None}
                              for et in graph.edges]
        _write_all_edge_features(writer, graph, final, num_edges, options.feature_dtype, meta)
        _write_edge_times(writer, graph, final, num_edges, meta)
        del csc, final  # unmap the topology before the features are written
        inverse = None
        if order is not None:
            inverse = np.empty(len(order), dtype=np.int64)
            inverse[order] = np.arange(len(order), dtype=np.int64)
        unlabelled = _write_node_tables(writer, graph, counts, nodes_from, inverse, options, target_type, meta)
        _write_node_times(writer, graph, counts, nodes_from, inverse, meta)
        if links:
            meta["link_split"] = _write_edge_splits(writer, links, inverse)
        if target_type is not None:
            unlabelled_targets = unlabelled.get(target_type)
            _write_splits(writer, graph.splits, counts[target_type], unlabelled_targets, inverse, options, meta)
        del unlabelled
        meta["source"] = graph.provenance
        writer.commit(meta)
    return load(out_dir)


def _check_inputs(graph: GraphInput, options: BuildOptions) -> str | None:
    """The one set of cheap checks, before any long work; returns the target type (a homogeneous graph's is its one
    type)."""
    _check_types(graph, options)
    if graph.edge_splits and options.link_split is not None:
        raise DatasetError("the source already has link splits; drop --link-split (link_split=...)")
    for et, values in graph.edge_features.items():
        _check_edge_features(values, graph.edges[et], options)
    for et, times in graph.edge_time.items():
        _check_edge_times(times, graph.edges[et], options)
    for times in graph.node_time.values():
        times.values = check_times(np.asarray(times.values).reshape(-1), times.name, times.where, "node time")
    for name in graph.splits:
        if name not in fmt.SPLIT_NAMES:
            raise DatasetError(f"split {name!r} is not known; use {', '.join(fmt.SPLIT_NAMES)}")
    target_type = target_type_of(list(graph.labels), graph.target_type) or graph.target()
    if target_type is not None and target_type not in graph.node_types:
        raise DatasetError(f"target type {target_type!r} is not among the node types {sorted(graph.node_types)}; "
                           "choose one of them")
    if graph.splits and target_type is None:
        raise DatasetError("splits were given without a target type; name the node type they refer to (--target-type)")
    if isinstance(options.num_classes, int) and target_type not in graph.labels:
        raise DatasetError(f"num_classes={options.num_classes} (--num-classes) without labels; give the labels or "
                           "drop it")
    return target_type


def _link_split(csc: RawCSC, edge_splits: dict | None, symmetric: bool, options: BuildOptions, meta: dict,
                num_edges: dict[EdgeType, int]) -> tuple[RawCSC, dict[str, EdgeSplit]]:
    """The given link splits, checked, or a random one drawn from ``csc`` (which then loses its val/test edges, and
    ``num_edges`` of its one edge type says so); none: ``csc`` as it is."""
    for split, where in (edge_splits or {}).values():
        check_edge_split(split, csc.num_nodes, where)
    if options.link_split is None:
        return csc, {name: split for name, (split, _) in (edge_splits or {}).items()}
    k = options.link_negatives
    meta["link_split_from"] = {"random": list(options.link_split), "seed": options.seed, "neg_per_pos": k}
    csc, links = random_edge_split(csc, options.link_split, symmetric=symmetric, neg_per_pos=k, seed=options.seed)
    (edge_type,) = num_edges  # the one edge type (IMPORT_RULES)
    num_edges[edge_type] = csc.num_edges
    return csc, links


def _node_order(writer: DatasetWriter, csc: RawCSC, options: BuildOptions, meta: dict,
                record: bool) -> np.ndarray | None:
    """``options.reorder``'s order (``order[new_id] = old_id``), saved with any cluster ids it makes; None: keep ids
    (``record``: say so in ``meta["permutation"]``)."""
    if record:
        meta["permutation"] = None
    if not options.reorder:
        return None
    if options.reorder == "cluster":
        order, clusters, partitioner = cluster_order(csc, seed=options.seed)
        writer.save_array(CLUSTERS_FILE, clusters)
        meta["clusters"] = {"file": CLUSTERS_FILE, "count": int(clusters[-1]) + 1, "partitioner": partitioner,
                            "meaning": "clusters[new_id] = cluster id; each cluster is a contiguous id range"}
    else:
        order = node_order(options.reorder, csc)
    writer.save_array(fmt.ORIGINAL_IDS, order)
    meta["permutation"] = {"method": options.reorder, "file": fmt.ORIGINAL_IDS,
                           "meaning": "original_ids[new_id] = id in the imported data"}
    return order


def _write_node_tables(writer: DatasetWriter, graph: GraphInput, counts: dict[str, int], nodes_from: dict[str, str],
                       inverse: np.ndarray | None, options: BuildOptions, target_type: str | None,
                       meta: dict) -> dict[str, np.ndarray]:
    """Every node type's features and labels (-1: no label); returns which nodes of each labelled type have none.

    An int ``num_classes`` is the target type's class count; a dict gives them by node type."""
    unlabelled = {}
    for t in graph.node_types:
        if t in graph.features:
            name = fmt.node_file(t, "features")
            write_features(writer, graph.features[t], counts[t], nodes_from[t], inverse, options.feature_dtype, name,
                           options.quiet)
            meta["features"][t] = name
        if t in graph.labels:
            name = fmt.node_file(t, "labels")
            classes, unlabelled[t] = write_labels(writer, graph.labels[t], counts[t], nodes_from[t], inverse,
                                                  options.classes_of(t, target_type), name)
            meta["labels"][t] = {"file": name, "num_classes": classes}
    return unlabelled


def _write_splits(writer: DatasetWriter, splits: dict[str, Source], num_nodes: int, unlabelled: np.ndarray | None,
                  inverse: np.ndarray | None, options: BuildOptions, meta: dict) -> None:
    """The target type's splits: the given ones, else a random split of its labelled nodes."""
    split_arrays = read_splits(splits, num_nodes, unlabelled)
    if not split_arrays and unlabelled is not None:
        split_arrays = random_split(num_nodes, unlabelled, options.split_fractions, options.seed)
        meta["splits_from"] = {"random": list(options.split_fractions), "seed": options.seed}
    for name, idx in split_arrays.items():
        mapped = np.sort(idx if inverse is None else inverse[idx])
        writer.save_array(fmt.split_file(name), mapped)
        meta["splits"][name] = int(len(mapped))


def _write_edge_splits(writer: DatasetWriter, links: dict[str, EdgeSplit], inverse: np.ndarray | None) -> dict:
    """Write each split's positive (and negative) edges in the final node ids; returns the meta.json entry."""
    entry = {}
    for name, split in links.items():
        record = {"pos": fmt.link_file(name, "pos"), "neg": None, "neg_per_pos": split.neg_per_pos,
                  "num_pos": int(split.pos.shape[1]), "num_neg": 0, "edge_type": list(fmt.EDGE)}
        for kind, edges in (("pos", split.pos), ("neg", split.neg)):
            if edges is None:
                continue
            array = edges.numpy().astype(np.int64, copy=False)
            writer.save_array(fmt.link_file(name, kind), array if inverse is None else inverse[array])
            record[kind] = fmt.link_file(name, kind)
            record[f"num_{kind}"] = int(array.shape[1])
        entry[name] = record
    return entry


def _write_csc(writer: DatasetWriter, csc: RawCSC, order: np.ndarray | None, from_scratch: bool,
               keep_ids: bool) -> RawCSC:
    """The dataset's topology arrays: the scratch arrays renamed when nothing moves, else a relabelled copy.

    ``keep_ids``: the edge ids become ``edge_ids.npy``; else they stay scratch (edge features still follow them).
    """
    if order is None and from_scratch and csc.num_edges == len(csc.indices):
        writer.adopt(writer.scratch(fmt.INDPTR), fmt.INDPTR)
        writer.adopt(writer.scratch(fmt.INDICES), fmt.INDICES)
        if csc.weights is not None:
            writer.adopt(writer.scratch(fmt.EDGE_WEIGHT), fmt.EDGE_WEIGHT)
        if csc.edge_ids is not None and keep_ids:
            writer.adopt(writer.scratch(fmt.EDGE_IDS), fmt.EDGE_IDS)
        return csc
    indptr = writer.new_array(fmt.INDPTR, (csc.num_nodes + 1,), np.int64)
    indices = writer.new_array(fmt.INDICES, (csc.num_edges,), csc.indices.dtype)
    weights = writer.new_array(fmt.EDGE_WEIGHT, (csc.num_edges,), np.float32) if csc.weights is not None else None
    ids = None
    if csc.edge_ids is not None:
        shape = (csc.num_edges,)
        if keep_ids:
            ids = writer.new_array(fmt.EDGE_IDS, shape, np.int64)
        else:
            scratch = writer.scratch("permuted_edge_ids.npy")
            ids = np.lib.format.open_memmap(scratch, mode="w+", dtype=np.int64, shape=shape)
            watch(ids, scratch, fix="run again")
    write_permuted(csc, indptr, indices, weights, order, ids)
    return RawCSC(indptr, indices, weights, ids)


def _check_edge_features(edges: EdgeFeatures, source: EdgeSource, options: BuildOptions) -> None:
    merging = [name for name in _MERGING if getattr(options, name)]
    if merging:
        raise DatasetError(f"{edges.name}: edge features need every edge kept, but {', '.join(merging)} merges or "
                           "drops edges; build without those options, or without edge features")
    values = edges.values.reshape(len(edges.values), -1)
    if (source.rows is not None and len(values) != source.rows) or values.shape[1] == 0:
        raise DatasetError(f"{edges.name}: has shape {list(edges.values.shape)} for {source.rows} edges; "
                           "give one row of at least one feature per edge")
    finite = np.isfinite(values.astype(options.feature_dtype, copy=False))
    if not finite.all():
        row, col = (int(i[0]) for i in np.nonzero(~finite))
        raise DatasetError(f"{edges.name}: row {row}, column {col}: {values[row, col]} is not a finite number "
                           f"(as {options.feature_dtype}); replace NaN/inf edge features (e.g. with 0) "
                           "before importing")


def _check_edge_times(times: TimeColumn, source: EdgeSource, options: BuildOptions) -> None:
    merging = [name for name in _MERGING if getattr(options, name)]
    if merging:
        flags = ", ".join("--" + name.replace("_", "-") for name in merging)
        raise DatasetError(f"{times.name}: edge times need every edge kept, but {flags} merges or drops edges; "
                           "build without it (add each reverse edge to the edge list, with its time, instead of "
                           "--undirected)")
    values = np.asarray(times.values)
    if values.ndim != 1 and not (values.ndim == 2 and values.shape[1] == 1):
        raise DatasetError(f"{times.name}: has shape {list(values.shape)}; give one time per edge (a 1-D array)")
    times.values = check_times(values.reshape(-1), times.name, times.where, "edge time")
    if source.rows is not None and len(times.values) != source.rows:
        raise DatasetError(f"{times.name}: has {len(times.values)} times for the {source.rows} edges of "
                           f"{source.name}; give one time per edge, in the edge list's order")


def _write_edge_times(writer: DatasetWriter, graph: GraphInput, final: RawCSC, num_edges: dict[EdgeType, int],
                      meta: dict) -> None:
    """Each timed edge type's times in its CSC order (as its edge features): entry ``p`` is the source's row
    ``edge_ids[p]``."""
    start = 0
    for entry, et in zip(meta["edge_types"], graph.edges):
        end = start + num_edges[et]
        entry["time"] = None
        times = graph.edge_time.get(et)
        if times is not None:
            if len(times.values) != end - start:
                raise DatasetError(f"{times.name}: has {len(times.values)} times but edge type {et} has "
                                   f"{end - start} edges; give one time per edge, in the edge list's order")
            name = fmt.edge_time_file(et)
            writer.save_array(name, times.values[np.asarray(final.edge_ids[start:end])])
            entry["time"] = name
        start = end


def _write_node_times(writer: DatasetWriter, graph: GraphInput, counts: dict[str, int], nodes_from: dict[str, str],
                      inverse: np.ndarray | None, meta: dict) -> None:
    """Each timed node type's times in its (possibly reordered) node order."""
    for t in graph.node_types:
        times = graph.node_time.get(t)
        if times is None:
            continue
        if len(times.values) != counts[t]:
            raise DatasetError(f"{times.name}: has {len(times.values)} rows but the graph has {counts[t]} nodes "
                               f"({nodes_from[t]}); one time per node is required (fix the file or "
                               f"{fmt.count_flag(t)})")
        values = times.values
        if inverse is not None:
            values = np.empty_like(values)
            values[inverse] = times.values
        name = fmt.node_time_file(t)
        writer.save_array(name, values)
        meta.setdefault("node_time", {})[t] = name


def _write_all_edge_features(writer: DatasetWriter, graph: GraphInput, final: RawCSC, num_edges: dict[EdgeType, int],
                             dtype: str, meta: dict) -> None:
    """Each edge type's feature rows in its CSC order: row ``p`` is the source's row ``edge_ids[p]``."""
    start = 0
    for entry, et in zip(meta["edge_types"], graph.edges):
        end = start + num_edges[et]
        features = graph.edge_features.get(et)
        if features is not None:
            values = features.values.reshape(len(features.values), -1)
            if len(values) != end - start:
                raise DatasetError(f"{features.name}: has {len(values)} rows but edge type {et} has "
                                   f"{end - start} edges; give one row per edge")
            name = fmt.edge_features_file(et)
            out = writer.new_array(name, (end - start, values.shape[1]), np.dtype(dtype))
            chunk = 1 << 20
            for lo in range(start, end, chunk):
                out[lo - start : min(lo + chunk, end) - start] = values[final.edge_ids[lo : min(lo + chunk, end)]]
            out.flush()
            del out
            entry["features"] = name
        start = end
