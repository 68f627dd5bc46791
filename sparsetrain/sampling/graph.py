"""Graph topology in compressed sparse column (CSC) form.

Column ``v`` lists the in-neighbors of ``v``: ``indices[indptr[v]:indptr[v + 1]]``
are the sources of the edges ``u -> v``, sorted ascending. This is the layout
neighbor sampling reads (a dst node's in-edges are contiguous) and the one
``torch_geometric.utils.to_torch_csc_tensor`` produces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from numba import njit

from sparsetrain.errors import DatasetError
from sparsetrain.sampling.errors import SamplingBackendError, SamplingError

DAMAGED = "the graph is damaged: check it with `sparsetrain info` (or sparsetrain.datasets.load(path, verify=True))"


class MappedFile:
    """The file behind a memory-mapped array, held open so that :meth:`check` can see it shrink.

    Reading a mapped page past the end of a file that was truncated after mapping raises
    SIGBUS; an ``fstat`` of the mapped file before a read turns that into a
    :class:`~sparsetrain.errors.DatasetError`. A truncation between the check and the read
    still faults: the mapping is registered with ``sparsetrain._sigbus`` where it is made
    (``datasets.format.open_array``), whose handler ends the process with one line naming the file.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def same_file(self, path: str | os.PathLike) -> bool:
        """True when ``path`` names the file held open here (it was not replaced in between)."""
        mine, theirs = os.fstat(self._fd), os.stat(path)
        return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)

    def check(self) -> None:
        """Raise :class:`~sparsetrain.errors.DatasetError` when the file is now shorter than when it was mapped."""
        size = os.fstat(self._fd).st_size
        if size < self.size:
            raise DatasetError(
                f"{self.path}: the file shrank to {size} bytes after it was mapped (it had {self.size}); it was truncated or "
                "rewritten in place while in use, restore it and open the dataset again with sparsetrain.datasets.load"
            )

    def __getstate__(self) -> dict:
        return {"path": self.path, "size": self.size}

    def __setstate__(self, state: dict) -> None:
        self.path, self.size = state["path"], state["size"]
        self._fd = os.open(self.path, os.O_RDONLY)

    def __del__(self) -> None:
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __repr__(self) -> str:
        return f"MappedFile({self.path})"


@dataclass
class CSCGraph:
    """CSC topology: ``indptr`` int64 [N + 1], ``indices`` int32/int64 [E], optional ``weights`` [E].

    ``edge_perm``: optional int64 [E], the caller's id of the edge at each CSC position (e.g. its column in
    the ``edge_index`` the graph was built from); samplers then report edge ids in that order, else CSC positions.
    ``files``: for arrays memory-mapped from files, their :class:`MappedFile` by field name
    (``"indptr"``, ``"indices"``, ``"weights"``); readers call :meth:`check_files` before reading.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor | None = None
    edge_perm: torch.Tensor | None = None
    files: dict[str, MappedFile] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.indptr.dtype != torch.int64 or self.indptr.dim() != 1 or self.indptr.numel() < 1:
            raise ValueError("CSCGraph.indptr must be a 1-D int64 tensor of length num_nodes + 1")
        if self.indices.dtype not in (torch.int32, torch.int64) or self.indices.dim() != 1:
            raise ValueError("CSCGraph.indices must be a 1-D int32 or int64 tensor")
        if self.weights is not None and self.weights.shape != self.indices.shape:
            raise ValueError("CSCGraph.weights must have one entry per edge (same shape as indices)")
        if self.edge_perm is not None and (self.edge_perm.dtype != torch.int64 or self.edge_perm.shape != self.indices.shape):
            raise ValueError("CSCGraph.edge_perm must be an int64 tensor with one entry per edge (same shape as indices)")

    def check_files(self) -> None:
        """Raise :class:`~sparsetrain.errors.DatasetError` if a file an array is mapped from has shrunk (one ``fstat`` each)."""
        for mapped in self.files.values():
            mapped.check()

    def source(self, name: str) -> str:
        """Where array ``name`` (``"indptr"``, ``"indices"``, ``"weights"``) comes from, for error messages."""
        mapped = self.files.get(name)
        return str(mapped.path) if mapped is not None else f"CSCGraph.{name}"

    @classmethod
    def from_numpy(cls, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray | None = None) -> CSCGraph:
        """Wrap NumPy arrays (memory-mapped ones included) without copying."""
        as_tensor = torch.from_numpy
        return cls(as_tensor(indptr), as_tensor(indices), None if weights is None else as_tensor(weights))

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, num_nodes: int | None = None, edge_weight: torch.Tensor | None = None) -> CSCGraph:
        """Build from a PyG-style ``edge_index`` [2, E] (row 0 = source, row 1 = destination).

        Edges are sorted by destination, then source; duplicates are kept.
        ``indices`` is int32 when every node id fits, else int64. ``edge_perm``
        maps each CSC position back to the edge's column in ``edge_index``.
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
        return cls(indptr, src[order].to(index_dtype).contiguous(), weights, order)

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
        self.check_files()
        copy = lambda t: None if t is None else t.to("cpu").clone()  # noqa: E731
        return CSCGraph(copy(self.indptr), copy(self.indices), copy(self.weights), copy(self.edge_perm))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> CSCGraph:
        """A copy of the topology on ``device`` (itself when already there)."""
        device = torch.device(device)
        if device == self.device or (device.type == self.device.type and device.index is None):
            return self
        self.check_files()
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return CSCGraph(move(self.indptr), move(self.indices), move(self.weights), move(self.edge_perm))

    def pin_memory(self) -> CSCGraph:
        """A copy in page-locked host memory, which GPU sampling kernels read in place over PCIe."""
        if self.is_pinned():
            return self
        if not torch.cuda.is_available():
            raise SamplingBackendError("CSCGraph.pin_memory() needs CUDA (page-locked memory is a CUDA driver feature); keep the graph in ordinary memory on this machine")
        self.check_files()
        pin = lambda t: None if t is None else t.cpu().pin_memory()  # noqa: E731
        return CSCGraph(pin(self.indptr), pin(self.indices), pin(self.weights), pin(self.edge_perm))

    def columns(self, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """In-degrees of nodes ``[lo, hi)`` and their in-neighbors (int64, concatenated), checked to lie inside the graph.

        A damaged ``indptr`` or ``indices`` (a range outside the edges, an id that is not a node) raises
        :class:`~sparsetrain.sampling.errors.SamplingError` naming the file and the entry, instead of being read through.
        """
        self.check_files()
        ptr = self.indptr[lo : hi + 1]
        counts = ptr[1:] - ptr[:-1]
        bad = (ptr[:-1] < 0) | (counts < 0) | (ptr[1:] > self.num_edges)
        if bool(bad.any()):
            v = lo + int(bad.nonzero()[0])
            raise SamplingError(f"{self.source('indptr')}: node {v}'s in-edges are entries {int(self.indptr[v])} to {int(self.indptr[v + 1])} "
                                f"of indices, which has {self.num_edges}; {DAMAGED}")
        start = int(ptr[0]) if hi > lo else 0
        neighbors = self.indices[start : start + int(counts.sum())].long()
        bad = (neighbors < 0) | (neighbors >= self.num_nodes)
        if bool(bad.any()):
            p = int(bad.nonzero()[0])
            raise SamplingError(f"{self.source('indices')}: entry {start + p} is {int(neighbors[p])}, which must be in [0, {self.num_nodes}); {DAMAGED}")
        return counts, neighbors

    def to_edge_index(self) -> torch.Tensor:
        """All edges as an int64 ``[2, E]`` tensor (source row, destination row), in CSC order."""
        self.check_files()
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

    def out_degrees(self) -> torch.Tensor:
        """Out-degree of every node (how many in-neighbor lists hold it), int64 [N]: one pass over ``indices``."""
        self.check_files()
        if self.device.type != "cpu":
            return torch.bincount(self.indices.to(torch.int64), minlength=self.num_nodes)
        return torch.from_numpy(_count_occurrences(self.indices.numpy(), self.num_nodes))

    def __repr__(self) -> str:
        weighted = ", weighted" if self.weights is not None else ""
        return f"CSCGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, indices={self.indices.dtype}{weighted})"


@njit(cache=True, nogil=True)
def _count_occurrences(indices, num_nodes):
    counts = np.zeros(num_nodes, np.int64)
    for i in range(indices.size):
        counts[indices[i]] += 1
    return counts
