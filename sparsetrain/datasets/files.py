"""Import edge lists and node tables from CSV / Parquet / NumPy files (homogeneous and typed)."""

from __future__ import annotations

import os
from pathlib import Path


from sparsetrain._deprecation import moved_attribute
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, TimeColumn, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.format import EdgeType
from sparsetrain.datasets.input_checks import check_split_parts, target_type_of
from sparsetrain.datasets.readers import EdgeListReader, NodeTableReader, read_node_times
from sparsetrain.errors import DatasetError


def _edge_source(path: Path) -> EdgeSource:
    return _timed_edge_source(path)[0]


def _timed_edge_source(path: Path, time_column: str | None = None) -> tuple[EdgeSource, TimeColumn | None]:
    """The edges of one file, and its edge time column (read whole) when ``time_column`` names one."""
    reader = EdgeListReader(path, time_column=time_column)
    if reader.is_empty():  # before any pass over the edges (a typed import would only find an empty node type)
        raise DatasetError(f"{path}: holds no edges; an edge list needs at least one 'src, dst' row")
    source = EdgeSource(str(path), reader, reader.num_rows(), reader.where, weighted=reader.weighted)
    times = None if time_column is None else TimeColumn(f"{path}, column {reader.time_col!r}", reader.times(),
                                                        reader.where)
    return source, times


def _node_times(path) -> TimeColumn:
    values, where = read_node_times(path)
    return TimeColumn(str(path), values, where)


def from_files(
    out_dir: str | os.PathLike,
    edges: str | os.PathLike,
    *,
    features: str | os.PathLike | None = None,
    labels: str | os.PathLike | None = None,
    splits: dict[str, str | os.PathLike] | None = None,
    num_nodes: int | None = None,
    node_time: str | os.PathLike | None = None,
    edge_time_column: str | None = None,
    **options,
) -> GraphDataset:
    """Build a dataset from an edge list and optional per-node features, labels and split index files.

    ``num_nodes`` defaults to the row count of the features (or labels), else to
    the largest node id + 1. ``node_time``: a file of one time per node (CSV/Parquet of one column, or a 1-D .npy);
    ``edge_time_column``: the column of the edge list (CSV/Parquet) that holds each edge's time. Options are
    :class:`BuildOptions` fields.
    """
    check_split_parts(splits or {})
    edge_source, edge_time = _timed_edge_source(Path(edges), edge_time_column)
    return build_dataset(
        out_dir,
        edge_source,
        num_nodes=num_nodes,
        features=None if features is None else Source.from_reader(NodeTableReader(features, "features")),
        labels=None if labels is None else Source.from_reader(NodeTableReader(labels, "labels")),
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        options=BuildOptions(**options),
        node_time=None if node_time is None else _node_times(node_time),
        edge_time=edge_time,
        provenance={"importer": "files", "edges": str(edges), "features": str(features) if features else None,
                    "labels": str(labels) if labels else None},
    )


def parse_edge_type(text: str) -> EdgeType:
    """``"src,rel,dst"`` (or ``src___rel___dst``) -> ``(src, rel, dst)``."""
    parts = text.split(",") if "," in text else text.split(fmt.SEPARATOR)
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise DatasetError(f"edge type {text!r}: write it as src,rel,dst (e.g. author,writes,paper)")
    return tuple(p.strip() for p in parts)  # type: ignore[return-value]


def from_files_typed(
    out_dir: str | os.PathLike,
    edges: dict[EdgeType | str, str | os.PathLike],
    *,
    features: dict[str, str | os.PathLike] | None = None,
    labels: dict[str, str | os.PathLike] | None = None,
    num_nodes: dict[str, int] | None = None,
    target_type: str | None = None,
    splits: dict[str, str | os.PathLike] | None = None,
    num_classes: int | None = None,
    node_time: dict[str, str | os.PathLike] | None = None,
    edge_time_column: str | None = None,
    **options,
):
    """Build a typed dataset from one edge list per edge type (CSV/Parquet/.npy, src-type and dst-type ids) and per-type
    node files (features, labels; one row per node). Node types are those the edge types and counts name; features or
    labels of any other type are an error (a misspelt type). ``target_type`` (default: the only labelled type) is the
    type ``splits`` and ``num_classes`` are for. ``node_time``: per node type, a file of one time per node;
    ``edge_time_column``: the column of every edge list that holds its edges' times."""
    features, labels, num_nodes = features or {}, labels or {}, num_nodes or {}
    edge_sources: dict[EdgeType, EdgeSource] = {}
    edge_times: dict[EdgeType, TimeColumn] = {}
    for key, path in edges.items():
        et = parse_edge_type(key) if isinstance(key, str) else tuple(key)
        if et in edge_sources:
            raise DatasetError(f"edge type {et} is given twice ({edge_sources[et].name} and {path}); merge them into "
                               "one file")
        source, times = _timed_edge_source(Path(path), edge_time_column)
        if times is not None:
            edge_times[et] = times
        if source.weighted:
            raise DatasetError(f"{path}: has an edge weight column, which a typed dataset does not store; drop the "
                               "column")
        edge_sources[et] = source
    types = list(dict.fromkeys(end for et in edge_sources for end in (et[0], et[2])))
    stray = [t for t in num_nodes if t not in types]
    if stray:  # a count for a type no edge list names is a misspelt type, not an isolated one
        raise DatasetError(f"--node-count {stray[0]}=...: no edge type names node type {stray[0]!r} (node types: "
                           f"{', '.join(types)}); fix the type name")
    target_type = target_type_of(list(labels), target_type, "--node-labels")
    check_split_parts(splits or {})
    if num_classes is not None and target_type is None:
        raise DatasetError(f"num_classes={num_classes} (--num-classes) without labels; give --node-labels TYPE=FILE or "
                           "drop it")
    if num_classes is not None:
        options["num_classes"] = {target_type: num_classes}
    return build_dataset(
        out_dir, edge_sources,
        num_nodes={t: num_nodes.get(t) for t in dict.fromkeys(types)},
        features={t: Source.from_reader(NodeTableReader(v, "features")) for t, v in features.items()},
        labels={t: Source.from_reader(NodeTableReader(v, "labels")) for t, v in labels.items()},
        node_time={t: _node_times(v) for t, v in (node_time or {}).items()},
        edge_time=edge_times,
        target_type=target_type,
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        options=BuildOptions(**options),
        provenance={"importer": "files-typed", "edges": {fmt.edge_key(et): source.name for et,
                                                          source in edge_sources.items()}},
    )


_RENAMED = {"from_files_hetero": "sparsetrain.datasets.files:from_files_typed"}


def __getattr__(name: str):
    """``from_files_hetero`` (renamed ``from_files_typed``) resolves for one release, with a ``DeprecationWarning``."""
    return moved_attribute(__name__, _RENAMED, name)
