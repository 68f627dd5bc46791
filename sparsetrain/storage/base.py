"""The one contract every feature tier honours: ``gather(ids, out=None) -> rows in ids order``."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass

import numpy as np
import torch

from sparsetrain.errors import InputError

ID_DTYPES = (torch.int64, torch.int32)


@dataclass
class GatherStats:
    """Counters of one store. ``bytes_moved`` counts bytes read from the slower tier or copied across a bus.

    ``hits``/``misses`` count distinct rows per gather and are kept by caches only.
    """

    gathers: int = 0
    rows_served: int = 0
    bytes_served: int = 0
    bytes_moved: int = 0
    hits: int = 0
    misses: int = 0
    victim_hits: int = 0
    evictions: int = 0
    prefetched_rows: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits over distinct rows looked up (0.0 before any lookup)."""
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0

    def reset(self) -> None:
        """Zero every counter."""
        for name in asdict(self):
            setattr(self, name, 0)

    def as_dict(self) -> dict:
        return {**asdict(self), "hit_rate": self.hit_rate}


def check_ids(ids, num_rows: int, where: str, *, device_ids_later: bool = False) -> torch.Tensor:
    """Validate row ids before any read: a 1-D int64/int32 tensor (or NumPy array) inside ``[0, num_rows)``.

    Returns the ids as a tensor (NumPy input wrapped without a copy). ``device_ids_later``: the range of ids on a GPU
    is left to the caller (a kernel that checks each id there: no host read of device ids); host ids are checked here
    whatever it says (a NumPy pass, no wait).
    """
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "iu":
            raise InputError(f"{where}: ids must be integers, got a NumPy array of {ids.dtype}; pass "
                             "ids.astype(np.int64)")
        ids = torch.from_numpy(np.ascontiguousarray(ids.astype(np.int64, copy=False)))
    if not isinstance(ids, torch.Tensor):
        raise InputError(f"{where}: ids must be a torch.LongTensor, got {type(ids).__name__}; wrap them with "
                         "torch.as_tensor(ids, dtype=torch.long)")
    if ids.dtype not in ID_DTYPES:
        raise InputError(f"{where}: ids must be int64 (LongTensor) or int32, got {ids.dtype}; convert with "
                         "ids.long()")
    if ids.dim() != 1:
        raise InputError(f"{where}: ids must be 1-D, got shape {tuple(ids.shape)}; flatten them with "
                         "ids.reshape(-1)")
    if ids.numel() and not (device_ids_later and ids.device.type != "cpu"):
        if ids.device.type == "cpu":  # NumPy: no thread-pool wake-up for a tiny reduction
            array = ids.numpy()
            lo, hi = int(array.min()), int(array.max())
        else:
            lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo < 0 or hi >= num_rows:
            raise id_range_error(lo if lo < 0 else hi, num_rows, where)
    return ids


def id_range_error(bad: int, num_rows: int, where: str) -> InputError:
    """The one-line error for a row id outside ``[0, num_rows)``."""
    return InputError(f"{where}: row id {bad} is out of range for a table of {num_rows} rows (valid: "
                      f"0..{num_rows - 1}); ids must be non-negative node ids of this table (no negative indexing)")


def torch_dtype_of(dtype: np.dtype) -> torch.dtype:
    """The torch dtype with the same bits as a NumPy dtype."""
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        raise InputError(f"dtype {dtype} has no torch equivalent; store features as float32, float16 or an "
                         "integer type") from None


def byte_rows(t: torch.Tensor) -> np.ndarray:
    """A 2-D uint8 NumPy view ``[rows, row_bytes]`` of a contiguous CPU tensor (any dtype, bfloat16 included)."""
    rows = t.shape[0]
    flat = t.reshape(rows, math.prod(t.shape[1:]))
    if flat.numel() == 0:
        return np.empty((rows, flat.shape[1] * t.element_size()), dtype=np.uint8)
    return flat.view(torch.uint8).numpy()


def widen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """View ``[rows, row_bytes]`` uint8 arrays as the widest common word (8/4/2/1 bytes) that divides the
    row length and every base address, so kernels copy whole words; all views share one word type."""
    row_bytes = arrays[0].shape[1]
    for word in (np.uint64, np.uint32, np.uint16):
        size = np.dtype(word).itemsize
        if row_bytes and row_bytes % size == 0 and all(a.ctypes.data % size == 0 for a in arrays):
            return tuple(a.view(word) for a in arrays)
    return arrays


def indexed_device(device: torch.device | str) -> torch.device:
    """``device`` with its index: ``"cuda"`` is the current CUDA device, so a store made on ``"cuda"`` accepts an
    ``out`` on ``cuda:0`` (tensors always carry their index; a bare ``"cuda"`` compares unequal to it)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


class FeatureSource(ABC):
    """A table of rows (one per node) that returns any subset of rows, in order, on its target device.

    (Named apart from PyG's ``torch_geometric.data.FeatureStore``, which :mod:`sparsetrain.pyg` implements over these.)

    Subclasses set ``shape`` (``torch.Size``), ``dtype`` (torch), ``device`` and implement ``_gather_into``.
    """

    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    ids_checked_on_device = False  # True: _gather_into checks the range itself (no host read of device ids)

    def __init__(self, shape, dtype: torch.dtype, device: torch.device | str) -> None:
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.device = indexed_device(device)
        self.stats = GatherStats()

    @property
    def num_rows(self) -> int:
        return self.shape[0]

    @property
    def row_shape(self) -> torch.Size:
        return self.shape[1:]

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return math.prod(self.row_shape) * torch.empty((), dtype=self.dtype).element_size()

    @property
    def nbytes(self) -> int:
        return self.num_rows * self.row_bytes

    def __len__(self) -> int:
        return self.num_rows

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def gather(self, ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``ids`` (any order, duplicates allowed) as a ``[len(ids), *row_shape]`` tensor on ``self.device``.

        ``out``, when given, must be a contiguous tensor of that shape, dtype and device; it is filled and returned.
        Ids out of range raise :class:`~sparsetrain.errors.InputError` before anything is read; a store
        that checks ids on the GPU there (``ids_checked_on_device``) reads none of them and raises at a later call or
        its ``check()``.
        """
        ids = check_ids(ids, self.num_rows, f"{type(self).__name__}.gather",
                        device_ids_later=self.ids_checked_on_device)
        out = self._output(ids.numel(), out)
        if ids.numel() and self.row_bytes:
            self._gather_into(ids, out)
        self.stats.gathers += 1
        self.stats.rows_served += ids.numel()
        self.stats.bytes_served += ids.numel() * self.row_bytes
        return out

    def __getitem__(self, ids) -> torch.Tensor:
        """``store[ids]`` is ``store.gather(ids)``."""
        return self.gather(ids)

    def _output(self, n: int, out: torch.Tensor | None) -> torch.Tensor:
        shape = (n, *self.row_shape)
        if out is None:
            return self._empty(shape)
        where = f"{type(self).__name__}.gather(out=)"
        if not isinstance(out, torch.Tensor):
            raise InputError(f"{where}: out must be a torch.Tensor, got {type(out).__name__}")
        if tuple(out.shape) != shape or out.dtype != self.dtype or out.device != self.device or not out.is_contiguous():
            raise InputError(
                f"{where}: expected a contiguous {self.dtype} tensor of shape {list(shape)} on {self.device}, got "
                f"{out.dtype} {list(out.shape)} on {out.device}{'' if out.is_contiguous() else ' (not contiguous)'}; "
                "allocate it with torch.empty(shape, dtype=store.dtype, device=store.device)"
            )
        return out

    def _empty(self, shape) -> torch.Tensor:
        return torch.empty(shape, dtype=self.dtype, device=self.device)

    def _direct_rows(self, ids: np.ndarray) -> np.ndarray | None:
        """``[num_rows, row_bytes]`` uint8 view of rows a CPU kernel may read in place (about to read ``ids``).

        None when rows are not directly addressable (a cache in front then calls ``gather``).
        """
        return None

    @abstractmethod
    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """Fill ``out`` with rows ``ids`` (already validated, non-empty)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={list(self.shape)}, dtype={self.dtype}, device={self.device})"

