"""Read the edge splits of an OGB link-property folder: ``split/<name>/{train,valid,test}.pt`` (or ``split_dict.pt``).

Each file is a dict of tensors or NumPy arrays (read by :func:`~sparsetrain.datasets.pt_files.read_pt`):
``edge`` [E, 2] and ``edge_neg`` [M, 2] (ogbl-collab, -ppa, -ddi, -vessel: a shared pool of negatives), or
``source_node`` / ``target_node`` [E] and ``target_node_neg`` [E, K] (ogbl-citation2: K
negatives per positive). Other keys (``weight``, ``year``) are not used. Valid and test need their negatives.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sparsetrain.datasets.edge_split import EdgeSplit
from sparsetrain.datasets.pt_files import integer_ids, read_pt_dict
from sparsetrain.errors import DatasetError

OGB_SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def is_link_split_dir(folder: Path) -> bool:
    """Whether ``folder`` holds OGB link-property split files: ``train.pt``, or a ``split_dict.pt`` of per-split dicts
    (a node-property ``split_dict.pt`` maps each split to an array of node ids)."""
    if (folder / "train.pt").is_file():
        return True
    path = folder / "split_dict.pt"
    return path.is_file() and isinstance(read_pt_dict(path).get("train"), dict)


def _ids(part: dict, key: str, where: str, dims: int) -> torch.Tensor:
    return torch.from_numpy(integer_ids(part[key], f"{where}: field {key!r}", dims))


def _edge_split(part: dict, where: str, negatives: bool) -> EdgeSplit:
    if "edge" in part:
        pos = _ids(part, "edge", where, 2)
        if pos.shape[1] != 2:
            raise DatasetError(f"{where}: field 'edge' has shape {list(pos.shape)}; expected [num_edges, 2]")
        neg = None
        if negatives and "edge_neg" in part:
            neg = _ids(part, "edge_neg", where, 2)
            if neg.shape[1] != 2:
                raise DatasetError(f"{where}: field 'edge_neg' has shape {list(neg.shape)}; expected [num_negatives, "
                                   "2]")
            neg = neg.t().contiguous()
        return EdgeSplit(pos.t().contiguous(), neg, None)
    if "source_node" in part and "target_node" in part:
        src, dst = _ids(part, "source_node", where, 1), _ids(part, "target_node", where, 1)
        if len(src) != len(dst):
            raise DatasetError(f"{where}: 'source_node' has {len(src)} entries but 'target_node' {len(dst)}; one each "
                               "per edge")
        neg = k = None
        if negatives and "target_node_neg" in part:
            neg_dst = _ids(part, "target_node_neg", where, 2)
            if neg_dst.shape[0] != len(src):
                raise DatasetError(f"{where}: 'target_node_neg' has {neg_dst.shape[0]} rows for {len(src)} edges; one "
                                   "row per edge")
            k = neg_dst.shape[1]
            neg = torch.stack([src.repeat_interleave(k), neg_dst.reshape(-1)])
        return EdgeSplit(torch.stack([src, dst]), neg, k)
    keys = ", ".join(sorted(map(str, part))) or "none"
    raise DatasetError(f"{where}: has keys {keys}; expected 'edge' (and 'edge_neg') or 'source_node', 'target_node' "
                       "(and 'target_node_neg'); knowledge-graph splits (head/relation/tail) are not supported")


def read_ogb_edge_splits(folder: Path) -> dict[str, tuple[EdgeSplit, str]]:
    """``{train|val|test: (EdgeSplit, where)}`` from one OGB split folder."""
    whole = folder / "split_dict.pt"
    if whole.is_file():
        parts = read_pt_dict(whole)
        found = {ours: (parts[theirs], f"{whole}: [{theirs!r}]") for ours,
                 theirs in OGB_SPLIT_FILES.items() if theirs in parts}
    else:
        found = {ours: (read_pt_dict(folder / f"{theirs}.pt"), str(folder / f"{theirs}.pt"))
                 for ours, theirs in OGB_SPLIT_FILES.items() if (folder / f"{theirs}.pt").is_file()}
    missing = [theirs for ours, theirs in OGB_SPLIT_FILES.items() if ours not in found]
    if missing:
        raise DatasetError(f"{folder}: no {missing[0]}.pt (nor {missing[0]!r} in split_dict.pt); an OGB link split "
                           "has train, valid and test (training evaluates on valid and test): download it again")
    result = {}
    for name, (part, where) in found.items():
        if not isinstance(part, dict):
            raise DatasetError(f"{where}: holds a {type(part).__name__}, not a dict of arrays")
        split = _edge_split(part, where, negatives=name != "train")
        if name != "train" and (split.neg is None or split.pos.shape[1] == 0):
            what = "no positive edges" if split.pos.shape[1] == 0 else "no negatives ('edge_neg' or 'target_node_neg')"
            raise DatasetError(f"{where}: has {what}; evaluation needs both, download the split again")
        result[name] = (split, where)
    return result
