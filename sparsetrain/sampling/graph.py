"""Graph topology in compressed sparse column (CSC) form.

Column ``v`` lists the in-neighbors of ``v``: ``indices[indptr[v]:indptr[v + 1]]``
are the sources of the edges ``u -> v``, sorted ascending. This is the layout
neighbor sampling reads (a dst node's in-edges are contiguous) and the one
``torch_geometric.utils.to_torch_csc_tensor`` produces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class CSCGraph:
    """CSC topology: ``indptr`` int64 [N + 1], ``indices`` int32/int64 [E], optional ``weights`` [E]."""

    indptr: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.indptr.dtype != torch.int64 or self.indptr.dim() != 1 or self.indptr.numel() < 1:
            raise ValueError("CSCGraph.indptr must be a 1-D int64 tensor of length num_nodes + 1")
        if self.indices.dtype not in (torch.int32, torch.int64) or self.indices.dim() != 1:
            raise ValueError("CSCGraph.indices must be a 1-D int32 or int64 tensor")
        if self.weights is not None and self.weights.shape != self.indices.shape:
            raise ValueError("CSCGraph.weights must have one entry per edge (same shape as indices)")

    @classmethod
    def from_numpy(cls, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray | None = None) -> CSCGraph:
        """Wrap NumPy arrays (memory-mapped ones included) without copying."""
        as_tensor = torch.from_numpy
        return cls(as_tensor(indptr), as_tensor(indices), None if weights is None else as_tensor(weights))

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    def in_degrees(self) -> torch.Tensor:
        """In-degree of every node, int64 [N]."""
        return self.indptr[1:] - self.indptr[:-1]

    def __repr__(self) -> str:
        weighted = ", weighted" if self.weights is not None else ""
        return f"CSCGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, indices={self.indices.dtype}{weighted})"
