"""Import edge lists and node tables from CSV / Parquet / NumPy files."""

from __future__ import annotations

import os
from pathlib import Path


from sparsetrain.datasets.build import BuildOptions, EdgeSource, Source, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.readers import EdgeListReader, NodeTableReader


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
