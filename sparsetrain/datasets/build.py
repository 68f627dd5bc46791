"""The one pipeline every importer feeds: edges, node tables and splits -> a dataset folder.

Order of work: validate cheap things first, build the CSC from two streaming
passes over the edges (see :mod:`~sparsetrain.datasets.csc`), choose a node order,
then stream features and labels straight into their (possibly permuted) rows.
Without a reordering, memory is a few arrays per node plus one chunk or bucket,
whatever the edge count. Everything goes into a temp folder that is renamed into
place only when complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sparsetrain._progress import progress
from sparsetrain._sigbus import watch
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.clustering import CLUSTERS_FILE, cluster_order
from sparsetrain.datasets.csc import MAX_NODES, RawCSC, assemble_columns, bucket_ranges, count_in_degrees, write_buckets, write_permuted
from sparsetrain.datasets.dataset import GraphDataset, load
from sparsetrain.datasets.edge_split import DEFAULT_NEG_PER_POS, EdgeSplit, check_edge_split, check_fractions, random_edge_split
from sparsetrain.datasets.presets import DEFAULT_SPLIT
from sparsetrain.datasets.readers import first_non_integer
from sparsetrain.datasets.reorder import METHODS, node_order
from sparsetrain.datasets.writer import DatasetWriter
from sparsetrain.errors import DatasetError



@dataclass
class BuildOptions:
    """How to clean and lay out the graph. ``undirected`` adds reverse edges and merges duplicates (as PyG's ``to_undirected``)."""

    undirected: bool = False
    drop_self_loops: bool = False
    drop_duplicates: bool = False
    reorder: str | None = None
    feature_dtype: str = "float32"
    num_classes: int | None = None
    split_fractions: tuple[float, float, float] = DEFAULT_SPLIT
    seed: int = 0
    overwrite: bool = False
    quiet: bool = False
    link_split: tuple[float, float, float] | None = None
    link_negatives: int = DEFAULT_NEG_PER_POS

    def __post_init__(self) -> None:
        if self.reorder in ("none", ""):
            self.reorder = None
        if self.reorder is not None and self.reorder not in METHODS:
            raise DatasetError(f"reorder={self.reorder!r} is not known; choose one of: none, {', '.join(METHODS)}")
        if self.feature_dtype not in fmt.FEATURE_DTYPES:
            raise DatasetError(f"feature dtype {self.feature_dtype!r} is not supported; choose one of {', '.join(fmt.FEATURE_DTYPES)}")
        if self.num_classes is not None and self.num_classes < 1:
            raise DatasetError(f"num_classes={self.num_classes} must be at least 1")
        fractions = tuple(float(f) for f in self.split_fractions)
        if len(fractions) != 3 or not all(f >= 0 for f in fractions) or sum(fractions) > 1 + 1e-9:
            raise DatasetError(f"split fractions {self.split_fractions} must be three non-negative numbers (train, val, test) summing to at most 1, e.g. 0.6,0.2,0.2")
        self.split_fractions = fractions
        if self.link_split is not None:
            self.link_split = check_fractions(self.link_split)
        if isinstance(self.link_negatives, bool) or not isinstance(self.link_negatives, int) or self.link_negatives < 0:
            raise DatasetError(f"link_negatives={self.link_negatives!r}: give the number of fixed negatives per val/test positive (an int >= 0)")


@dataclass
class Source:
    """A re-iterable stream of chunks with a name for error messages.

    ``where(row)`` turns a 0-based data row into the user's terms (a CSV line, an array row).
    """

    name: str
    chunks: Callable[[], Iterator]
    rows: int | None = None
    where: Callable[[int], str] = field(default=lambda row: f"row {row}")

    @classmethod
    def from_reader(cls, reader) -> Source:
        return cls(str(reader.path), reader, reader.num_rows(), reader.where)

    @classmethod
    def from_array(cls, name: str, array: np.ndarray, chunk_rows: int = 1 << 22) -> Source:
        return cls(name, lambda: (array[lo : lo + chunk_rows] for lo in range(0, len(array), chunk_rows)), len(array))


@dataclass
class EdgeFeatures:
    """One feature row per edge of an in-memory edge list: ``values[i]`` belongs to edge ``(edge_index[0, i], edge_index[1, i])``."""

    name: str
    edge_index: np.ndarray
    values: np.ndarray


@dataclass
class EdgeSource(Source):
    """Edge chunks ``(src, dst, weight | None)``; ``weighted`` says whether weights come along.

    ``weight_name`` names the weights in errors when they are not a column of ``name`` (a separate array).
    ``release`` is called once the edges have been read for the last time (a generated source frees its scratch).
    """

    weighted: bool = False
    weight_name: str | None = None
    release: Callable[[], None] | None = None


def build_dataset(
    out_dir: str | os.PathLike,
    edges: EdgeSource,
    *,
    num_nodes: int | None = None,
    features: Source | None = None,
    labels: Source | None = None,
    splits: dict[str, Source] | None = None,
    options: BuildOptions | None = None,
    provenance: dict | None = None,
    edge_splits: dict[str, tuple[EdgeSplit, str]] | None = None,
    edge_features: EdgeFeatures | None = None,
) -> GraphDataset:
    """Validate everything, write the dataset folder atomically, and return it loaded.

    ``edge_splits``: given link-prediction splits (``{name: (EdgeSplit, where it came from)}``, e.g. OGB's);
    ``options.link_split`` draws them instead (see :mod:`sparsetrain.datasets.edge_split`).
    ``edge_features`` are written in the dataset's CSC edge order; every edge must be kept
    (no ``undirected``, ``drop_self_loops``, ``drop_duplicates`` or ``link_split``).
    """
    options = options or BuildOptions()
    if edge_splits and options.link_split is not None:
        raise DatasetError("the source already has link splits; drop --link-split (link_split=...)")
    if edge_features is not None:
        _check_edge_features(edge_features, options)
    out_dir = Path(out_dir)
    for name in splits or {}:
        if name not in fmt.SPLIT_NAMES:
            raise DatasetError(f"split {name!r} is not known; use {', '.join(fmt.SPLIT_NAMES)}")
    nodes_from = "the given num_nodes"
    known = [t for t in (features, labels) if t is not None and t.rows is not None]
    if num_nodes is None and known:
        if len(known) == 2 and known[0].rows != known[1].rows:
            raise DatasetError(
                f"{known[0].name}: has {known[0].rows} rows but {known[1].name} has {known[1].rows} rows; "
                "features and labels need one row per node each (fix the file that is wrong, or pass --num-nodes)"
            )
        num_nodes, nodes_from = known[0].rows, f"num_nodes = the {known[0].rows} rows of {known[0].name}"
    if num_nodes is not None and num_nodes < 1:
        raise DatasetError(f"num_nodes={num_nodes}: a graph needs at least one node")
    for table in known:
        if table.rows != num_nodes:
            raise DatasetError(f"{table.name}: has {table.rows} rows but the graph has {num_nodes} nodes ({nodes_from}); one row per node is required (fix the file or --num-nodes)")

    if num_nodes is None:
        nodes_from = "num_nodes = the largest node id in the edges + 1"
    with DatasetWriter(out_dir, options.overwrite) as writer:
        csc, symmetric = _build_csc(writer, edges, num_nodes, nodes_from, options)
        num_nodes = csc.num_nodes
        links = {name: split for name, (split, _) in (edge_splits or {}).items()}
        for name, (split, where) in (edge_splits or {}).items():
            check_edge_split(split, num_nodes, where)
        from_scratch = True
        if options.link_split is not None:
            csc, links = random_edge_split(csc, options.link_split, symmetric=symmetric, neg_per_pos=options.link_negatives, seed=options.seed)
            from_scratch = False
        clusters = None
        if options.reorder == "cluster":
            order, clusters, partitioner = cluster_order(csc, seed=options.seed)
        else:
            order = node_order(options.reorder, csc) if options.reorder else None
        inverse = None
        if order is not None:
            inverse = np.empty(num_nodes, dtype=np.int64)
            inverse[order] = np.arange(num_nodes, dtype=np.int64)
            writer.save_array(fmt.ORIGINAL_IDS, order)

        if clusters is not None:
            writer.save_array(CLUSTERS_FILE, clusters)
        final = _write_csc(writer, csc, order, from_scratch)
        directed = not symmetric
        meta = {
            "name": out_dir.name,
            "num_nodes": num_nodes,
            "num_edges": final.num_edges,
            "directed": directed,
            "has_edge_weights": final.weights is not None,
            "feature_dim": 0,
            "feature_dtype": None,
            "num_classes": None,
            "permutation": None if order is None else {"method": options.reorder, "file": fmt.ORIGINAL_IDS, "meaning": "original_ids[new_id] = id in the imported data"},
            "splits": {},
            **({} if clusters is None else {"clusters": {"file": CLUSTERS_FILE, "count": int(clusters[-1]) + 1, "partitioner": partitioner,
                                                         "meaning": "clusters[new_id] = cluster id; each cluster is a contiguous id range"}}),
            "source": provenance or {},
        }
        if edge_features is not None:
            meta["edge_feature_dim"] = _write_edge_features(writer, edge_features, final, order, options)
            meta["edge_feature_dtype"] = options.feature_dtype
        del csc, final  # unmap the topology before the features are written
        if features is not None:
            meta["feature_dim"] = _write_features(writer, features, num_nodes, nodes_from, inverse, options)
            meta["feature_dtype"] = options.feature_dtype
        unlabelled = None
        if labels is not None:
            meta["num_classes"], unlabelled = _write_labels(writer, labels, num_nodes, nodes_from, inverse, options.num_classes)
        if links:
            meta["link_split"] = _write_edge_splits(writer, links, inverse)
            if options.link_split is not None:
                meta["link_split_from"] = {"random": list(options.link_split), "seed": options.seed, "neg_per_pos": options.link_negatives}
        split_arrays = _read_splits(splits or {}, num_nodes, unlabelled)
        if not split_arrays and labels is not None:
            split_arrays = _random_split(num_nodes, unlabelled, options.split_fractions, options.seed)
            meta["splits_from"] = {"random": list(options.split_fractions), "seed": options.seed}
        del unlabelled
        for name, idx in split_arrays.items():
            mapped = np.sort(idx if inverse is None else inverse[idx])
            writer.save_array(fmt.split_file(name), mapped)
            meta["splits"][name] = int(len(mapped))
        writer.commit(meta)
    return load(out_dir)


# Without a node count, ids up to this many are always accepted (the arrays they size are a few MiB);
# beyond it an id may be at most _IDS_PER_EDGE times the edge count, or --num-nodes must say so.
_FREE_IDS = 1 << 16
_IDS_PER_EDGE = 4
# While the edge count of a CSV is still unknown, pass 1 never grows its count array past this (1 GiB).
_GROWTH_GUARD = 1 << 27


def _far_id_error(edges: EdgeSource, where: str, column: str, node: int, num_edges: str) -> DatasetError:
    return DatasetError(
        f"{edges.name}: {where}, {column}: node id {node} is far beyond {num_edges} and would make {node + 1} nodes; "
        f"fix the id, or pass --num-nodes {node + 1} (num_nodes={node + 1} in Python) if the graph really has that many nodes"
    )


class _EdgeCheck:
    """Validates each chunk of pass 1: ids in range at both ends, weights finite and >= 0.

    Without ``num_nodes`` it also keeps the largest id and where it was, so that an id
    far beyond the edge count is refused (before it sizes an array) rather than imported.
    """

    def __init__(self, edges: EdgeSource, num_nodes: int | None, nodes_from: str):
        self.edges, self.num_nodes, self.nodes_from = edges, num_nodes, nodes_from
        self.highest: tuple[int, int, str] | None = None  # (id, row, column)

    def limit(self, num_edges: int) -> int:
        return max(_FREE_IDS, _IDS_PER_EDGE * num_edges)

    def __call__(self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray | None, first_row: int) -> None:
        edges = self.edges
        for column, ids in (("src", src), ("dst", dst)):
            if len(ids) == 0:
                continue
            low, high = int(ids.min()), int(ids.max())
            if low < 0:
                row = int(np.flatnonzero(ids < 0)[0])
                raise DatasetError(f"{edges.name}: {edges.where(first_row + row)}, {column}: node id {ids[row]} is negative; node ids must be in [0, num_nodes)")
            if self.num_nodes is not None:
                if high >= self.num_nodes:
                    row = int(np.flatnonzero(ids >= self.num_nodes)[0])
                    raise DatasetError(
                        f"{edges.name}: {edges.where(first_row + row)}, {column}: node id {ids[row]} is out of range [0, {self.num_nodes}) "
                        f"({self.nodes_from}); fix the id, or give every node a row / pass a larger --num-nodes"
                    )
                continue
            if self.highest is None or high > self.highest[0]:
                self.highest = (high, first_row + int(np.argmax(ids)), column)
            seen = first_row + len(src)
            known = edges.rows is not None
            if high >= (self.limit(edges.rows) if known else max(_GROWTH_GUARD, self.limit(seen))):
                node, row, col = self.highest
                raise _far_id_error(edges, edges.where(row), col, node, f"the {edges.rows if known else f'first {seen}'} edges")
        if weight is not None and len(weight):
            bad = ~np.isfinite(weight) | (weight < 0)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                name, column = (edges.weight_name, "") if edges.weight_name else (edges.name, ", weight")
                raise DatasetError(
                    f"{name}: {edges.where(first_row + row)}{column}: {weight[row]} is not a finite number >= 0 (as float32); "
                    "edge weights must be finite and non-negative, fix that row"
                )

    def finish(self, num_edges: int) -> None:
        """The strict rule once the edge count is known (a CSV's only now)."""
        if self.num_nodes is None and self.highest is not None and self.highest[0] >= self.limit(num_edges):
            node, row, column = self.highest
            raise _far_id_error(self.edges, self.edges.where(row), column, node, f"the {num_edges} edges")


def _available_memory() -> int | None:
    """Bytes the kernel can hand out without swapping (``MemAvailable``), else the physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_node_memory(num_nodes: int, nodes_from: str) -> None:
    """Refuse a node count whose per-node arrays (degree counts, column pointers) cannot fit in memory."""
    needed = 16 * (num_nodes + 1)
    available = _available_memory()
    if available is not None and needed > available:
        raise DatasetError(
            f"num_nodes={num_nodes} ({nodes_from}) needs {needed / 2**30:.1f} GiB for per-node arrays but {available / 2**30:.1f} GiB "
            "is available; pass the real node count with --num-nodes"
        )


def _build_csc(writer: DatasetWriter, edges: EdgeSource, num_nodes: int | None, nodes_from: str, options: BuildOptions) -> tuple[RawCSC, bool]:
    """The cleaned CSC in scratch files (indices and weights memory-mapped, unread) and whether it is symmetric."""
    total = edges.rows
    if num_nodes is not None:
        _check_node_memory(num_nodes, nodes_from)
    check = _EdgeCheck(edges, num_nodes, nodes_from)
    with progress(total, "count edges", "edge", options.quiet) as bar:
        counts = count_in_degrees(edges.chunks, num_nodes, options.undirected, check, bar.update)
    raw_edges = int(counts.sum())
    if raw_edges == 0:
        raise DatasetError(f"{edges.name}: holds no edges; an edge list needs at least one 'src, dst' row")
    check.finish(raw_edges // (2 if options.undirected else 1))
    if num_nodes is None:
        num_nodes = len(counts)
    if num_nodes > MAX_NODES:
        raise DatasetError(f"num_nodes={num_nodes} ({nodes_from}): graphs of more than {MAX_NODES} nodes are not supported; check the node ids")
    firsts = bucket_ranges(np.concatenate([counts, np.zeros(num_nodes - len(counts), dtype=np.int64)]) if len(counts) < num_nodes else counts)
    del counts
    with progress(total, "bucket edges", "edge", options.quiet) as bar:
        buckets = write_buckets(edges.chunks, firsts, num_nodes, options.undirected, edges.weighted, writer.scratch, bar.update)
    if edges.release is not None:
        edges.release()
    with (
        writer.stream_array(fmt.INDICES, (raw_edges,), fmt.index_dtype(num_nodes), scratch=True) as indices,
        writer.stream_array(fmt.EDGE_WEIGHT, (raw_edges if edges.weighted else 0,), np.float32, scratch=True) as weights,
        progress(len(buckets), "sort columns", "bucket", options.quiet) as bar,
    ):
        merge = options.drop_duplicates or options.undirected
        done = assemble_columns(buckets, firsts, num_nodes, indices, weights, options.drop_self_loops, merge, bar.update)
        indices.shrink(done.num_edges)
        weights.shrink(done.num_edges if edges.weighted else 0)

    def mapped(name):
        array = np.load(writer.scratch(name), mmap_mode="r")
        watch(array, writer.scratch(name), fix="run again")
        return array

    return RawCSC(done.indptr, mapped(fmt.INDICES), mapped(fmt.EDGE_WEIGHT) if edges.weighted else None), done.symmetric


def _write_edge_splits(writer: DatasetWriter, links: dict[str, EdgeSplit], inverse: np.ndarray | None) -> dict:
    """Write each split's positive (and negative) edges in the final node ids; returns the meta.json entry."""
    entry = {}
    for name, split in links.items():
        record = {"pos": fmt.edge_file(name, "pos"), "neg": None, "neg_per_pos": split.neg_per_pos,
                  "num_pos": int(split.pos.shape[1]), "num_neg": 0}
        for kind, edges in (("pos", split.pos), ("neg", split.neg)):
            if edges is None:
                continue
            array = edges.numpy().astype(np.int64, copy=False)
            writer.save_array(fmt.edge_file(name, kind), array if inverse is None else inverse[array])
            record[kind] = fmt.edge_file(name, kind)
            record[f"num_{kind}"] = int(array.shape[1])
        entry[name] = record
    return entry


def _write_csc(writer: DatasetWriter, csc: RawCSC, order: np.ndarray | None, from_scratch: bool = True) -> RawCSC:
    """The dataset's topology arrays: the scratch arrays renamed when nothing moves, else a relabelled copy."""
    if order is None and from_scratch and csc.num_edges == len(csc.indices):
        writer.save_array(fmt.INDPTR, csc.indptr)
        writer.adopt(writer.scratch(fmt.INDICES), fmt.INDICES)
        if csc.weights is not None:
            writer.adopt(writer.scratch(fmt.EDGE_WEIGHT), fmt.EDGE_WEIGHT)
        return csc
    indptr = writer.new_array(fmt.INDPTR, (csc.num_nodes + 1,), np.int64)
    indices = writer.new_array(fmt.INDICES, (csc.num_edges,), csc.indices.dtype)
    weights = writer.new_array(fmt.EDGE_WEIGHT, (csc.num_edges,), np.float32) if csc.weights is not None else None
    write_permuted(csc, indptr, indices, weights, order)
    return RawCSC(indptr, indices, weights)


def _rows_in_chunks(source: Source, num_nodes: int, nodes_from: str) -> Iterator[tuple[int, np.ndarray]]:
    """(first_row, chunk) pairs, checking the total row count against ``num_nodes``."""
    row = 0
    for chunk in source.chunks():
        if row + len(chunk) > num_nodes:
            raise DatasetError(f"{source.name}: has more than {num_nodes} rows but the graph has {num_nodes} nodes ({nodes_from}); one row per node (fix the file or --num-nodes)")
        yield row, chunk
        row += len(chunk)
    if row != num_nodes:
        raise DatasetError(f"{source.name}: has {row} rows but the graph has {num_nodes} nodes ({nodes_from}); one row per node is required (fix the file or --num-nodes)")


def _put_rows(out, first: int, rows: np.ndarray, inverse: np.ndarray | None) -> None:
    """Rows ``first...`` of the imported order into ``out`` (an :class:`ArrayFile`), through ``inverse`` when reordered."""
    if inverse is None:
        out.write_rows(first, rows)
        return
    targets = inverse[first : first + len(rows)]
    order = np.argsort(targets, kind="stable")
    targets, rows = targets[order], rows[order]
    breaks = np.flatnonzero(np.diff(targets) != 1) + 1
    for lo, hi in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(targets)]]), strict=True):
        out.write_rows(int(targets[lo]), rows[lo:hi])


def _all_finite(values: np.ndarray) -> bool:
    """``np.isfinite(values).all()``; on float16 by the exponent bits, which is many times faster."""
    if values.dtype == np.float16:
        return not ((values.view(np.uint16) & 0x7C00) == 0x7C00).any()
    return bool(np.isfinite(values).all())


def _write_features(writer: DatasetWriter, source: Source, num_nodes: int, nodes_from: str, inverse: np.ndarray | None, options: BuildOptions,
                    name: str = fmt.FEATURES) -> int:
    dtype = np.dtype(options.feature_dtype)
    out = None
    try:
        with progress(num_nodes, "features", "row", options.quiet) as bar:
            for first, chunk in _rows_in_chunks(source, num_nodes, nodes_from):
                chunk = np.asarray(chunk)
                if chunk.ndim != 2:
                    chunk = chunk.reshape(len(chunk), -1)
                if out is None:
                    if chunk.shape[1] == 0:
                        raise DatasetError(f"{source.name}: feature rows have no columns; give at least one feature per node")
                    out = writer.stream_array(name, (num_nodes, chunk.shape[1]), dtype)
                elif chunk.shape[1] != out.shape[1]:
                    raise DatasetError(f"{source.name}: {source.where(first)} has {chunk.shape[1]} features, earlier rows {out.shape[1]}; all rows need the same width")
                values = chunk.astype(dtype, copy=False)
                if not _all_finite(values):
                    finite = np.isfinite(values)
                    row, col = (int(i[0]) for i in np.nonzero(~finite))
                    raw = chunk[row, col]
                    hint = f"it overflows {dtype}; use feature dtype float32" if np.isfinite(raw) else "replace NaN/inf features (e.g. with 0) before importing"
                    raise DatasetError(f"{source.name}: {source.where(first + row)}, column {col}: {raw} is not a finite number; {hint}")
                _put_rows(out, first, values, inverse)
                bar.update(len(values))
    finally:
        if out is not None:
            out.close()
    return int(out.shape[1])


def _check_edge_features(edges: EdgeFeatures, options: BuildOptions) -> None:
    merging = [name for name in ("undirected", "drop_self_loops", "drop_duplicates", "link_split") if getattr(options, name)]
    if merging:
        raise DatasetError(f"{edges.name}: edge features need every edge kept, but {', '.join(merging)} merges or drops edges; "
                           "build without those options, or without edge features")
    values = edges.values.reshape(len(edges.values), -1)
    if len(values) != edges.edge_index.shape[1] or values.shape[1] == 0:
        raise DatasetError(f"{edges.name}: has shape {list(edges.values.shape)} for {edges.edge_index.shape[1]} edges; "
                           "give one row of at least one feature per edge")
    finite = np.isfinite(values.astype(options.feature_dtype, copy=False))
    if not finite.all():
        row, col = (int(i[0]) for i in np.nonzero(~finite))
        raise DatasetError(f"{edges.name}: row {row}, column {col}: {values[row, col]} is not a finite number (as {options.feature_dtype}); "
                           "replace NaN/inf edge features (e.g. with 0) before importing")


def _write_edge_features(writer: DatasetWriter, edges: EdgeFeatures, final: RawCSC, order: np.ndarray | None, options: BuildOptions) -> int:
    """Rows of ``edges.values`` in the dataset's CSC order: edges matched by (dst, src) in original ids, parallel edges in input order."""
    n = np.int64(final.num_nodes)
    dst = np.repeat(np.arange(n, dtype=np.int64), final.degrees())
    src = np.asarray(final.indices, dtype=np.int64)
    if order is not None:
        src, dst = order[src], order[dst]
    given_src, given_dst = (np.asarray(a, dtype=np.int64) for a in edges.edge_index)
    source_row = np.empty(len(src), dtype=np.int64)
    source_row[np.argsort(dst * n + src, kind="stable")] = np.argsort(given_dst * n + given_src, kind="stable")
    values = edges.values.reshape(len(edges.values), -1)
    out = writer.new_array(fmt.EDGE_FEATURES, (len(src), values.shape[1]), np.dtype(options.feature_dtype))
    chunk = 1 << 20
    for lo in range(0, len(src), chunk):
        out[lo : lo + chunk] = values[source_row[lo : lo + chunk]]
    out.flush()
    return int(values.shape[1])


# Without --num-classes the class count is the largest label + 1, as long as that is not far beyond
# the labels in use: a lone typo (label 10**9) must not size a model's output layer.
_SPARE_CLASSES = 64


def _write_labels(writer: DatasetWriter, source: Source, num_nodes: int, nodes_from: str, inverse: np.ndarray | None, num_classes: int | None,
                  name: str = fmt.LABELS) -> tuple[int, np.ndarray]:
    """Write the labels (-1: no label); returns the class count and which nodes (new ids) have no label."""
    with writer.stream_array(name, (num_nodes,), np.int64) as out:
        unlabelled = np.zeros(num_nodes, dtype=np.bool_)
        num_classes = _stream_labels(source, num_nodes, nodes_from, inverse, num_classes, out, unlabelled)
    return num_classes, unlabelled


def _stream_labels(source: Source, num_nodes: int, nodes_from: str, inverse: np.ndarray | None, num_classes: int | None, out, unlabelled: np.ndarray) -> int:
    highest, highest_row = -1, 0
    # which labels occur; never longer than 2 * num_nodes + _SPARE_CLASSES, beyond that a label is refused outright
    used = np.zeros(0, dtype=np.bool_)

    def too_many_classes() -> DatasetError:
        return DatasetError(
            f"{source.name}: {source.where(highest_row)}: label {highest} would make {highest + 1} classes, far more than the "
            f"distinct labels in use; fix the label, or pass --num-classes {highest + 1} if there really are that many classes"
        )

    for first, chunk in _rows_in_chunks(source, num_nodes, nodes_from):
        values = _integers(source, np.asarray(chunk).reshape(-1), first, "labels")
        bad = (values < -1) if num_classes is None else ((values < -1) | (values >= num_classes))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            allowed = "must be >= 0 (or -1: no label)" if num_classes is None else f"must be in [0, {num_classes}) (or -1: no label)"
            raise DatasetError(f"{source.name}: {source.where(first + row)}: label {values[row]} {allowed}; fix the label or pass the right --num-classes")
        if len(values):
            top = int(np.argmax(values))
            if values[top] > highest:
                highest, highest_row = int(values[top]), first + top
            if num_classes is None:
                if highest + 1 > 2 * num_nodes + _SPARE_CLASSES:
                    raise too_many_classes()
                if highest + 1 > len(used):
                    used = np.concatenate([used, np.zeros(highest + 1 - len(used), dtype=np.bool_)])
                used[values[values >= 0]] = True
        _put_rows(out, first, values, inverse)
        missing = np.flatnonzero(values < 0) + first
        unlabelled[missing if inverse is None else inverse[missing]] = True
    if highest < 0:
        raise DatasetError(f"{source.name}: no node has a label (all are -1 or NaN); give some nodes a label, or import without labels")
    if num_classes is not None:
        return num_classes
    if highest + 1 > 2 * int(used.sum()) + _SPARE_CLASSES:
        raise too_many_classes()
    return highest + 1


def _integers(source: Source, values: np.ndarray, first: int, what: str) -> np.ndarray:
    bad = first_non_integer(values)
    if bad is not None:
        raise DatasetError(f"{source.name}: {source.where(first + bad)}: {values[bad]} is not an integer; {what} must be whole numbers")
    return values.astype(np.int64, copy=False)


def _read_splits(splits: dict[str, Source], num_nodes: int, unlabelled: np.ndarray | None) -> dict[str, np.ndarray]:
    owner = np.full(num_nodes, -1, dtype=np.int8)
    result = {}
    for k, (name, source) in enumerate(splits.items()):
        parts = []
        row = 0
        for chunk in source.chunks():
            ids = _integers(source, np.asarray(chunk).reshape(-1), row, "split node ids")
            bad = (ids < 0) | (ids >= num_nodes)
            if bad.any():
                at = int(np.flatnonzero(bad)[0])
                raise DatasetError(f"{source.name}: {source.where(row + at)}: node id {ids[at]} is out of range [0, {num_nodes}); fix the {name} split")
            taken = owner[ids]
            clash = taken >= 0
            if clash.any():
                at = int(np.flatnonzero(clash)[0])
                other = list(splits)[taken[at]]
                what = "twice" if other == name else f"also in the {other} split"
                raise DatasetError(f"{source.name}: {source.where(row + at)}: node {ids[at]} is {what}; splits must not overlap or repeat nodes")
            if unlabelled is not None and unlabelled[ids].any():
                at = int(np.flatnonzero(unlabelled[ids])[0])
                raise DatasetError(f"{source.name}: {source.where(row + at)}: node {ids[at]} has no label (-1 or NaN); a {name} node needs one, fix its label or drop it from the split")
            owner[ids] = k
            # a duplicate inside one chunk escapes the check above
            if len(np.unique(ids)) != len(ids):
                values, counts = np.unique(ids, return_counts=True)
                raise DatasetError(f"{source.name}: node {values[counts > 1][0]} is listed twice in the {name} split; splits must not repeat nodes")
            parts.append(ids)
            row += len(ids)
        result[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return result


def _random_split(num_nodes: int, unlabelled: np.ndarray, fractions: tuple[float, float, float], seed: int) -> dict[str, np.ndarray]:
    """Split the labelled nodes at random by ``fractions`` of their number."""
    perm = np.random.default_rng(seed).permutation(num_nodes)
    if unlabelled.any():
        perm = perm[~unlabelled[perm]]
    labelled = len(perm)
    sizes = [int(round(f * labelled)) for f in fractions]
    bounds = np.minimum(np.cumsum([0, *sizes]), labelled)
    return {name: perm[bounds[i] : bounds[i + 1]] for i, name in enumerate(fmt.SPLIT_NAMES)}
