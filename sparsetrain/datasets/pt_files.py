"""``.pt`` files of OGB folders (split dicts), read without running pickled code: one reader, one allow-list.

OGB's ``DatasetSaver`` writes splits as dicts of NumPy arrays, older downloads as dicts of tensors;
``torch.load(weights_only=True)`` reads tensors, containers and numbers, and the allow-list adds
exactly what a NumPy array needs (its reconstructor, ``ndarray``, dtypes). Nothing else can load.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from sparsetrain.errors import DatasetError

_REFETCH = "download it again with the ogb package"


def _numpy_globals() -> list:
    core = getattr(np, "_core", None) or np.core
    reconstruct, scalar = core.multiarray._reconstruct, core.multiarray.scalar
    # files written under NumPy 1 name the reconstructor by its old module path
    return [reconstruct, (reconstruct, "numpy.core.multiarray._reconstruct"),
            scalar, (scalar, "numpy.core.multiarray.scalar"),
            np.ndarray, np.dtype, *(getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType"))]


def read_pt(path: Path) -> object:
    """The object in ``path``: tensors, NumPy arrays, dicts, lists, numbers, strings; a one-line error for the rest."""
    try:
        # torch's own warnings (e.g. an unusual pickle protocol) say nothing the one-line error would not
        with torch.serialization.safe_globals(_numpy_globals()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for a damaged or unsafe file
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatasetError(f"{path}: cannot be read with torch.load(weights_only=True) ({text}); {_REFETCH}") from None


def read_pt_dict(path: Path) -> dict:
    """:func:`read_pt` of a file that must hold a dict (OGB's split files)."""
    obj = read_pt(path)
    if not isinstance(obj, dict):
        raise DatasetError(f"{path}: holds a {type(obj).__name__}, not a dict of arrays; this is not an OGB split file "
                           f"({_REFETCH})")
    return obj


def integer_ids(value: object, where: str, dims: int) -> np.ndarray:
    """``value`` (a tensor, NumPy array or list) as an int64 array of ``dims`` dimensions; node ids stored as floats,
    booleans or strings are refused rather than cast."""
    array = None
    if isinstance(value, torch.Tensor):
        array = value.numpy()
    elif isinstance(value, (np.ndarray, list)):
        array = np.asarray(value)
    if array is None or array.dtype.kind not in "iu" or array.ndim != dims:
        kind = f"{array.dtype}{list(array.shape)}" if array is not None else type(value).__name__
        raise DatasetError(f"{where}: holds {kind}; expected node ids as a {dims}-D integer array ({_REFETCH})")
    return array.astype(np.int64, copy=False)
