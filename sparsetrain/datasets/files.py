"""Import edge lists and node tables from CSV / Parquet / NumPy files (homogeneous and typed)."""

from __future__ import annotations

import os
from pathlib import Path


from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.format import EdgeType
from sparsetrain.datasets.readers import EdgeListReader, NodeTableReader
from sparsetrain.errors import DatasetError


def _edge_source(path: Path) -> EdgeSource:
    reader = EdgeListReader(path)
    return EdgeSource(str(path), reader, reader.num_rows(), reader.where, weighted=reader.weighted)


def from_files(
    out_dir: str | os.PathLike,
    edges: str | os.PathLike,
    *,
    features: str | os.PathLike | None = None,
    labels: str | os.PathLike | None = None,
    splits: dict[str, str | os.PathLike] | None = None,
    num_nodes: int | None = None,
    **options,
) -> GraphDataset:
    """Build a dataset from an edge list and optional per-node features, labels and split index files.

    ``num_nodes`` defaults to the row count of the features (or labels), else to
    the largest node id + 1. Options are :class:`BuildOptions` fields.
    """
    return build_dataset(
        out_dir,
        _edge_source(Path(edges)),
        num_nodes=num_nodes,
        features=None if features is None else Source.from_reader(NodeTableReader(features, "features")),
        labels=None if labels is None else Source.from_reader(NodeTableReader(labels, "labels")),
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        options=BuildOptions(**options),
        provenance={"importer": "files", "edges": str(edges), "features": str(features) if features else None, "labels": str(labels) if labels else None},
    )


def parse_edge_type(text: str) -> EdgeType:
    """``"src,rel,dst"`` (or ``src___rel___dst``) -> ``(src, rel, dst)``."""
    parts = text.split(",") if "," in text else text.split(fmt.SEPARATOR)
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise DatasetError(f"edge type {text!r}: write it as src,rel,dst (e.g. author,writes,paper)")
    return tuple(p.strip() for p in parts)  # type: ignore[return-value]


def from_files_hetero(
    out_dir: str | os.PathLike,
    edges: dict[EdgeType | str, str | os.PathLike],
    *,
    features: dict[str, str | os.PathLike] | None = None,
    labels: dict[str, str | os.PathLike] | None = None,
    num_nodes: dict[str, int] | None = None,
    target_type: str | None = None,
    splits: dict[str, str | os.PathLike] | None = None,
    **options,
):
    """Build a typed dataset from one edge list per edge type (CSV/Parquet/.npy, src-type and dst-type ids) and per-type
    node files (features, labels; one row per node). Node types are those the edges and counts name; features or labels
    of any other type are an error (a misspelt type)."""
    edge_sources = {(parse_edge_type(k) if isinstance(k, str) else tuple(k)): _edge_source(Path(v)) for k, v in edges.items()}
    types = [end for et in edge_sources for end in (et[0], et[2])] + list(num_nodes or {})
    if target_type is None and len(labels or {}) == 1:
        target_type = next(iter(labels))
    return build_dataset(
        out_dir, edge_sources,
        num_nodes={t: (num_nodes or {}).get(t) for t in dict.fromkeys(types)},
        features={t: Source.from_reader(NodeTableReader(v, "features")) for t, v in (features or {}).items()},
        labels={t: Source.from_reader(NodeTableReader(v, "labels")) for t, v in (labels or {}).items()},
        target_type=target_type,
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        options=BuildOptions(**options),
        provenance={"importer": "files-hetero", "edges": {fmt.edge_key(et): str(edges[k]) for et, k in zip(edge_sources, edges)}},
    )
