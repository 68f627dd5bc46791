"""`partition_dataset`: split a homogeneous dataset into N parts in bounded memory, each a dataset folder.

Passes over the CSC, each a chunk of columns at a time (:mod:`~sparsetrain.partition.stream`): (1) assign every
node an owner (LDG, a streaming balance-aware greedy, or a random hash), (2) mark each part's halo (the in-neighbours
of its nodes that other parts own, one bit per (part, node)), (3) write every part's columns with part-local source
ids, then one pass over the feature rows. Memory is a few bytes per node (owner, local id, halo bits), never per
edge. Everything goes into a hidden temp folder beside ``out`` that is renamed into place when complete.

A part (``part-<p>/``) is a dataset of the ordinary format over its *local* nodes: the nodes it owns, local ids
``[0, num_owned)`` in global id order, then its halo, ``[num_owned, num_local)`` in global id order.
``indptr``/``indices``: the owned nodes' in-edges, in the global CSC's order within each column (so a node's
``p``-th in-edge is the same edge in the part and in the whole graph: a neighbour draw made by position is the same
on its owner), sources as local ids; halo columns are empty. ``labels.npy``: owned labels, -1 for the halo;
``<split>_idx.npy``: the owned split nodes as local ids. The extra arrays: ``local_to_global.npy`` (int64
[num_local]), ``halo_owner.npy`` (int32 [num_halo]: the part that owns each halo node), ``col_start.npy`` (int64
[num_owned]: the global CSC position of each owned column's first in-edge, so an edge's global id is its owner's
``col_start`` + its position in the column) and ``owned_features.npy`` ([num_owned, D]: the owned nodes' rows;
not the format's ``features`` field, which needs a row per local node). ``meta.json`` field ``partition``: the
partitioning's id, the part's number and counts.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsetrain._progress import progress
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.applicable import PARTITION_RULES, PartitionContext, refuse_inapplicable
from sparsetrain.datasets.checks import check_files
from sparsetrain.datasets.dataset import load, verify_structure
from sparsetrain.datasets.outputs import PARTITIONED, check_output_path
from sparsetrain.datasets.writer import DatasetWriter, leftovers, move_into_place
from sparsetrain.errors import DatasetError, OutputExistsError
from sparsetrain.partition import kernels
from sparsetrain.partition.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    OWNER_FILE,
    PART_META,
    part_folder,
    write_manifest,
)
from sparsetrain.partition.per_type import partition_typed
from sparsetrain.partition.stream import CSCChunks, NpyFile

METHODS = ("ldg", "hash")
L2G = "local_to_global.npy"
HALO_OWNER = "halo_owner.npy"
COL_START = "col_start.npy"
OWNED_FEATURES = "owned_features.npy"
FEATURE_CHUNK_BYTES = 1 << 26
SETTLED = 1e-3  # restreaming LDG stops once a pass moves fewer nodes than this share (the cut then stays put)


@dataclass(frozen=True)
class PartitionOptions:
    """``parts``: how many; ``method``: ``"ldg"`` (streaming greedy, balance-aware) or ``"hash"`` (random);
    ``imbalance``: LDG's slack, no part gets more than ``(1 + imbalance) * N / parts`` nodes (default 0.05);
    ``passes``: at most this many LDG passes over the graph (each after the first re-places every node given where the
    last left its neighbours; a pass costs one read of the CSC), fewer once a pass moves under ``SETTLED`` of the
    nodes (default 10); ``seed``: the hash's (default 0). An option the method ignores is refused
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


def assign_owners(chunks: CSCChunks, opts: PartitionOptions) -> tuple[np.ndarray, int]:
    """Each node's part (int16), and how many passes over the graph that took."""
    n = chunks.num_nodes
    owner = np.full(n, -1, np.int16)
    if opts.method == "hash":
        kernels.hash_owners(opts.seed, opts.parts, owner)
        return owner, 0
    capacity = max(1.0, np.ceil(n * (1.0 + opts.imbalance) / opts.parts))
    sizes = np.zeros(opts.parts, np.int64)
    counts = np.zeros(opts.parts, np.int64)
    for k in range(opts.passes):
        with progress(chunks.num_edges, f"assign (ldg pass {k + 1}/{opts.passes})", "edge", opts.quiet) as bar:
            moved = 0
            for c0, ptr, idx, _ in chunks:
                moved += kernels.ldg_chunk(c0, ptr, idx, owner, sizes, capacity, counts)
                bar.update(int(ptr[-1] - ptr[0]))
        if k and moved < SETTLED * n:
            break
    return owner, k + 1


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
        if ds.is_typed:
            manifest = partition_typed(ds, data, out, tmp, opts, dataset_checksum(data))
        else:
            manifest = _partition_homogeneous(ds, data, tmp, opts)
        fmt.fsync_path(tmp)
        move_into_place(tmp, out, opts.overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _partition_homogeneous(ds, data: Path, tmp: Path, opts: PartitionOptions) -> dict:
    """A homogeneous dataset's parts, owner map and manifest written into ``tmp``; returns the manifest."""
    weighted = fmt.EDGE_WEIGHT in ds.meta["files"]
    chunks = CSCChunks(ds, opts.chunk_edges, weights=weighted)
    n, P = chunks.num_nodes, opts.parts
    owner, passes = assign_owners(chunks, opts)
    np.save(tmp / OWNER_FILE, owner)
    fmt.fsync_path(tmp / OWNER_FILE)
    owner_sha = fmt.sha256_file(tmp / OWNER_FILE)
    checksum = dataset_checksum(data)
    partition_id = hashlib.sha256(f"{checksum}:{owner_sha}".encode()).hexdigest()[:16]
    local = np.empty(n, np.int32 if n < 2**31 else np.int64)
    num_owned = kernels.owned_local_ids(owner, P, local)
    halo_bits, part_edges, cut = _mark_halos(chunks, owner, P, opts.quiet)
    halo_ranks = np.empty((P, halo_bits.shape[1]), np.int64)
    num_halo = np.array([kernels.word_ranks(halo_bits[p], halo_ranks[p]) for p in range(P)], np.int64)
    parts = [_PartFiles(tmp / part_folder(p), int(num_owned[p]), int(num_halo[p]), int(part_edges[p]), weighted)
             for p in range(P)]
    try:
        _write_topology(chunks, owner, local, num_owned, halo_bits, halo_ranks, parts, opts.quiet)
        if ds.features is not None:
            _write_features(ds, owner, parts, opts.quiet)
        entries = []
        for p, part in enumerate(parts):
            meta = _part_meta(ds, p, P, partition_id, checksum, part)
            entries.append(part.finish(ds, owner, local, p, halo_bits[p], meta))
    finally:
        for part in parts:
            part.close()
    quality = _quality(n, chunks.num_edges, cut, num_owned, part_edges, num_halo)
    manifest = {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "partition_id": partition_id, "num_parts": P,
        "method": opts.method, "imbalance": opts.imbalance, "passes": passes,
        "seed": opts.seed,
        "dataset": {"path": str(data.absolute()), "name": ds.meta.get("name"), "checksum": checksum,
                    "num_nodes": n, "num_edges": chunks.num_edges},
        "owner": {"file": OWNER_FILE, "dtype": "int16", "sha256": owner_sha},
        "parts": entries, "quality": quality,
    }
    write_manifest(tmp, manifest)
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


def _mark_halos(chunks: CSCChunks, owner: np.ndarray, P: int, quiet: bool):
    words = (chunks.num_nodes + 63) >> 6
    halo_bits = np.zeros((P, words), np.uint64)
    part_edges = np.zeros(P, np.int64)
    cut = 0
    with progress(chunks.num_edges, "halo", "edge", quiet) as bar:
        for c0, ptr, idx, _ in chunks:
            cut += kernels.mark_halo(c0, ptr, idx, owner, halo_bits, part_edges)
            bar.update(int(ptr[-1] - ptr[0]))
    return halo_bits, part_edges, cut


class _PartFiles:
    """One part being written: its writer and the arrays filled chunk by chunk."""

    def __init__(self, folder: Path, num_owned: int, num_halo: int, num_edges: int, weighted: bool) -> None:
        self.writer = DatasetWriter(folder)
        self.num_owned, self.num_halo, self.num_edges = num_owned, num_halo, num_edges
        num_local = num_owned + num_halo
        self.indptr = self.writer.stream_array(fmt.INDPTR, (num_local + 1,), np.int64)
        self.indices = self.writer.stream_array(fmt.INDICES, (num_edges,), fmt.index_dtype(num_local))
        self.weights = self.writer.stream_array(fmt.EDGE_WEIGHT, (num_edges,), np.float32) if weighted else None
        self.l2g = self.writer.stream_array(L2G, (num_local,), np.int64)
        self.col_start = self.writer.stream_array(COL_START, (num_owned,), np.int64)
        self.features = None
        _append(self.indptr, np.zeros(1, np.int64))
        self.edges_written = 0

    def close(self) -> None:
        """Close the files and drop the temp folder if the part was not committed."""
        self.close_files()
        self.writer.__exit__(None, None, None)

    def finish(self, ds, owner: np.ndarray, local: np.ndarray, p: int, halo_bits: np.ndarray, meta: dict) -> dict:
        """The halo's ids, labels and splits, then commit; returns the manifest's entry for this part."""
        halo = np.flatnonzero(np.unpackbits(halo_bits.view(np.uint8), bitorder="little")[: len(owner)])
        assert len(halo) == self.num_halo and self.edges_written == self.num_edges
        _append(self.indptr, np.full(self.num_halo, self.edges_written, np.int64))
        _append(self.l2g, halo.astype(np.int64))
        self.writer.save_array(HALO_OWNER, owner[halo].astype(np.int32))
        if ds.labels is not None:
            owned = np.flatnonzero(owner == p)
            labels = np.full(self.num_owned + self.num_halo, -1, np.int64)
            labels[: self.num_owned] = ds.labels.numpy()[owned]
            self.writer.save_array(fmt.LABELS, labels)
        for name, ids in ds.split.items():
            ids = ids.numpy()
            self.writer.save_array(fmt.split_file(name), local[ids[owner[ids] == p]].astype(np.int64))
        self.close_files()
        path = self.writer.commit(meta)
        return {"folder": path.name, "num_owned": self.num_owned, "num_halo": self.num_halo,
                "num_edges": self.num_edges,
                "splits": {name: int(np.count_nonzero(owner[ids.numpy()] == p)) for name, ids in ds.split.items()},
                "meta_sha256": hashlib.sha256((path / fmt.META_FILE).read_bytes()).hexdigest()}

    def close_files(self) -> None:
        for f in (self.indptr, self.indices, self.weights, self.l2g, self.col_start, self.features):
            if f is not None:
                f.close()


def _append(file, rows: np.ndarray) -> None:
    """Append rows to a part's file (none: nothing to write; the writer cannot take an empty block)."""
    if len(rows):
        file.append(rows)


def _write_topology(chunks, owner, local, num_owned, halo_bits, halo_ranks, parts, quiet: bool) -> None:
    P = len(parts)
    with progress(chunks.num_edges, "write parts", "edge", quiet) as bar:
        for c0, ptr, idx, w in chunks:
            cols = owner[c0 : c0 + len(ptr) - 1]
            order = np.argsort(cols, kind="stable")
            part_cols = np.searchsorted(cols[order], np.arange(P + 1)).astype(np.int64)
            out_idx = np.empty(len(idx), np.int64)
            out_pos = np.empty(len(idx), np.int64)
            part_edge = np.empty(P + 1, np.int64)
            kernels.relabel_chunk(c0, ptr, idx, owner, local, num_owned, halo_bits, halo_ranks, order, part_cols,
                                  out_idx, out_pos, part_edge, np.zeros(P, np.int64))
            deg = np.diff(ptr)
            for p, part in enumerate(parts):
                mine = order[part_cols[p] : part_cols[p + 1]]
                if not len(mine):
                    continue
                a, b = part_edge[p], part_edge[p + 1]
                _append(part.indices, out_idx[a:b])
                if part.weights is not None:
                    _append(part.weights, w[out_pos[a:b]])
                _append(part.indptr, part.edges_written + np.cumsum(deg[mine]))
                part.edges_written += int(b - a)
                _append(part.l2g, c0 + mine.astype(np.int64))
                _append(part.col_start, ptr[mine])
            bar.update(len(idx))


def _write_features(ds, owner: np.ndarray, parts, quiet: bool) -> None:
    """The owned rows of every part, one pass over the feature file in node order."""
    store = NpyFile.open(ds.path / ds.meta["features"][fmt.NODE])
    n, dim = store.shape[0], store.shape[1]
    for part in parts:
        part.features = part.writer.stream_array(OWNED_FEATURES, (part.num_owned, dim), store.dtype)
    rows = max(1, FEATURE_CHUNK_BYTES // max(1, dim * store.dtype.itemsize))
    fd = os.open(store.path, os.O_RDONLY)
    try:
        with progress(n, "features", "row", quiet) as bar:
            for lo in range(0, n, rows):
                hi = min(n, lo + rows)
                block = store.read(fd, lo, hi)
                who = owner[lo:hi]
                for p, part in enumerate(parts):
                    _append(part.features, block[who == p])
                bar.update(hi - lo)
    finally:
        os.close(fd)


def _part_meta(ds, p: int, P: int, partition_id: str, checksum: str, part: _PartFiles) -> dict:
    meta = {
        "name": f"{ds.meta.get('name') or ds.path.name}-part{p}of{P}",
        "node_types": {fmt.NODE: part.num_owned + part.num_halo},
        "edge_types": [{"src": fmt.NODE, "rel": fmt.EDGE[1], "dst": fmt.NODE, "num_edges": part.num_edges,
                        "features": None, "time": None}],
        "features": {},
        "labels": {} if ds.labels is None else {fmt.NODE: {"file": fmt.LABELS, "num_classes": ds.num_classes}},
        "directed": ds.directed,
        "target_type": fmt.NODE if ds.split else None,
        "has_edge_weights": part.weights is not None,
        "source": {"importer": "partition", "dataset": str(ds.path.absolute())},
        PART_META: {"id": partition_id, "part": p, "num_parts": P, "num_owned": part.num_owned,
                    "num_halo": part.num_halo, "dataset_checksum": checksum,
                    "owned_features": OWNED_FEATURES if part.features is not None else None},
    }
    return meta


def _quality(n: int, num_edges: int, cut: int, num_owned, part_edges, num_halo) -> dict:
    """Edge cut (fraction of edges whose ends have different owners), node and edge balance (largest part / mean),
    halo (remote nodes a part's edges reach, over the graph's node count)."""
    P = len(num_owned)
    return {
        "edge_cut": int(cut), "edge_cut_fraction": cut / max(1, num_edges),
        "node_balance": float(num_owned.max() * P / max(1, n)),
        "edge_balance": float(part_edges.max() * P / max(1, num_edges)),
        "halo_fraction": float(num_halo.sum() / max(1, n)),
    }
