"""Loading ``torch.distributed.checkpoint`` (DCP) folders without running pickled code from them.

torch's ``FileSystemReader`` unpickles the checkpoint's ``.metadata`` with ``pickle.load``, and DCP's
default planner reads non-tensor values (``"step": 3``) with ``torch.load(weights_only=False)``: a
checkpoint from someone else can run any code on load. :class:`SafeFileSystemReader` reads
``.metadata`` with an allow-list (DCP's metadata dataclasses, ``torch.Size``, dtypes and layouts,
paths, builtin containers) and non-tensor values with ``weights_only=True``, and refuses anything
else before it is built, in one line naming the file. :func:`load_dcp` is ``dcp.load`` with that reader
and one-line errors (:class:`~sparsetrain.errors.CheckpointError`) instead of DCP's
``CheckpointException``, which derives from ``BaseException`` and slips past ``except Exception``::

    load_dcp({"train": DCPState(model, opt)}, checkpoint_id=path)
    dcp.load(state, storage_reader=SafeFileSystemReader(path))     # the same reader, torch's errors
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import _StorageInfo

from sparsetrain.errors import CheckpointError, SparsetrainError

_METADATA_CLASSES = ("Metadata", "StorageMeta", "TensorProperties", "TensorStorageMetadata", "BytesStorageMetadata",
                     "ChunkStorageMetadata", "MetadataIndex", "_MEM_FORMAT_ENCODING")  # fmt: skip
_PATHS = ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
_ALLOWED = {
    *(("torch.distributed.checkpoint.metadata", n) for n in _METADATA_CLASSES),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.distributed._shard.sharded_tensor.metadata", "TensorProperties"),  # where torch 2.2 keeps it
    ("torch.distributed._shard.sharded_tensor.metadata", "MEM_FORMAT_ENCODING"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # how torch pickles a torch.layout
    ("collections", "OrderedDict"),
    *(("pathlib", n) for n in _PATHS),  # StorageMeta.checkpoint_id
    *(("pathlib._local", n) for n in _PATHS),  # Python >= 3.13
}
_TORCH_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format)  # pickled by name, as attributes of torch


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that builds only the classes DCP's ``.metadata`` holds."""

    def __init__(self, file, path: Path) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        constant = vars(torch).get(name) if module == "torch" else None  # vars: no lazy submodule import
        if isinstance(constant, _TORCH_CONSTANTS):
            return constant
        raise CheckpointError(
            f"{self.path}: refused to unpickle {module}.{name}: a DCP .metadata holds only"
            " torch.distributed.checkpoint's metadata classes, and building anything else could run code; load only"
            " checkpoints you trust, or save it again"
        )


def _checked(metadata: Any, path: Path) -> Any:
    """``metadata`` if it is DCP's ``Metadata`` whose data files are plain names inside the checkpoint folder."""
    problem = None
    if not isinstance(metadata, dcp_metadata.Metadata):
        problem = f"it holds a {type(metadata).__name__}, not torch.distributed.checkpoint's Metadata"
    elif not isinstance(metadata.state_dict_metadata, dict) or not isinstance(metadata.storage_data, dict):
        problem = "its state_dict_metadata or storage_data is not a dict"
    else:
        for info in metadata.storage_data.values():
            name = getattr(info, "relative_path", None)
            if not isinstance(info, _StorageInfo) or not isinstance(name, str):
                problem = f"a storage entry is a {type(info).__name__}, not a _StorageInfo"
            elif name in ("", ".", "..") or "/" in name or "\\" in name:
                problem = f"a data file {name!r} is not a plain file name inside the checkpoint folder"
            if problem:
                break
    if problem:
        raise CheckpointError(f"{path}: not a DCP metadata file: {problem}; save the checkpoint again")
    return metadata


def read_dcp_metadata(path: str | os.PathLike) -> Any:
    """DCP's ``Metadata`` from the file ``path`` (a checkpoint's ``.metadata``), built only from allowed classes.

    Raises :class:`~sparsetrain.errors.CheckpointError` naming the file when it holds anything else, is damaged
    or truncated; ``FileNotFoundError`` when it does not exist."""
    path = Path(path)
    with open(path, "rb") as f:
        try:
            metadata = _MetadataUnpickler(f, path).load()
        except CheckpointError:
            raise
        except Exception as exc:  # truncated or garbage: EOFError, UnpicklingError, a class's TypeError, ...
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise CheckpointError(
                f"{path}: not a readable DCP metadata file ({type(exc).__name__}: {first}); the checkpoint is damaged"
                " or incomplete: save it again"
            ) from None
    return _checked(metadata, path)


class _SafeBytes:
    """A load planner seen through a reader: non-tensor values pass ``torch.load(weights_only=True)`` first."""

    def __init__(self, planner, where: Path) -> None:
        self._planner, self._where = planner, where

    def __getattr__(self, name: str) -> Any:
        return getattr(self._planner, name)

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        try:
            torch.load(value, map_location="cpu", weights_only=True)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fqn = read_item.dest_index.fqn
            raise CheckpointError(
                f"{self._where}: refused the value of {fqn!r}: it does not load with torch.load(weights_only=True) "
                f"({first}); load only checkpoints you trust, or save it again with plain Python values"
            ) from None
        value.seek(0)
        self._planner.load_bytes(read_item, value)


class SafeFileSystemReader(FileSystemReader):
    """torch's ``FileSystemReader`` that builds no object a checkpoint names, only DCP's own.

    ``.metadata`` is unpickled through an allow-list (see :func:`read_dcp_metadata`) and non-tensor values
    through ``torch.load(weights_only=True)`` (tensors already are). Pass it as ``dcp.load(...,
    storage_reader=SafeFileSystemReader(path))``, or call :func:`load_dcp`.
    """

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        rank = kwargs.get("rank")
        name = ".metadata" if rank is None else f"__{rank}.metadata"
        metadata = read_dcp_metadata(Path(self.path) / name)
        if hasattr(dcp_metadata, "StorageMeta"):  # torch >= 2.4: what FileSystemReader.read_metadata adds
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = dcp_metadata.StorageMeta()
            metadata.storage_meta.load_id = getattr(self, "load_id", None)
        return metadata

    def read_data(self, plan, planner):
        return super().read_data(plan, _SafeBytes(planner, Path(self.path)))


def _one_line(exc: CheckpointException, checkpoint: Path) -> CheckpointError:
    """DCP's multi-line ``CheckpointException`` as one line: the lowest failing rank's error."""
    if not exc.failures:
        return CheckpointError(f"{checkpoint}: DCP could not load it ({str(exc).strip().splitlines()[0]})")
    rank, (error, _) = min(exc.failures.items(), key=lambda kv: kv[0])
    if isinstance(error, SparsetrainError):
        return CheckpointError(str(error))
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return CheckpointError(
        f"{checkpoint}: DCP could not load it (rank {rank}: {type(error).__name__}: {first}); load it into a model "
        "and optimizer built like the ones that saved it"
    )


def load_dcp(state_dict: dict[str, Any], *, checkpoint_id: str | os.PathLike, process_group=None) -> None:
    """``torch.distributed.checkpoint.load(state_dict, checkpoint_id=...)`` through :class:`SafeFileSystemReader`.

    Fills ``state_dict`` in place (``Stateful`` values such as :class:`~sparsetrain.moe.DCPState` load
    themselves), on every rank of ``process_group``, or in this process alone when torch.distributed is not
    initialized. Raises :class:`~sparsetrain.errors.CheckpointError` (one line, naming the checkpoint or
    file) for a folder without DCP metadata, a refused or damaged file, and any failure DCP reports.
    """
    checkpoint = Path(checkpoint_id)
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank(process_group) if distributed else 0
    reader = SafeFileSystemReader(checkpoint)
    try:
        reader.read_metadata()  # refuse before DCP starts (its fallback would log the refusal as a traceback)
    except FileNotFoundError:
        if not (checkpoint / f"__{rank}.metadata").is_file():  # DCP's per-rank metadata, saved without collectives
            raise CheckpointError(
                f"{checkpoint}: not a DCP checkpoint (no .metadata); pass the folder that "
                "torch.distributed.checkpoint.save wrote"
            ) from None
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
            dcp.load(state_dict, storage_reader=reader, process_group=process_group, no_dist=not distributed)
    except CheckpointException as exc:
        raise _one_line(exc, checkpoint) from None
