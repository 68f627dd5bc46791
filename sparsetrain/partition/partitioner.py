"""`partition_dataset`: split a dataset into N parts in bounded memory, each a dataset folder.

Every dataset, one node type or several, is partitioned the one way, by type
(:func:`~sparsetrain.partition.per_type.partition_typed`: a one-type graph is the typed graph with node type ``_N``
and edge type ``(_N, _E, _N)``): passes over the CSC a chunk of columns at a time assign every node an owner (LDG, a
streaming balance-aware greedy, or a random hash), mark each part's halo, then write every part's columns with
part-local source ids and its owned feature rows. Memory is a few bytes per node (owner, local id, halo bits), never
per edge. Everything goes into a hidden temp folder beside ``out`` that is renamed into place when complete; the
part layout is described in :mod:`~sparsetrain.partition.per_type`.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.applicable import PARTITION_RULES, PartitionContext, refuse_inapplicable
from sparsetrain.datasets.checks import check_files
from sparsetrain.datasets.dataset import load, verify_structure
from sparsetrain.datasets.outputs import PARTITIONED, check_output_path
from sparsetrain.datasets.writer import leftovers, move_into_place
from sparsetrain.errors import DatasetError, OutputExistsError
from sparsetrain.partition.manifest import MANIFEST
from sparsetrain.partition.per_type import partition_typed

METHODS = ("ldg", "hash")


@dataclass(frozen=True)
class PartitionOptions:
    """``parts``: how many; ``method``: ``"ldg"`` (streaming greedy, balance-aware) or ``"hash"`` (random);
    ``imbalance``: LDG's slack, no part gets more than ``(1 + imbalance) * N / parts`` nodes (default 0.05);
    ``passes``: at most this many LDG passes over the graph (each after the first re-places every node given where the
    last left its neighbours; a pass costs one read of the CSC), fewer once a pass moves under ``per_type.SETTLED`` of
    the nodes (default 10); ``seed``: the hash's (default 0). An option the method ignores is refused
    (:data:`~sparsetrain.datasets.applicable.PARTITION_RULES`); after construction the method's own are filled in and
    the others are None."""

    parts: int
    method: str = "ldg"
    imbalance: float | None = None
    passes: int | None = None
    seed: int | None = None
    overwrite: bool = False
    quiet: bool = False
    chunk_edges: int = 1 << 24

    def __post_init__(self) -> None:
        _integer(self, "parts", 1, 32767, "--parts {}: give a number of parts from 1 to 32767")
        if self.method not in METHODS:
            raise DatasetError(f"--method {self.method!r}: choose one of {', '.join(METHODS)}")
        if self.passes is not None:
            _integer(self, "passes", 1, 100, "--passes {}: give from 1 to 100 passes")
        if self.seed is not None:
            _integer(self, "seed", -(2**63), 2**63 - 1, "--seed {}: give an integer from -2**63 to 2**63-1")
        _integer(self, "chunk_edges", 1, 2**62, "chunk_edges={}: give a positive number of edges")
        slack = self.imbalance
        if slack is not None:
            if not isinstance(slack, (int, float, np.integer, np.floating)) or isinstance(slack, (bool, np.bool_)) \
                    or not 0 <= slack <= 10:
                raise DatasetError(f"--imbalance {slack!r}: give a slack from 0 (exact balance) to 10")
            object.__setattr__(self, "imbalance", float(slack))
        refuse_inapplicable(PARTITION_RULES, self.context(), DatasetError)
        ldg = self.method == "ldg"
        for name, default in (("imbalance", 0.05), ("passes", 10)):
            object.__setattr__(self, name, (default if getattr(self, name) is None else getattr(self, name)) if ldg
                               else None)
        object.__setattr__(self, "seed", None if ldg else 0 if self.seed is None else self.seed)
        for name in ("overwrite", "quiet"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise DatasetError(f"{name}={getattr(self, name)!r}: give True or False")
            object.__setattr__(self, name, bool(getattr(self, name)))

    def context(self, data: str = "", temporal: bool = False) -> PartitionContext:
        """These options (as given) and a dataset's kind, as the applicability table reads them."""
        return PartitionContext(self.method, self.seed, self.passes, self.imbalance, data, temporal)


def as_int(value) -> int | None:
    """``value`` as an int when it is one (a NumPy integer counts, a bool or a float does not), else None."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def _integer(opts: PartitionOptions, name: str, low: int, high: int, message: str) -> None:
    """Field ``name`` of ``opts`` an int in [low, high], stored as a Python int; else the one-line ``message``."""
    value = as_int(getattr(opts, name))
    if value is None or not low <= value <= high:
        raise DatasetError(message.format(repr(getattr(opts, name))))
    object.__setattr__(opts, name, value)


def dataset_checksum(folder: Path) -> str:
    """sha256 of the dataset's meta.json, which holds the sha256 of every array: one value for the whole dataset."""
    return hashlib.sha256((folder / fmt.META_FILE).read_bytes()).hexdigest()


def partition_dataset(data: str | os.PathLike, out: str | os.PathLike, opts: PartitionOptions) -> dict:
    """Partition the dataset at ``data`` into ``opts.parts`` parts written to ``out``; returns the manifest."""
    data, out = Path(data), Path(out).absolute()
    ds = load(data)
    refuse_inapplicable(PARTITION_RULES, opts.context(str(data), ds.has_times), DatasetError)
    check_output_path("--out", out, inputs=(data,), creates=PARTITIONED)
    if out.parent.is_dir():
        _recover(out)
    if (out.exists() or out.is_symlink()) and not (opts.overwrite and (out / MANIFEST).is_file()):
        if (out / MANIFEST).is_file():
            raise OutputExistsError(f"{out}: already exists; pass --overwrite to replace it, or choose another --out")
        raise OutputExistsError(f"{out}: already exists and is not a partitioned folder (not replaced even with "
                                "--overwrite); choose another --out")
    # the source as `train` checks it (sizes, small files' sha256) and its structure (ids and labels in range): an
    # array edited after import must not be copied into the parts, nor an id out of range reach the kernels
    check_files(data, ds.meta, fix=f"{data} changed after import; re-run `sparsetrain preprocess` before "
                                   "partitioning (`sparsetrain info` checks every file)")
    verify_structure(ds)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        manifest = partition_typed(ds, data, out, tmp, opts, dataset_checksum(data))
        fmt.fsync_path(tmp)
        move_into_place(tmp, out, opts.overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _recover(out: Path) -> None:
    """Undo what a killed run for ``out`` left beside it: its temp folder goes; a replaced folder it had moved aside
    comes back when nothing took its place."""
    for kind in ("old", "tmp"):
        for path in leftovers(out, kind):
            if kind == "old" and not out.exists() and (path / MANIFEST).is_file():
                os.rename(path, out)
            elif path.is_symlink():  # an --out that was a link, moved aside: the link goes, not what it points to
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)
