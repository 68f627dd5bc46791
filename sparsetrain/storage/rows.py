"""Rows of whatever holds features: a plain tensor, or any store with ``gather(ids)``."""

from __future__ import annotations

import torch


def gather_rows(table, ids: torch.Tensor) -> torch.Tensor:
    """``table[ids]`` for a tensor, ``table.gather(ids)`` for a feature store (``Tensor.gather`` is something else)."""
    if isinstance(table, torch.Tensor):
        return table[ids]
    return table.gather(ids)
