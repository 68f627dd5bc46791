"""`TensorFeatures`: rows already in CPU or GPU memory."""

from __future__ import annotations

import numpy as np
import torch

from sparsetrain.errors import SettingError
from sparsetrain.storage.base import FeatureSource, byte_rows, id_range_error, widen
from sparsetrain.storage.gather_kernels import gather_rows


class TensorFeatures(FeatureSource):
    """A feature table held in a tensor; ``gather`` returns rows on the tensor's device.

    CPU gathers run a parallel Numba copy with software prefetch; GPU gathers use ``index_select``.
    A NumPy array is wrapped without a copy. On a GPU, ids already there are range-checked on the device (no host
    read a gather): a row of an id out of range is read from the nearest row in range, and the id is raised by
    :meth:`check` (the loader's fetch stage calls it at each epoch's end).
    """

    def __init__(self, tensor: torch.Tensor | np.ndarray) -> None:
        if isinstance(tensor, np.ndarray):
            tensor = torch.from_numpy(tensor)
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1:
            raise SettingError("TensorFeatures needs a tensor with at least one dimension (rows), got "
                               f"{type(tensor).__name__}")
        self.tensor = tensor.contiguous()
        super().__init__(self.tensor.shape, self.tensor.dtype, self.tensor.device)
        self._bytes = byte_rows(self.tensor) if self.device.type == "cpu" else None
        self.ids_checked_on_device = self._bytes is None
        self._bad = None  # on a GPU: the first id out of range met (-1: none), on the device

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        if self._bytes is None:
            ids = ids.to(self.device, non_blocking=True)
            n = self.num_rows
            bad = (ids < 0) | (ids >= n)
            if self._bad is None:
                self._bad = torch.full((), -1, dtype=torch.int64, device=self.device)
            first = ids.gather(0, bad.to(torch.int32).argmax().reshape(1)).reshape(())  # (no index read back)
            self._bad = torch.where((self._bad < 0) & bad.any(), first, self._bad)
            torch.index_select(self.tensor, 0, ids.clamp(0, n - 1), out=out)
        else:
            gather_rows(*widen(self._bytes, byte_rows(out)), ids=ids.cpu().numpy())
        self.stats.bytes_moved += ids.numel() * self.row_bytes

    def check(self) -> None:
        """Raise :class:`~sparsetrain.errors.InputError` for an id out of range that a GPU gather met (one
        host read; nothing to do on the CPU, whose gathers check their ids first)."""
        if self._bad is not None:
            bad = int(self._bad)
            self._bad.fill_(-1)
            if bad >= 0:
                raise id_range_error(bad, self.num_rows, f"{type(self).__name__}.gather")

    def _direct_rows(self, ids: np.ndarray) -> np.ndarray | None:
        return self._bytes
