"""The on-disk dataset format: a folder of .npy arrays described by ``meta.json``.

Layout (format version 1)::

    meta.json           format, sizes, dtypes, provenance, sha256 of every array file
    indptr.npy          int64 [num_nodes + 1]   CSC column pointers
    indices.npy         int32 [num_edges]       in-neighbors, sorted within a column
                        (int64 when num_nodes >= 2**31)
    edge_weight.npy     float32 [num_edges]     optional
    edge_features.npy   float32|float16 [num_edges, edge_feature_dim]   optional, in CSC edge order
                                                (row k = the edge at position k of indices)
    features.npy        float32|float16 [num_nodes, feature_dim]   optional
    labels.npy          int64 [num_nodes]       optional; -1 = no label (never in a split)
    train_idx.npy, val_idx.npy, test_idx.npy    int64, sorted   optional
    original_ids.npy    int64 [num_nodes]       optional: original id of each node when
                                                the nodes were reordered
    link_<split>_pos.npy, link_<split>_neg.npy   int64 [2, E]   optional link-prediction
                        edges (split train/val/test; meta.json 'link_split' lists them, with
                        'neg_per_pos' when the negatives are grouped by positive); the graph
                        then holds no val/test edge (datasets/edge_split.py)

Folders written before 'link_split' existed load unchanged: every field above it is optional.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from sparsetrain._sigbus import watch
from sparsetrain.errors import DatasetError

FORMAT_NAME = "sparsetrain-graph"
FORMAT_VERSION = 2
"""The newest format version this sparsetrain reads: 1 homogeneous, 2 typed (:mod:`sparsetrain.datasets.hetero_format`)."""
HOMOGENEOUS_VERSION = 1
META_FILE = "meta.json"

INDPTR = "indptr.npy"
INDICES = "indices.npy"
EDGE_WEIGHT = "edge_weight.npy"
FEATURES = "features.npy"
EDGE_FEATURES = "edge_features.npy"
LABELS = "labels.npy"
ORIGINAL_IDS = "original_ids.npy"
SPLIT_NAMES = ("train", "val", "test")
FEATURE_DTYPES = ("float32", "float16")


def split_file(name: str) -> str:
    return f"{name}_idx.npy"


def index_dtype(num_nodes: int) -> np.dtype:
    """int32 node ids while they fit, int64 beyond."""
    return np.dtype(np.int32) if num_nodes < 2**31 else np.dtype(np.int64)


def sha256_file(path: Path, chunk_bytes: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def fsync_path(path: Path) -> None:
    """Flush a file or directory entry to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_meta(folder: Path) -> dict:
    path = folder / META_FILE
    if not folder.is_dir():
        raise DatasetError(f"{folder}: no such dataset folder; create one with `sparsetrain preprocess` or `sparsetrain synth`")
    if not path.is_file():
        raise DatasetError(f"{path}: missing; {folder} is not a sparsetrain dataset (make one with `sparsetrain preprocess`)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc}); the dataset is damaged, re-run `sparsetrain preprocess`") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise DatasetError(f"{path}: field 'format' is not {FORMAT_NAME!r}; this is not a sparsetrain dataset")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise DatasetError(
            f"{path}: field 'format_version' is {version!r} but this sparsetrain reads up to {FORMAT_VERSION}; upgrade sparsetrain"
        )
    if version >= 2:
        check_files_field(meta, path)  # the typed fields are checked by hetero_format.check_hetero_meta when it is opened
    else:
        check_meta(meta, path)
    return meta


_DAMAGED = "the dataset is damaged, re-run `sparsetrain preprocess`"


def _count(value, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _bare_name(name) -> bool:
    """A plain ``.npy`` file name inside the folder: no directory part, not hidden, no traversal."""
    return (
        isinstance(name, str) and name.endswith(".npy") and not name.startswith(".")
        and "/" not in name and "\\" not in name and "\0" not in name and os.path.basename(name) == name
    )


def check_files_field(meta: dict, path: Path) -> None:
    """``meta['files']`` maps plain .npy names inside the folder to ``{dtype, shape, sha256}``."""
    if "files" not in meta:
        raise DatasetError(f"{path}: field 'files' is missing; {_DAMAGED}")
    files = meta["files"]
    if not isinstance(files, dict):
        raise DatasetError(f"{path}: field 'files' is a {type(files).__name__}, not an object of file entries; {_DAMAGED}")
    for name, entry in files.items():
        if not _bare_name(name):
            raise DatasetError(f"{path}: 'files' entry {name!r} is not a plain .npy file name inside the dataset folder; {_DAMAGED}")
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: 'files' entry {name} is not an object with dtype, shape and sha256; {_DAMAGED}")
        for field, ok in (
            ("dtype", isinstance(entry.get("dtype"), str)),
            ("shape", isinstance(entry.get("shape"), list) and all(_count(n) for n in entry["shape"])),
            ("sha256", isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64),
        ):
            if not ok:
                state = "is missing" if field not in entry else f"is {entry[field]!r}"
                raise DatasetError(f"{path}: 'files' entry {name}: field {field!r} {state}; {_DAMAGED}")


def check_meta(meta: dict, path: Path) -> None:
    """Every field ``load``/``info`` read is present, typed, and names only files inside the folder."""
    for field in ("num_nodes", "num_edges", "files"):
        if field not in meta:
            raise DatasetError(f"{path}: field {field!r} is missing; {_DAMAGED}")
    for field in ("num_nodes", "num_edges"):
        if not _count(meta[field]):
            raise DatasetError(f"{path}: field {field!r} is {meta[field]!r}, not a non-negative integer; {_DAMAGED}")
    if meta.get("num_classes") is not None and not _count(meta["num_classes"], 1):
        raise DatasetError(f"{path}: field 'num_classes' is {meta['num_classes']!r}, not a positive integer or null; {_DAMAGED}")
    check_files_field(meta, path)
    files = meta["files"]
    if LABELS in files and meta.get("num_classes") is None:
        raise DatasetError(f"{path}: field 'num_classes' is missing but {LABELS} is listed; {_DAMAGED}")
    for required in (INDPTR, INDICES):
        if required not in files:
            raise DatasetError(f"{path}: 'files' has no entry for {required}; {_DAMAGED}")
    _check_link_meta(meta, path)
    for field in ("permutation", "clusters"):
        part = meta.get(field)
        if part is None:
            continue
        wanted = ("method", "file") if field == "permutation" else ("file", "count")
        if not isinstance(part, dict) or any(k not in part for k in wanted):
            raise DatasetError(f"{path}: field {field!r} needs {' and '.join(repr(k) for k in wanted)}; {_DAMAGED}")
        if field == "clusters" and not _count(part["count"], 1):
            raise DatasetError(f"{path}: field 'clusters': 'count' is {part['count']!r}, not a positive integer; {_DAMAGED}")
        if part["file"] not in files:
            raise DatasetError(f"{path}: field {field!r} names file {part['file']!r}, which 'files' does not list; {_DAMAGED}")


LINK_SPLIT_NAMES = ("train", "val", "test")


def edge_file(split: str, kind: str) -> str:
    """``link_<split>_<pos|neg>.npy``: a split's positive or negative edges."""
    return f"link_{split}_{kind}.npy"


def _check_link_meta(meta: dict, path: Path) -> None:
    links = meta.get("link_split")
    if links is None:
        return
    if not isinstance(links, dict) or any(name not in LINK_SPLIT_NAMES for name in links):
        raise DatasetError(f"{path}: field 'link_split' must map some of {', '.join(LINK_SPLIT_NAMES)} to their edge files; {_DAMAGED}")
    for name, entry in links.items():
        if not isinstance(entry, dict) or entry.get("pos") not in meta["files"]:
            raise DatasetError(f"{path}: field 'link_split': {name!r} has no 'pos' file listed in 'files'; {_DAMAGED}")
        if entry.get("neg") is not None and entry["neg"] not in meta["files"]:
            raise DatasetError(f"{path}: field 'link_split': {name!r} names 'neg' file {entry['neg']!r}, which 'files' does not list; {_DAMAGED}")
        k = entry.get("neg_per_pos")
        if k is not None and not _count(k):
            raise DatasetError(f"{path}: field 'link_split': {name!r} has 'neg_per_pos' {k!r}, not a count or null; {_DAMAGED}")


def open_array(folder: Path, name: str, meta: dict, *, mmap: bool = True, readonly: bool = False) -> np.ndarray:
    """Memory-map one array file (``mmap=False``: read it into memory) and check its dtype and shape against ``meta.json``.

    A mapped array is registered with ``sparsetrain._sigbus``, so a read of it after the file was truncated ends the
    process with one line naming the file. Mapped copy-on-write: reads share the page cache, and a stray in-place write
    in user code can never reach the file. ``readonly`` maps it read-only instead: a
    copy-on-write mapping is charged against the commit limit (RAM + swap), so one larger
    than that (papers100M's 28 GiB of features on a 24 GiB machine) fails with ENOMEM.
    """
    path = folder / name
    entry = meta["files"].get(name)
    if entry is None:
        raise DatasetError(f"{folder / META_FILE}: 'files' has no entry for {name}; the dataset is damaged")
    if not path.is_file():
        raise DatasetError(f"{path}: missing; the dataset is incomplete, re-run `sparsetrain preprocess`")
    try:
        array = np.load(path, mmap_mode=("r" if readonly else "c") if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DatasetError(f"{path}: cannot be read as .npy ({exc}); the file is truncated or damaged, re-run `sparsetrain preprocess`") from None
    if str(array.dtype) != entry["dtype"] or list(array.shape) != entry["shape"]:
        raise DatasetError(
            f"{path}: holds {array.dtype}{list(array.shape)} but meta.json records {entry['dtype']}{entry['shape']}; "
            "the file was replaced or damaged, re-run `sparsetrain preprocess`"
        )
    if mmap:
        watch(array, path)  # a read after the file is truncated: one line naming it, not a SIGBUS death
    return array
