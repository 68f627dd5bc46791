"""Read the edge splits of an OGB link-property folder: ``split/<name>/{train,valid,test}.pt`` (or ``split_dict.pt``).

Each file is a dict of tensors, read with ``torch.load(weights_only=True)``: ``edge`` [E, 2] and
``edge_neg`` [M, 2] (ogbl-collab, -ppa, -ddi, -vessel: a shared pool of negatives), or
``source_node`` / ``target_node`` [E] and ``target_node_neg`` [E, K] (ogbl-citation2: K
negatives per positive). Other keys (``weight``, ``year``) are not used.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from sparsetrain.datasets.edge_split import EdgeSplit
from sparsetrain.errors import DatasetError

OGB_SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def is_link_split_dir(folder: Path) -> bool:
    """Whether ``folder`` holds OGB link-property split files: ``train.pt``, or a ``split_dict.pt`` of per-split dicts
    (a node-property ``split_dict.pt`` maps each split to a tensor of node ids)."""
    if (folder / "train.pt").is_file():
        return True
    path = folder / "split_dict.pt"
    return path.is_file() and isinstance(_load(path).get("train"), dict)


def _load(path: Path) -> dict:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatasetError(f"{path}: cannot be read as a dict of tensors with torch.load(weights_only=True) ({first}); "
                           "download the split again with the ogb package") from None
    if not isinstance(obj, dict):
        raise DatasetError(f"{path}: holds a {type(obj).__name__}, not a dict of tensors; this is not an OGB link split file")
    return obj


def _tensor(part: dict, key: str, where: str, dims: int) -> torch.Tensor:
    value = part[key]
    if not isinstance(value, torch.Tensor) or value.dim() != dims or value.dtype.is_floating_point or value.dtype == torch.bool:
        shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise DatasetError(f"{where}: field {key!r} is {shape}; expected a {dims}-D integer tensor of node ids")
    return value.to(torch.int64)


def _edge_split(part: dict, where: str, negatives: bool) -> EdgeSplit:
    if "edge" in part:
        pos = _tensor(part, "edge", where, 2)
        if pos.shape[1] != 2:
            raise DatasetError(f"{where}: field 'edge' has shape {list(pos.shape)}; expected [num_edges, 2]")
        neg = None
        if negatives and "edge_neg" in part:
            neg = _tensor(part, "edge_neg", where, 2)
            if neg.shape[1] != 2:
                raise DatasetError(f"{where}: field 'edge_neg' has shape {list(neg.shape)}; expected [num_negatives, 2]")
            neg = neg.t().contiguous()
        return EdgeSplit(pos.t().contiguous(), neg, None)
    if "source_node" in part and "target_node" in part:
        src, dst = _tensor(part, "source_node", where, 1), _tensor(part, "target_node", where, 1)
        if len(src) != len(dst):
            raise DatasetError(f"{where}: 'source_node' has {len(src)} entries but 'target_node' {len(dst)}; one each per edge")
        neg = k = None
        if negatives and "target_node_neg" in part:
            neg_dst = _tensor(part, "target_node_neg", where, 2)
            if neg_dst.shape[0] != len(src):
                raise DatasetError(f"{where}: 'target_node_neg' has {neg_dst.shape[0]} rows for {len(src)} edges; one row per edge")
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
        parts = _load(whole)
        found = {ours: (parts[theirs], f"{whole}: [{theirs!r}]") for ours, theirs in OGB_SPLIT_FILES.items() if theirs in parts}
    else:
        found = {ours: (_load(folder / f"{theirs}.pt"), str(folder / f"{theirs}.pt"))
                 for ours, theirs in OGB_SPLIT_FILES.items() if (folder / f"{theirs}.pt").is_file()}
    if "train" not in found:
        raise DatasetError(f"{folder}: no train.pt (nor 'train' in split_dict.pt); an OGB link split has train, valid and test")
    result = {}
    for name, (part, where) in found.items():
        if not isinstance(part, dict):
            raise DatasetError(f"{where}: holds a {type(part).__name__}, not a dict of tensors")
        result[name] = (_edge_split(part, where, negatives=name != "train"), where)
    return result
