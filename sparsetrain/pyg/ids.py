"""The one check of the id tensors :mod:`sparsetrain.pyg` takes: integers (a bool mask where masks are taken), in range.

PyG's loaders fail on float ids (``RuntimeError``, ``NotImplementedError`` for a float ``edge_index``); a cast would
truncate them to other nodes' ids, so every entry point (the loaders' ``input_nodes`` / ``edge_label_index``, the
sampler's ``sample_from_nodes`` / ``sample_from_edges``, :func:`~sparsetrain.pyg.graph.graph_of`'s ``edge_index``)
checks here instead, in one vectorised pass. Integer ids of any signed width are widened to int64 without loss;
``uint8`` is refused, since torch once read a ``uint8`` index as a mask.
"""

from __future__ import annotations

import torch

from sparsetrain.errors import InputError, NotSupportedError

ID_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8)


def checked_ids(ids, name: str, num_nodes: int | None = None, *, mask: bool = False) -> torch.Tensor:
    """``ids`` (a tensor or a list) as a tensor, refused in one line unless they are integer node ids in
    ``[0, num_nodes)`` (None: not range-checked) or, with ``mask``, a 1-D bool mask of ``num_nodes`` entries
    (returned as is: PyG turns it into ids)."""
    ids = _integers(ids, name, mask)
    if ids.dim() != 1:
        what = "node ids or a bool mask" if mask else "node ids"
        raise InputError(f"{name} has shape {list(ids.shape)}; pass a 1-D tensor of {what}")
    if ids.dtype == torch.bool:
        if num_nodes is not None and ids.numel() != num_nodes:
            raise InputError(f"{name} is a bool mask of shape {list(ids.shape)} for {num_nodes} nodes; give one "
                                  "entry per node")
        return ids
    if num_nodes is not None and ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= num_nodes:
            raise InputError(f"{name} has ids in [{lo}, {hi}], outside [0, {num_nodes}); pass ids of existing "
                                  "nodes")
    return ids


def _integers(ids, name: str, mask: bool) -> torch.Tensor:
    """``ids`` as a tensor, refused unless integers (or bool, with ``mask``)."""
    if not isinstance(ids, torch.Tensor):
        try:  # an empty list holds no ids of any dtype (torch would call it float32)
            ids = torch.as_tensor(ids, dtype=torch.int64) if _is_empty_sequence(ids) else torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError):
            raise NotSupportedError(f"{name} is a {type(ids).__name__} that is not a tensor of ids; pass a tensor of "
                                    "node ids") from None
    if ids.dtype == torch.bool and not mask:
        raise NotSupportedError(f"{name} is a bool tensor; pass integer node ids (mask.nonzero().view(-1))")
    if ids.dtype != torch.bool and ids.dtype not in ID_DTYPES:
        fix = ".long() ids or a .bool() mask" if mask else ".long() ids"
        why = " (torch once read uint8 as a mask)" if ids.dtype == torch.uint8 else ""
        if ids.dtype.is_floating_point:
            why = " (a cast would truncate 2.7 to node 2)"
        raise NotSupportedError(f"{name} has dtype {ids.dtype}; node ids must be integers{why}: pass {fix}")
    return ids


def _is_empty_sequence(value) -> bool:
    """``[]``, or ``[[], []]`` for an empty edge_label_index: lists with no numbers at all."""
    if not isinstance(value, (list, tuple)):
        return False
    return all(_is_empty_sequence(v) for v in value)


def checked_edge_index(edge_index, name: str, num_src: int | None = None, num_dst: int | None = None) -> torch.Tensor:
    """``edge_index`` checked as a ``[2, E]`` integer tensor whose rows are ids in ``[0, num_src)`` and
    ``[0, num_dst)`` (None: not range-checked)."""
    edge_index = _integers(edge_index, name, mask=False)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise InputError(f"{name} has shape {list(edge_index.shape)}; pass [2, num_edges] (sources, "
                              "destinations)")
    checked_ids(edge_index[0], f"{name} row 0 (sources)", num_src)
    checked_ids(edge_index[1], f"{name} row 1 (destinations)", num_dst)
    return edge_index
