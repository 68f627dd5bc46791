"""Import edge lists and node tables from CSV / Parquet / NumPy files: one edge list (a homogeneous graph), or a dict
of them by edge type (a typed graph)."""

from __future__ import annotations

import os
from pathlib import Path

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.build import BuildOptions, EdgeSource, GraphInput, Source, TimeColumn, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.format import EdgeType
from sparsetrain.datasets.input_checks import check_split_parts
from sparsetrain.datasets.readers import EdgeListReader, NodeTableReader, read_node_times
from sparsetrain.errors import DatasetError

PathLike = str | os.PathLike


def edge_source(path: Path, time_column: str | None = None) -> tuple[EdgeSource, TimeColumn | None]:
    """The edges of one file, and its edge time column (read whole) when ``time_column`` names one."""
    reader = EdgeListReader(path, time_column=time_column)
    if reader.is_empty():  # before any pass over the edges (a typed import would only find an empty node type)
        raise DatasetError(f"{path}: holds no edges; an edge list needs at least one 'src, dst' row")
    source = EdgeSource(str(path), reader, reader.num_rows(), reader.where, weighted=reader.weighted)
    times = None if time_column is None else TimeColumn(f"{path}, column {reader.time_col!r}", reader.times(),
                                                        reader.where)
    return source, times


def parse_edge_type(key: str | tuple) -> EdgeType:
    """``"src,rel,dst"`` (or ``src___rel___dst``) or a ``(src, rel, dst)`` tuple of names -> ``(src, rel, dst)``."""
    if isinstance(key, str):
        parts = key.split(",") if "," in key else key.split(fmt.SEPARATOR)
    else:
        parts = list(key) if isinstance(key, (tuple, list)) else []
    if len(parts) != 3 or not all(isinstance(p, str) and p.strip() for p in parts):
        raise DatasetError(f"edge type {key!r}: write it as src,rel,dst or a (src, rel, dst) tuple of names (e.g. "
                           "author,writes,paper)")
    return tuple(p.strip() for p in parts)  # type: ignore[return-value]


def from_files(
    out_dir: PathLike,
    edges: PathLike | dict[EdgeType | str, PathLike],
    *,
    features: PathLike | dict[str, PathLike] | None = None,
    labels: PathLike | dict[str, PathLike] | None = None,
    splits: dict[str, PathLike] | None = None,
    num_nodes: int | dict[str, int] | None = None,
    node_time: PathLike | dict[str, PathLike] | None = None,
    edge_time_column: str | None = None,
    target_type: str | None = None,
    **options,
) -> GraphDataset:
    """Build a dataset from edge lists and optional per-node features, labels, times and split index files.

    ``edges`` one edge list (CSV/Parquet/.npy): a homogeneous graph, whose ``features``, ``labels``, ``node_time``
    and ``num_nodes`` are one file (count) each. A dict of edge lists by edge type (``(src, rel, dst)`` or
    ``"src,rel,dst"``; src-type and dst-type ids): a typed graph, whose node tables are dicts by node type; node types
    are those the edge types name, a table or count of any other type is an error (a misspelt type).
    A count defaults to the rows of the type's features (labels, times), else to its largest id + 1.
    ``node_time``: one time per node (CSV/Parquet of one column, or a 1-D .npy); ``edge_time_column``: the column of
    the edge lists (CSV/Parquet) that holds each edge's time. ``splits`` (train, val and test together) and an int
    ``num_classes`` are for ``target_type`` (default: the only labelled type). Options are :class:`BuildOptions`
    fields.
    """
    edge_files, tables = _by_type(edges, {"features": features, "labels": labels, "num_nodes": num_nodes,
                                     "node_time": node_time})
    check_split_parts(splits or {})
    edge_sources: dict[EdgeType, EdgeSource] = {}
    edge_times: dict[EdgeType, TimeColumn] = {}
    for key, path in edge_files.items():
        et = parse_edge_type(key)
        if et in edge_sources:
            raise DatasetError(f"edge type {et} is given twice ({edge_sources[et].name} and {path}); merge them into "
                               "one file")
        edge_sources[et], times = edge_source(Path(path), edge_time_column)
        if times is not None:
            edge_times[et] = times
    named = list(dict.fromkeys(end for et in edge_sources for end in (et[0], et[2])))
    counts = tables["num_nodes"]
    stray = [t for t in counts if t not in named]
    if stray:  # a count for a type no edge list names is a misspelt type, not an isolated one
        raise DatasetError(f"--node-count {stray[0]}=...: no edge type names node type {stray[0]!r} (node types: "
                           f"{', '.join(named)}); fix the type name")
    return build_dataset(out_dir, GraphInput(
        edge_sources,
        num_nodes={t: counts.get(t) for t in named},
        features={t: Source.from_reader(NodeTableReader(v, "features")) for t, v in tables["features"].items()},
        labels={t: Source.from_reader(NodeTableReader(v, "labels")) for t, v in tables["labels"].items()},
        node_time={t: _node_times(v) for t, v in tables["node_time"].items()},
        edge_time=edge_times,
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        target_type=target_type,
        provenance={"importer": "files", "edges": _names(edges, lambda k: fmt.edge_key(parse_edge_type(k))),
                    "features": _names(features), "labels": _names(labels)},
    ), BuildOptions(**options))


def _node_times(path: PathLike) -> TimeColumn:
    values, where = read_node_times(path)
    return TimeColumn(str(path), values, where)


def _by_type(edges: PathLike | dict, tables: dict[str, PathLike | int | dict | None]) -> tuple[dict, dict[str, dict]]:
    """The user's shape, read here only: one edge list (a homogeneous graph, each node table one file or count) becomes
    the one type's dicts (``EDGE``, ``NODE``); a dict of edge lists by edge type keeps its tables' dicts. A table of
    the other shape is refused."""
    one_file = not isinstance(edges, dict)
    shape, table_shape = _SHAPES[one_file]
    for name, value in tables.items():
        if value is not None and isinstance(value, dict) == one_file:
            raise DatasetError(f"{name}={value!r}: with edges {shape} give it as {table_shape}")
    if one_file:
        return {fmt.EDGE: edges}, {name: {} if value is None else {fmt.NODE: value} for name, value in tables.items()}
    return edges, {name: value or {} for name, value in tables.items()}


_SHAPES = {True: ("of one file", "one file (count)"), False: ("by edge type", "a dict by node type")}
"""The words for a table of the wrong shape, by whether the edges are one file."""


def _names(files: PathLike | dict | None, key=str) -> str | dict | None:
    """What ``meta.json`` records of the files as the user gave them: their paths (by ``key(type)`` when by type)."""
    if isinstance(files, dict):
        return {key(t): str(path) for t, path in files.items()}
    return None if not files else str(files)
