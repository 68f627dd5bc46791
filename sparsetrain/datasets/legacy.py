"""Format version 2's topology: a CSC file set per edge type, read into the one flat graph.

Version 2 stored each edge type as ``edge.<src>___<rel>___<dst>.{indptr,indices,edge_ids}.npy`` (a CSC over the dst
type). Loading one maps each relation and concatenates them with :meth:`CSCGraph.from_relations` (a copy in memory);
every other file of a version-2 folder is described by its ``meta.json`` as version 3 describes it
(:func:`~sparsetrain.datasets.format.read_meta`). Version 1 needs nothing here: its files are version 3's
one-type files.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.checks import check_increasing, check_range, format_array, mapped_file
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.graph import CSCGraph

_REBUILD = "the dataset is damaged, re-run `sparsetrain preprocess`"


def relation_file(edge_type: fmt.EdgeType, kind: str) -> str:
    """Version 2's file of an edge type's ``indptr``, ``indices`` or ``edge_ids``."""
    return f"edge.{fmt.edge_key(edge_type)}.{kind}.npy"


def _relations(folder: Path, meta: dict) -> tuple[dict[fmt.EdgeType, CSCGraph], dict[fmt.EdgeType, torch.Tensor]]:
    relations, edge_ids = {}, {}
    for entry in meta["edge_types"]:
        et, e = (entry["src"], entry["rel"], entry["dst"]), entry["num_edges"]
        for kind in ("indptr", "indices", "edge_ids"):
            if relation_file(et, kind) not in meta["files"]:
                raise DatasetError(f"{folder / fmt.META_FILE}: 'files' has no entry for {relation_file(et, kind)}; "
                                   f"{_REBUILD}")
        indptr = format_array(folder, meta, relation_file(et, "indptr"), ("int64",), (meta["node_types"][et[2]] + 1,))
        indices = format_array(folder, meta, relation_file(et, "indices"), ("int32", "int64"), (e,))
        if int(indptr[0]) != 0 or int(indptr[-1]) != e:
            raise DatasetError(f"{folder / relation_file(et, 'indptr')}: does not describe {e} edges (first "
                               f"{indptr[0]}, last {indptr[-1]}); {_REBUILD}")
        ids = format_array(folder, meta, relation_file(et, "edge_ids"), ("int64",), (e,), mmap=False)
        edge_ids[et] = torch.from_numpy(ids)
        files = {kind: mapped_file(folder, relation_file(et, kind)) for kind in ("indptr", "indices")}
        relations[et] = CSCGraph(torch.from_numpy(indptr), torch.from_numpy(indices), files=files)
    return relations, edge_ids


def open_graph(folder: Path, meta: dict) -> tuple[CSCGraph, dict[fmt.EdgeType, torch.Tensor]]:
    """The typed graph of a version-2 folder, its relations concatenated into the flat layout, and each edge type's
    edge ids (kept beside the graph, as version 3 keeps them)."""
    relations, edge_ids = _relations(folder, meta)
    return CSCGraph.from_relations(dict(meta["node_types"]), relations), edge_ids


def verify_relations(folder: Path, meta: dict, chunk: int) -> None:
    """Version 2's structure checks: per edge type, pointers monotone, source ids and edge ids in range."""
    relations, edge_ids = _relations(folder, meta)
    for et, csc in relations.items():
        csc.check_files()
        check_increasing(folder / relation_file(et, "indptr"), csc.indptr.numpy(), False, "column pointers", chunk,
                         csc.check_files)
        check_range(folder / relation_file(et, "indices"), csc.indices.numpy(), 0, meta["node_types"][et[0]],
                    f"{et[0]!r} node", chunk, csc.check_files)
        check_range(folder / relation_file(et, "edge_ids"), edge_ids[et].numpy(), 0, csc.num_edges, "edge id", chunk)
