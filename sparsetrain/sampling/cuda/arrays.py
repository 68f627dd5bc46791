"""The GPU sampler's array back ends: PyTorch CUDA tensors on a GPU (:class:`TorchArrays`), NumPy arrays under
``NUMBA_ENABLE_CUDASIM=1`` (:class:`NumpyArrays`, how the tests check the kernels without a GPU).

Arrays cross from PyTorch to the kernels by ``__cuda_array_interface__``, never by copies; a graph in page-locked host
memory is read zero-copy over PCIe. The driver reaches these through its
:class:`~sparsetrain.sampling.cuda.workspace.DeviceWorkspace`, which counts the device work each one queues.
"""

from __future__ import annotations

import numpy as np

from sparsetrain._numba_cuda import cuda
from sparsetrain.errors import BackendError
from sparsetrain.sampling.cuda.capture import CudaGraphCapture, Recording


class TorchArrays:
    """Allocations, copies and scans as PyTorch CUDA tensors; kernels see them through ``__cuda_array_interface__``.

    Nothing here waits for the device but :meth:`read`: host values go up through pinned buffers (a copy from pageable
    memory would wait for the stream).
    """

    threads = 256

    def __init__(self, device) -> None:
        import torch

        self.torch = torch
        self.device = device

    def empty(self, shape):
        return self.torch.empty(shape, dtype=self.torch.int64, device=self.device)

    def pinned(self, n: int):
        return self.torch.empty(n, dtype=self.torch.int64, pin_memory=True)

    def full(self, shape, value: int):
        return self.torch.full(shape if isinstance(shape, tuple) else (shape,), value, dtype=self.torch.int64,
                               device=self.device)

    def cumsum(self, a, axis: int = 0, out=None):
        return self.torch.cumsum(a, axis, out=out)

    def kernel(self, a):
        # sync=False: the kernels run on the stream that produced ``a``, so no host wait is needed
        return cuda.as_cuda_array(a, sync=False) if a.device.type == "cuda" else _host_mapped(a)

    def stream(self):
        """Numba's handle on PyTorch's current stream of this device."""
        return cuda.external_stream(self.torch.cuda.current_stream(self.device).cuda_stream)

    def write(self, host, values: np.ndarray) -> None:
        """The pinned buffer ``host`` set to an int64 host array's values (host memory only)."""
        host.numpy()[:] = values

    def copy_in(self, out, host) -> None:
        """Queue ``out``'s copy from the pinned buffer ``host`` (read when the copy runs; no wait)."""
        out.copy_(host, non_blocking=True)

    def graph(self) -> CudaGraphCapture:
        """A CUDA graph to capture a batch's work into."""
        return CudaGraphCapture(self)

    def split(self, a, sizes: list[int]) -> list:
        """``a`` cut into consecutive views of ``sizes``."""
        bounds = np.cumsum([0, *sizes])
        return [a[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]

    def record_done(self):
        """An event after the work queued so far on the current stream."""
        event = self.torch.cuda.Event()
        event.record(self.torch.cuda.current_stream(self.device))
        return event

    def wait_for(self, event) -> None:
        """Queue a wait for ``event`` on the current stream (no host wait)."""
        if event is not None:
            self.torch.cuda.current_stream(self.device).wait_event(event)

    def done(self, event) -> bool:
        """Whether the device has passed ``event`` (no wait)."""
        return event.query()

    def wait(self, event) -> None:
        """A host wait for ``event``."""
        event.synchronize()

    def to_host(self, host, a) -> None:
        """Queue ``a``'s values into the pinned buffer ``host`` (no wait)."""
        host.copy_(a, non_blocking=True)

    def take(self, a, index, out) -> None:
        """``out[i] = a[index[i]]`` on the device."""
        self.torch.index_select(a, 0, index, out=out)

    def as_uint64(self, a):
        return a.view(self.torch.uint64)

    def clone(self, a):
        return a.clone()

    def read(self, a) -> list[int]:
        """The one host wait: ``a``'s values on the host."""
        return a.tolist()


class NumpyArrays(TorchArrays):
    """The same operations on NumPy arrays, for the CUDA simulator."""

    threads = 32

    def __init__(self) -> None:
        pass

    def empty(self, shape):
        return np.empty(shape, np.int64)

    def pinned(self, n: int):
        return np.empty(n, np.int64)

    def full(self, shape, value: int):
        return np.full(shape, value, np.int64)

    def cumsum(self, a, axis: int = 0, out=None):
        return np.cumsum(a, axis, out=out)

    def kernel(self, a):
        return a

    def stream(self):
        return 0  # the simulator runs kernels in order on the host

    def write(self, host, values: np.ndarray) -> None:
        host[:] = values

    def copy_in(self, out, host) -> None:
        out[...] = host

    def graph(self) -> Recording:
        return Recording()

    def record_done(self):
        return None  # the simulator runs kernels in order on the host

    def wait_for(self, event) -> None:
        pass

    def done(self, event) -> bool:
        return True

    def wait(self, event) -> None:
        pass

    def to_host(self, host, a) -> None:
        host[:] = a

    def take(self, a, index, out) -> None:
        np.take(a, index, out=out)

    def as_uint64(self, a):
        return a.view(np.uint64)

    def clone(self, a):
        return a.copy()

    def read(self, a) -> list[int]:
        return a.tolist()


def _host_mapped(tensor):
    """A device view of a page-locked host tensor (unified addressing: the host pointer is valid on the device)."""
    if not tensor.is_pinned():
        raise BackendError("GPU sampling reads the graph from device memory or pinned host memory; call "
                           "graph.to('cuda') or graph.pin_memory()")

    class _View:
        __cuda_array_interface__ = {
            "shape": tuple(tensor.shape),
            "typestr": tensor.numpy().dtype.str,
            "data": (tensor.data_ptr(), False),
            "version": 3,
        }

    return cuda.as_cuda_array(_View())
