"""Edges -> the flat CSC, in scratch files: node counts, the two streaming passes of :mod:`~sparsetrain.datasets.csc`
per edge type, each type's columns appended after the last's.

A node type's count is given, the rows of its features or labels, else the largest id + 1 (refused when far beyond
the edge count): found while its edges are counted when one edge type names it at both ends (a homogeneous graph's
one type), else by a pass of its own before any edges are sorted. Memory: a few arrays per node plus one bucket.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from sparsetrain._progress import progress
from sparsetrain._sigbus import watch
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.csc import (
    BUCKET_EDGES,
    MAX_NODES,
    RawCSC,
    assemble_columns,
    bucket_ranges,
    count_in_degrees,
    write_buckets,
)
from sparsetrain.datasets.format import EdgeType
from sparsetrain.datasets.sources import EdgeSource, Source
from sparsetrain.datasets.writer import DatasetWriter
from sparsetrain.errors import DatasetError

# Without a node count, ids up to this many are always accepted (the arrays they size are a few MiB);
# beyond it an id may be at most _IDS_PER_EDGE times the edge count, or --num-nodes must say so.
_FREE_IDS = 1 << 16
_IDS_PER_EDGE = 4
# While the edge count of a CSV is still unknown, pass 1 never grows its count array past this (1 GiB).
_GROWTH_GUARD = 1 << 27


def _far_id_error(edges: EdgeSource, where: str, column: str, node: int, num_edges: str,
                  node_type: str) -> DatasetError:
    flag, n = fmt.count_flag(node_type), node + 1  # "--num-nodes" or "--node-count TYPE=N"
    count = (flag.replace("=N", f"={n} (num_nodes={{{node_type!r}: {n}}} in Python)") if flag.endswith("=N")
             else f"{flag} {n} (num_nodes={n} in Python)")
    return DatasetError(
        f"{edges.name}: {where}, {column}: node id {node} is far beyond {num_edges} and would make {node + 1} nodes; "
        f"fix the id, or pass {count} if the graph really has that many nodes"
    )


class _EdgeCheck:
    """Validates each chunk of pass 1: ids in range at both ends, weights finite and >= 0.

    ``counts``: the count of each end's node type; an end whose count is None (a node type only this edge type names,
    at both its ends) is counted by this pass, which keeps the largest id and where it was, so that an id far beyond
    the edge count is refused (before it sizes an array) rather than imported.
    """

    def __init__(self, edges: EdgeSource, edge_type: EdgeType, counts: dict[str, int | None],
                 nodes_from: dict[str, str]):
        self.edges, self.edge_type, self.counts, self.nodes_from = edges, edge_type, counts, nodes_from
        self.highest: tuple[int, int, str] | None = None  # (id, row, column)

    def limit(self, num_edges: int) -> int:
        return max(_FREE_IDS, _IDS_PER_EDGE * num_edges)

    def __call__(self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray | None, first_row: int) -> None:
        edges, et = self.edges, self.edge_type
        for column, ids, node_type in (("src", src, et[0]), ("dst", dst, et[2])):
            if len(ids) == 0:
                continue
            low, high = int(ids.min()), int(ids.max())
            n = self.counts[node_type]
            if low < 0:
                row = int(np.flatnonzero(ids < 0)[0])
                raise DatasetError(f"{edges.name}: {edges.where(first_row + row)}, {column}: "
                                   f"{fmt.node_word(node_type)} id {ids[row]} is negative; node ids must be in [0, "
                                   f"{fmt.count_name(node_type)})")
            if n is not None:
                if high >= n:
                    row = int(np.flatnonzero(ids >= n)[0])
                    raise DatasetError(
                        f"{edges.name}: {edges.where(first_row + row)}, {column}: {fmt.node_word(node_type)} id "
                        f"{ids[row]} is out of range [0, {n}) ({self.nodes_from[node_type]}); fix the id, or give "
                        f"every node a row / pass a larger {fmt.count_flag(node_type)}"
                    )
                continue
            if self.highest is None or high > self.highest[0]:
                self.highest = (high, first_row + int(np.argmax(ids)), column)
            seen = first_row + len(src)
            known = edges.rows is not None
            if high >= (self.limit(edges.rows) if known else max(_GROWTH_GUARD, self.limit(seen))):
                node, row, col = self.highest
                counted = f"the {edges.rows if known else f'first {seen}'} edges"
                raise _far_id_error(edges, edges.where(row), col, node, counted, et[2])
        if weight is not None and len(weight):
            bad = ~np.isfinite(weight) | (weight < 0)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                name, column = (edges.weight_name, "") if edges.weight_name else (edges.name, ", weight")
                raise DatasetError(
                    f"{name}: {edges.where(first_row + row)}{column}: {weight[row]} is not a finite number >= 0 "
                    "(as float32); edge weights must be finite and non-negative, fix that row"
                )

    def finish(self, num_edges: int) -> None:
        """The strict rule once the edge count is known (a CSV's only now)."""
        if self.highest is not None and self.highest[0] >= self.limit(num_edges):
            node, row, column = self.highest
            raise _far_id_error(self.edges, self.edges.where(row), column, node, f"the {num_edges} edges",
                                 self.edge_type[2])


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
            f"num_nodes={num_nodes} ({nodes_from}) needs {needed / 2**30:.1f} GiB for per-node arrays but "
            f"{available / 2**30:.1f} GiB is available; pass the real node count with --num-nodes"
        )




def node_counts(types: list[str], num_nodes: dict[str, int | None], features: dict[str, Source],
                labels: dict[str, Source], times: dict | None = None) -> tuple[dict[str, int | None], dict[str, str]]:
    """Each node type's count (None: from the edges) and where it came from, for messages; checked against the rows of
    the type's features, labels and node times before any long work."""
    counts, nodes_from = {}, {}
    times = times or {}
    for t in types:
        n, flag = num_nodes.get(t), fmt.count_flag(t)
        came_from = "the given num_nodes" if t == fmt.NODE else f"the given count of {t!r}"
        if n is not None:
            n = _count(n, t)
        known = [s for s in (features.get(t), labels.get(t), times.get(t)) if s is not None and s.rows is not None]
        if n is None and known:
            if len(known) >= 2 and known[0].rows != known[1].rows:
                raise DatasetError(
                    f"{known[0].name}: has {known[0].rows} rows but {known[1].name} has {known[1].rows} rows; "
                    f"node tables (features, labels, times) need one row per node each (fix the file that is wrong, "
                    f"or pass {flag})"
                )
            n, came_from = known[0].rows, f"num_nodes = the {known[0].rows} rows of {known[0].name}"
        if n is not None and n < 1:
            raise DatasetError(f"num_nodes={n}: a graph needs at least one node" if t == fmt.NODE else
                               f"node type {t!r} has {n} nodes ({came_from}); give it at least one, or drop the type")
        for table in known:
            if table.rows != n:
                raise DatasetError(f"{table.name}: has {table.rows} rows but the graph has {n} nodes ({came_from}); "
                                   f"one row per node is required (fix the file or {flag})")
        counts[t] = n
        nodes_from[t] = came_from if n is not None else "num_nodes = the largest node id in the edges + 1"
    return counts, nodes_from


def _count(n, node_type: str) -> int:
    """A given node count as an int (a NumPy integer is one; a float, a bool or a string is not)."""
    if isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)):
        return int(n)
    raise DatasetError(f"{fmt.count_name(node_type)} is {n!r}; give a whole number of nodes (an int)")


def counted_in_pass_one(counts: dict[str, int | None], edges: dict[EdgeType, EdgeSource]) -> set[str]:
    """The uncounted node types that the one edge type naming them, at both its ends, counts while it is read (the
    largest id + 1, no pass of its own): every other uncounted type needs :func:`infer_counts` first."""
    naming: dict[str, set[EdgeType]] = {}
    for et in edges:
        for end in (et[0], et[2]):
            naming.setdefault(end, set()).add(et)
    return {t for t, n in counts.items() if n is None and len(naming.get(t, ())) == 1
            and next(iter(naming[t]))[0] == next(iter(naming[t]))[2] == t}


def infer_counts(counts: dict[str, int | None], edges: dict[EdgeType, EdgeSource],
                 nodes_from: dict[str, str]) -> tuple[dict[str, int | None], dict[str, str]]:
    """Counts of the node types that have none and that no single edge type counts while it is read
    (:func:`counted_in_pass_one`): the largest id the edge lists give them + 1 (one pass over those lists). Such an
    id may go at most a few times beyond the edge list's length (or up to 65536): a typo such as 2**31 must not size
    arrays of hundreds of GB."""
    later = counted_in_pass_one(counts, edges)
    highest = {t: (-1, None) for t, n in counts.items() if n is None and t not in later}  # (id, (et, src, row, col))
    for et, source in edges.items():
        if et[0] not in highest and et[2] not in highest:
            continue
        rows = 0
        for src, dst, _ in source.chunks():
            for ids, t, column in ((src, et[0], "src"), (dst, et[2], "dst")):
                if t in highest and len(ids) and int(np.max(ids)) > highest[t][0]:
                    i = int(np.argmax(ids))
                    highest[t] = (int(ids[i]), (et, source, rows + i, column))
            rows += len(src)
        for t in {et[0], et[2]} & highest.keys():
            node, where = highest[t]
            if where is not None and where[0] == et and node >= max(_FREE_IDS, _IDS_PER_EDGE * rows):
                _, source, row, column = where
                raise DatasetError(
                    f"{source.name}: {source.where(row)}, {column}: {t!r} node id {node} of edge type {et} would make "
                    f"{node + 1} {t!r} nodes, far more than its {rows} edges; fix the id, or pass --node-count "
                    f"{t}={node + 1} if there are that many")
    for t, (h, _) in highest.items():
        if h < 0:
            raise DatasetError(f"node type {t!r} has no nodes (no count, no feature or label rows, no edges); give "
                               "its count, or drop the type")
    inferred = {t: h + 1 for t, (h, _) in highest.items()}
    return ({t: inferred.get(t, n) for t, n in counts.items()},
            {t: f"the {inferred[t]} {t!r} nodes" if t in inferred else came for t, came in nodes_from.items()})


@dataclass
class Topology:
    """The flat CSC in scratch files (indices, weights, edge ids memory-mapped, unread) and what the passes learned."""

    csc: RawCSC
    num_edges: dict[EdgeType, int]
    counts: dict[str, int]
    symmetric: bool
    """Every edge type joins one node type to itself and every edge's reverse is an edge of its type too."""


def build_topology(writer: DatasetWriter, edges: dict[EdgeType, EdgeSource], counts: dict[str, int | None],
                   nodes_from: dict[str, str], options, with_ids: bool) -> Topology:
    """Count, bucket and sort every edge type in turn; ``with_ids`` keeps each edge's row in its edge list
    (``csc.edge_ids``).

    ``options``: ``undirected``, ``drop_self_loops``, ``drop_duplicates`` (a homogeneous graph's cleaning), ``quiet``.
    A count of None (a node type only one edge type names, at both ends: :func:`counted_in_pass_one`) becomes the
    largest id + 1 at either end.
    """
    counts = dict(counts)
    passes = []
    for et, source in edges.items():
        n_dst = counts[et[2]]
        if n_dst is not None:
            _check_node_memory(n_dst, nodes_from[et[2]])
        check = _EdgeCheck(source, et, counts, nodes_from)
        with progress(source.rows, "count edges", "edge", options.quiet) as bar:
            degrees = count_in_degrees(source.chunks, n_dst, options.undirected, check, bar.update)
        raw_edges = int(degrees.sum())
        check.finish(raw_edges // (2 if options.undirected else 1))
        if n_dst is None:  # counted by this pass: the largest id at either end + 1
            counts[et[2]] = counts[et[0]] = n_dst = len(degrees)
        if n_dst > MAX_NODES or counts[et[0]] > MAX_NODES:
            raise DatasetError(f"num_nodes={max(n_dst, counts[et[0]])} ({nodes_from[et[2]]}): graphs of more than "
                               f"{MAX_NODES} nodes are not supported; check the node ids")
        if len(degrees) < n_dst:
            degrees = np.concatenate([degrees, np.zeros(n_dst - len(degrees), dtype=np.int64)])
        # a bucket carrying edge ids holds a quarter of the edges: keys, ids and their sort take ~4x the bytes
        passes.append((et, source, bucket_ranges(degrees, BUCKET_EDGES // 4 if with_ids else None), raw_edges))
        del degrees
    if not any(p[3] for p in passes):
        raise DatasetError(f"{', '.join(source.name for source in edges.values())}: holds no edges; an edge list needs "
                           "at least one 'src, dst' row")
    weighted = [et for et, source in edges.items() if source.weighted]
    if weighted and len(weighted) != len(edges):
        raise DatasetError(f"edge type {weighted[0]} has edge weights but "
                           f"{next(et for et in edges if et not in weighted)} has none; "
                           "give weights for every edge type or for none")
    total = sum(p[3] for p in passes)
    index_dtype = fmt.index_dtype(max(counts[et[0]] for et in edges))
    merge = options.drop_duplicates or options.undirected
    num_edges, symmetric, written = {}, True, 0
    columns = sum(counts[et[2]] for et, *_ in passes)
    with (
        # the column pointers go to disk edge type by edge type: a typed graph has one per (edge type, destination),
        # IGBH-large's 734M (5.9 GB), which must not sit in memory (nor be concatenated there)
        writer.stream_array(fmt.INDPTR, (columns + 1,), np.int64, scratch=True) as indptr,
        writer.stream_array(fmt.INDICES, (total,), index_dtype, scratch=True) as indices,
        writer.stream_array(fmt.EDGE_WEIGHT, (total if weighted else 0,), np.float32, scratch=True) as weights,
        writer.stream_array(fmt.EDGE_IDS, (total if with_ids else 0,), np.int64, scratch=True) as ids,
    ):
        for et, source, firsts, _ in passes:
            n_src = counts[et[0]]
            with progress(source.rows, "bucket edges", "edge", options.quiet) as bar:
                buckets = write_buckets(source.chunks, firsts, n_src, options.undirected, bool(weighted),
                                        writer.scratch, bar.update, with_ids)
            if source.release is not None:
                source.release()
            with progress(len(buckets), "sort columns", "bucket", options.quiet) as bar:
                done = assemble_columns(buckets, firsts, n_src, indices, weights, options.drop_self_loops, merge,
                                        bar.update, ids if with_ids else None)
            indptr.append(done.indptr[:-1] + written)
            written += done.num_edges
            num_edges[et] = done.num_edges
            symmetric = symmetric and done.symmetric and et[0] == et[2]
        indices.shrink(written)
        weights.shrink(written if weighted else 0)
        ids.shrink(written if with_ids else 0)
        indptr.append(np.asarray([written], dtype=np.int64))

    def mapped(name):
        array = np.load(writer.scratch(name), mmap_mode="r")
        watch(array, writer.scratch(name), fix="run again")
        return array

    csc = RawCSC(mapped(fmt.INDPTR), mapped(fmt.INDICES), mapped(fmt.EDGE_WEIGHT) if weighted else None,
                 mapped(fmt.EDGE_IDS) if with_ids else None)
    return Topology(csc, num_edges, counts, symmetric)
