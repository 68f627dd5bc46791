"""Import edge lists and node tables from CSV / Parquet / NumPy files (homogeneous and typed)."""

from __future__ import annotations

import os
from pathlib import Path


from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, build_dataset
from sparsetrain.datasets import hetero_format as hfmt
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.hetero_build import EdgeTypeSource, HeteroBuildOptions, NodeTypeSource, build_hetero_dataset
from sparsetrain.datasets.readers import EdgeListReader, NodeTableReader
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.graph import EdgeType


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
    parts = text.split(",") if "," in text else text.split(hfmt.SEPARATOR)
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
    node files (features, labels; one row per node). Node types are those the edges, files and counts name."""
    edge_sources = {(parse_edge_type(k) if isinstance(k, str) else tuple(k)): EdgeTypeSource(_edge_source(Path(v))) for k, v in edges.items()}
    types: list[str] = []
    for et in edge_sources:
        types += [et[0], et[2]]
    types += list(features or {}) + list(labels or {}) + list(num_nodes or {})
    nodes = {
        t: NodeTypeSource(
            num_nodes=(num_nodes or {}).get(t),
            features=None if t not in (features or {}) else Source.from_reader(NodeTableReader(features[t], "features")),
            labels=None if t not in (labels or {}) else Source.from_reader(NodeTableReader(labels[t], "labels")),
        )
        for t in dict.fromkeys(types)
    }
    if target_type is None and len(labels or {}) == 1:
        target_type = next(iter(labels))
    return build_hetero_dataset(
        out_dir, nodes, edge_sources, target_type=target_type,
        splits={k: Source.from_reader(NodeTableReader(v, "index")) for k, v in (splits or {}).items()},
        options=HeteroBuildOptions(**options),
        provenance={"importer": "files-hetero", "edges": {hfmt.edge_key(et): str(edges[k]) for et, k in zip(edge_sources, edges)}},
    )
