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

from sparsetrain.sampling.errors import SamplingBackendError, SamplingError


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

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, num_nodes: int | None = None, edge_weight: torch.Tensor | None = None) -> CSCGraph:
        """Build from a PyG-style ``edge_index`` [2, E] (row 0 = source, row 1 = destination).

        Edges are sorted by destination, then source; duplicates are kept.
        ``indices`` is int32 when every node id fits, else int64.
        """
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise SamplingError(f"edge_index has shape {list(edge_index.shape)}; expected [2, num_edges]")
        edge_index = edge_index.detach().to("cpu", torch.int64)
        if num_nodes is None:
            num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
            raise SamplingError(f"edge_index has node ids outside [0, {num_nodes}); pass the right num_nodes")
        src, dst = edge_index
        order = torch.argsort(dst * max(num_nodes, 1) + src, stable=True)
        counts = torch.bincount(dst, minlength=num_nodes)
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        index_dtype = torch.int32 if num_nodes < 2**31 else torch.int64
        weights = None
        if edge_weight is not None:
            if edge_weight.numel() != src.numel():
                raise SamplingError(f"edge_weight has {edge_weight.numel()} entries for {src.numel()} edges; give one weight per edge")
            weights = edge_weight.detach().cpu().reshape(-1)[order].contiguous()
        return cls(indptr, src[order].to(index_dtype).contiguous(), weights)

    @property
    def device(self) -> torch.device:
        """Where the topology lives (pinned host memory reports ``cpu``; see :meth:`is_pinned`)."""
        return self.indptr.device

    def is_pinned(self) -> bool:
        """True when ``indptr`` and ``indices`` are in page-locked host memory (GPU kernels read them zero-copy)."""
        return self.indptr.device.type == "cpu" and self.indptr.is_pinned() and self.indices.is_pinned()

    def numpy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(indptr, indices, weights)`` as NumPy views (no copy); host graphs only."""
        if self.device.type != "cpu":
            raise SamplingError(f"CSCGraph is on {self.device}; NumPy views need a host graph (call .to('cpu') first)")
        return self.indptr.numpy(), self.indices.numpy(), None if self.weights is None else self.weights.numpy()

    def in_memory(self) -> CSCGraph:
        """A copy in ordinary host memory (reads a memory-mapped dataset in full; random access then never waits on the disk)."""
        copy = lambda t: None if t is None else t.to("cpu").clone()  # noqa: E731
        return CSCGraph(copy(self.indptr), copy(self.indices), copy(self.weights))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> CSCGraph:
        """A copy of the topology on ``device`` (itself when already there)."""
        device = torch.device(device)
        if device == self.device or (device.type == self.device.type and device.index is None):
            return self
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return CSCGraph(move(self.indptr), move(self.indices), move(self.weights))

    def pin_memory(self) -> CSCGraph:
        """A copy in page-locked host memory, which GPU sampling kernels read in place over PCIe."""
        if self.is_pinned():
            return self
        if not torch.cuda.is_available():
            raise SamplingBackendError("CSCGraph.pin_memory() needs CUDA (page-locked memory is a CUDA driver feature); keep the graph in ordinary memory on this machine")
        pin = lambda t: None if t is None else t.cpu().pin_memory()  # noqa: E731
        return CSCGraph(pin(self.indptr), pin(self.indices), pin(self.weights))

    def to_edge_index(self) -> torch.Tensor:
        """All edges as an int64 ``[2, E]`` tensor (source row, destination row), in CSC order."""
        dst = torch.repeat_interleave(torch.arange(self.num_nodes, device=self.device), self.in_degrees())
        return torch.stack([self.indices.to(torch.int64), dst])

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
