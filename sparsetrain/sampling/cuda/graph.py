"""The GPU sampler's view of a :class:`~sparsetrain.sampling.CSCGraph` (:class:`DeviceCSC`): its arrays as kernel
views (device memory or pinned host memory), its largest in-degrees, one :class:`DeviceWorkspace` per sampling
thread."""

from __future__ import annotations

import threading

import numpy as np

from sparsetrain._numba_cuda import cuda
from sparsetrain.errors import BackendError
from sparsetrain.sampling.cuda.arrays import TorchArrays
from sparsetrain.sampling.cuda.workspace import DeviceWorkspace


def max_degrees(indptr: np.ndarray, layout) -> np.ndarray:
    """Per edge type, the largest in-degree: what a fanout of -1 can draw for one node."""
    cols = np.append(layout.col_offset, len(indptr) - 1)
    degrees = np.diff(np.asarray(indptr, np.int64))
    return np.array([degrees[a:b].max(initial=0) for a, b in zip(cols[:-1], cols[1:])], np.int64)


class DeviceCSC:
    """The sampler's device views of a CSCGraph (device memory or pinned host memory)."""

    def __init__(self, graph) -> None:
        if not cuda.is_available():
            raise BackendError("GPU sampling needs a CUDA device visible to numba.cuda; sample on the CPU "
                               "(keep the graph and seeds on the host)")
        device = graph.device if graph.device.type == "cuda" else None
        self.ops = TorchArrays(device or "cuda")
        self.sources = (graph.source("indptr"), graph.source("indices"))
        self.indptr = self.ops.kernel(graph.indptr)
        self.indices = self.ops.kernel(graph.indices)
        self.weights = self.ops.kernel(graph.weights if graph.weights is not None else self.ops.full(1, 0).float())
        self.edge_perm = None if graph.edge_perm is None else self.ops.kernel(graph.edge_perm)
        self._graph = graph
        self._max_degree = None
        self._local = threading.local()

    def workspace(self) -> DeviceWorkspace:
        """This thread's :class:`DeviceWorkspace` (threads sample batches side by side, each in its own arrays)."""
        ws = getattr(self._local, "workspace", None)
        if ws is None:
            ws = self._local.workspace = DeviceWorkspace(self.ops)
        return ws

    @property
    def last_batch_counts(self):
        """What this thread's last batch queued on the device
        (:class:`~sparsetrain.sampling.cuda.counts.BatchCounts`)."""
        return self.workspace().last_counts

    def max_degree(self, layout) -> np.ndarray:
        """:func:`max_degrees` of the graph, computed once (the one host read it costs)."""
        if self._max_degree is None:
            self._max_degree = max_degrees(self._graph.indptr.cpu().numpy(), layout)
        return self._max_degree
