"""`TensorFeatures`: rows already in CPU or GPU memory."""

from __future__ import annotations

import numpy as np
import torch

from sparsetrain.errors import SettingError
from sparsetrain.storage.base import FeatureSource, byte_rows, widen
from sparsetrain.storage.gather_kernels import gather_rows


class TensorFeatures(FeatureSource):
    """A feature table held in a tensor; ``gather`` returns rows on the tensor's device.

    CPU gathers run a parallel Numba copy with software prefetch; GPU gathers use ``index_select``.
    A NumPy array is wrapped without a copy.
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

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        if self._bytes is None:
            torch.index_select(self.tensor, 0, ids.to(self.device, non_blocking=True), out=out)
        else:
            gather_rows(*widen(self._bytes, byte_rows(out)), ids=ids.cpu().numpy())
        self.stats.bytes_moved += ids.numel() * self.row_bytes

    def _direct_rows(self, ids: np.ndarray) -> np.ndarray | None:
        return self._bytes
