"""`PinnedFeatures`: rows in page-locked host memory, read zero-copy by a GPU kernel or gathered by the CPU."""

from __future__ import annotations

import os

import numpy as np
import torch

from sparsetrain.errors import BackendError, SettingError
from sparsetrain.storage.base import FeatureSource, byte_rows, widen
from sparsetrain.storage.gather_kernels import gather_rows
from sparsetrain.storage.host_memory import (
    DEFAULT_CHUNK_BYTES,
    HostRegistration,
    cuda_available,
    host_pointer_usable_on_device,
    pinned_empty,
)

COPY_CHUNK_BYTES = 64 << 20


def _host_tensor(source) -> torch.Tensor:
    """A contiguous CPU tensor for ``source`` (tensor, array, path of a .npy, or any FeatureSource)."""
    if isinstance(source, (str, os.PathLike)):
        from sparsetrain.storage.mmap import MmapFeatures

        source = MmapFeatures(source)
    if isinstance(source, FeatureSource):
        table = pinned_empty(tuple(source.shape), source.dtype)
        step = max(1, COPY_CHUNK_BYTES // max(1, source.row_bytes))
        for lo in range(0, source.num_rows, step):
            ids = torch.arange(lo, min(source.num_rows, lo + step))
            table[lo : lo + ids.numel()] = source.gather(ids).cpu()
        return table
    if isinstance(source, np.ndarray):
        source = torch.from_numpy(np.ascontiguousarray(source))
    if not isinstance(source, torch.Tensor) or source.dim() < 1:
        raise SettingError("PinnedFeatures needs a tensor, array, .npy path or FeatureSource with rows, got "
                           f"{type(source).__name__}")
    return source.detach().cpu().contiguous()


class PinnedFeatures(FeatureSource):
    """A feature table in page-locked, device-mapped host memory.

    ``device="cuda"``: ``gather`` runs a GPU kernel that reads only the requested rows over PCIe
    (sorted ids, aligned vector loads) and writes them to device memory: no CPU gather, no staging copy.
    A call queues a sort and the kernel, without a host wait and without an allocation but its output
    (:mod:`~sparsetrain.storage.cuda_gather`'s ``ZeroCopyGather``; :attr:`last_gather_counts`).
    ``device="cpu"``: a parallel Numba gather into a pinned output, ready for ``.to("cuda", non_blocking=True)``.
    An existing CPU tensor is registered in place (``cudaHostRegister``, chunked when one call fails)
    unless ``copy=True``; without CUDA the rows simply stay in ordinary host memory.
    """

    def __init__(self, source, device: str | torch.device | None = None, *, copy: bool = False,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        has_cuda = cuda_available()
        device = torch.device(device if device is not None else ("cuda" if has_cuda else "cpu"))
        if device.type == "cuda" and not has_cuda:
            raise BackendError("PinnedFeatures(device='cuda') needs a CUDA GPU and none is visible; use "
                               "device='cpu'")
        host = _host_tensor(source)
        super().__init__(host.shape, host.dtype, device)
        self._registration = self._zero_copy = None
        if has_cuda and not host.is_pinned():
            host = self._pin(host, copy, chunk_bytes)
        self.host = host
        self.pinned = has_cuda and (host.is_pinned() or self._registration is not None)
        self._bytes = byte_rows(host)
        if self.device.type == "cuda" and self.num_rows:
            from sparsetrain.storage.cuda_gather import TorchOps, ZeroCopyGather

            self._zero_copy = ZeroCopyGather(TorchOps(self.device), host, self.num_rows, self.row_bytes,
                                             f"{type(self).__name__}.gather")
            self.ids_checked_on_device = True  # by the kernel: no host read of the ids

    def _pin(self, host: torch.Tensor, copy: bool, chunk_bytes: int) -> torch.Tensor:
        nbytes = host.numel() * host.element_size()
        if not copy and nbytes:
            try:
                self._registration = HostRegistration(host.data_ptr(), nbytes, chunk_bytes)
            except BackendError:
                self._registration = None
            whole = self._registration is not None and len(self._registration.pieces) == 1
            if self._registration is not None and (whole or host_pointer_usable_on_device()):
                return host
            if self._registration is not None:
                self._registration.close()
                self._registration = None
        try:
            pinned = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
        except RuntimeError as exc:
            raise BackendError(
                f"could not allocate {nbytes / 2**30:.2f} GiB of pinned host memory ({exc}); free host memory or "
                "keep the features on disk with MmapFeatures + CachedFeatures"
            ) from None
        pinned.copy_(host)
        return pinned

    def gather(self, ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """As :meth:`FeatureSource.gather`; on a GPU, ids already there are checked by the kernel (no host read), so
        one out of range raises :class:`~sparsetrain.errors.InputError` at a later call, at :meth:`check`
        or at :meth:`close` (its row of this call's output is zeros); host ids are checked before anything is read."""
        if self._zero_copy is not None:
            self._zero_copy.begin()
        return super().gather(ids, out=out)

    @property
    def last_gather_counts(self):
        """What the last GPU ``gather`` queued (:class:`~sparsetrain._launch_counts.LaunchCounts`); None on the
        CPU."""
        return None if self._zero_copy is None else self._zero_copy.counts

    def check(self) -> None:
        """Wait for the gathers queued so far and raise an out-of-range id one of them met (nothing to do on the CPU,
        whose gathers check their ids first)."""
        if self._zero_copy is not None:
            self._zero_copy.check()

    def close(self) -> None:
        """Wait for the gathers still reading the table, then unregister a buffer registered in place; raises an
        out-of-range id they met."""
        try:
            self.check()
        finally:
            if self._registration is not None:
                self._registration.close()
                self._registration = None

    def _empty(self, shape) -> torch.Tensor:
        if self._zero_copy is not None:
            return self._zero_copy.output(shape, self.dtype)
        if self.device.type == "cpu":
            return pinned_empty(shape, self.dtype)
        return super()._empty(shape)

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        if self.device.type == "cpu":
            gather_rows(*widen(self._bytes, byte_rows(out)), ids=ids.cpu().numpy())
        else:
            self._zero_copy.gather(ids, out)
        self.stats.bytes_moved += ids.numel() * self.row_bytes

    def _direct_rows(self, ids: np.ndarray) -> np.ndarray | None:
        return self._bytes if self.device.type == "cpu" else None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
