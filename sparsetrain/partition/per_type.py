"""`partition_dataset`'s one way, for every graph (a one-type graph is the typed graph with node type ``_N`` and edge
type ``(_N, _E, _N)``): every node type split across the parts, each edge type's in-edges with their destination's
owner, a halo per node type; streamed in bounded memory (a few bytes per node, a chunk of edges at a time).

Nodes are numbered in one flat id space, node type after node type in the dataset's order (``flat = type_offset[t] +
id``), so the owner table (``owner.npy``, int16 over flat ids), the halo bits and the local ids are one array each over
all types. Owners: LDG over the graph with all edge types as one topology (a node's in-neighbours over every edge type
whose destination is its type, read together), with a balance cap per node type (``(1 + imbalance) * N_t / parts``);
or a random hash of the flat id.

A part (``part-<p>/``) is a dataset folder over its local nodes: per node type ``t``, the owned nodes
``[0, num_owned_t)`` then the halo ``[num_owned_t, num_local_t)``, each in id order. Its CSC (the format's typed
layout: edge type after edge type) holds, for every edge type, the owned destinations' in-edges in the global CSC's
order within each column, sources as local ids of the source type; halo columns are empty. Extra arrays, per node type
``node.<t>.local_to_global.npy`` (int64: ids within the type), ``node.<t>.halo_owner.npy`` (int32),
``node.<t>.owned_features.npy``, and per edge type ``edge.<src___rel___dst>.col_start.npy`` (int64 [num_owned of the
destination type]: the position, within the edge type, of each owned column's first in-edge in the whole graph).
"""

from __future__ import annotations

import hashlib
import os
from functools import reduce
from pathlib import Path

import numpy as np

from sparsetrain._progress import progress
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.writer import DatasetWriter
from sparsetrain.errors import DatasetError
from sparsetrain.partition import kernels
from sparsetrain.partition.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    OWNER_FILE,
    PART_META,
    part_folder,
    write_manifest,
)
from sparsetrain.partition.stream import CHUNK_COLUMNS, NpyFile

FEATURE_CHUNK_BYTES = 1 << 26
SETTLED = 1e-3  # restreaming LDG stops once a pass moves fewer nodes than this share (the cut then stays put)


def l2g_file(node_type: str) -> str:
    return f"node.{node_type}.local_to_global.npy"


def halo_owner_file(node_type: str) -> str:
    return f"node.{node_type}.halo_owner.npy"


def owned_features_file(node_type: str) -> str:
    return f"node.{node_type}.owned_features.npy"


def col_start_file(edge_type) -> str:
    return f"edge.{fmt.edge_key(tuple(edge_type))}.col_start.npy"


_DAMAGED = "the file changed after import, re-run `sparsetrain preprocess` (`sparsetrain info DIR` checks every file)"


class TypedCSC:
    """A typed dataset's flat CSC read in chunks with ``pread`` (nothing mapped): by destination node type, every
    edge type into it merged into one column per node (:meth:`by_destination`), or edge type by edge type in the
    file's order (:meth:`by_edge_type`)."""

    def __init__(self, ds, chunk_edges: int, chunk_columns: int = CHUNK_COLUMNS, weights: bool = False) -> None:
        self.path = ds.path
        self.indptr = NpyFile.open(ds.path / fmt.INDPTR)
        self.indices = NpyFile.open(ds.path / fmt.INDICES)
        self.weights = NpyFile.open(ds.path / fmt.EDGE_WEIGHT) if weights else None
        self.node_types = list(ds.meta["node_types"])
        self.counts = np.array([ds.meta["node_types"][t] for t in self.node_types], np.int64)
        self.type_offset = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.edge_types = ds.edge_types
        index = {t: i for i, t in enumerate(self.node_types)}
        self.et_src = np.array([index[et[0]] for et in self.edge_types], np.int64)
        self.et_dst = np.array([index[et[2]] for et in self.edge_types], np.int64)
        self.col_offset = np.concatenate([[0], np.cumsum(self.counts[self.et_dst])]).astype(np.int64)
        self.num_edges = self.indices.shape[0]
        self.edges_by_type = np.array([e["num_edges"] for e in ds.meta["edge_types"]], np.int64)
        self.edge_offset = np.concatenate([[0], np.cumsum(self.edges_by_type)]).astype(np.int64)
        self.num_flat = int(self.type_offset[-1])
        self.flat_dtype = np.dtype(np.int32 if self.num_flat < 2**31 else np.int64)
        self.chunk_edges, self.chunk_columns = chunk_edges, chunk_columns

    def _ptr(self, fd: int, k: int, v0: int, v1: int) -> np.ndarray:
        """Edge type ``k``'s column offsets of destinations ``[v0, v1]`` (checked)."""
        ptr = self.indptr.read(fd, int(self.col_offset[k]) + v0, int(self.col_offset[k]) + v1 + 1)
        lo, hi = self.edge_offset[k], self.edge_offset[k + 1]
        if not (bool((np.diff(ptr) >= 0).all()) and ptr[0] >= lo and ptr[-1] <= hi
                and (v0 > 0 or ptr[0] == lo) and (v1 < self.counts[self.et_dst[k]] or ptr[-1] == hi)):
            raise DatasetError(f"{self.indptr.path}: column offsets of edge type {self.edge_types[k]} near node {v0} "
                               f"are not within its edges {lo}..{hi}; {_DAMAGED}")
        return ptr

    def _idx(self, fd: int, k: int, lo: int, hi: int) -> np.ndarray:
        idx = self.indices.read(fd, lo, hi)
        n = int(self.counts[self.et_src[k]])
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= n):
            bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
            raise DatasetError(f"{self.indices.path}: edge type {self.edge_types[k]} holds source id {bad}, outside "
                               f"[0, {n}); {_DAMAGED}")
        return idx

    def flat(self, idx: np.ndarray, k: int) -> np.ndarray:
        """Edge type ``k``'s source ids (within the source type) as flat ids; the array itself when they already are
        (the first node type's, in the flat dtype): no copy of a chunk that nothing changes."""
        base = int(self.type_offset[self.et_src[k]])
        if base == 0 and idx.dtype == self.flat_dtype:
            return idx
        return idx.astype(self.flat_dtype) + self.flat_dtype.type(base)

    def by_destination(self):
        """``(t, c0, ptr, idx)`` per chunk: nodes ``[c0, c0 + len(ptr) - 1)`` (flat ids) of type ``t``, one column
        each over every edge type into ``t`` (``ptr``: offsets into ``idx`` counted from ``ptr[0]``, sources as flat
        ids); a type with one edge type into it is read as it is stored, not merged."""
        fds = [os.open(self.indptr.path, os.O_RDONLY), os.open(self.indices.path, os.O_RDONLY)]
        try:
            for t in range(len(self.node_types)):
                ks = np.flatnonzero(self.et_dst == t)
                n_t, v0 = int(self.counts[t]), 0
                while v0 < n_t:
                    v1 = min(n_t, v0 + self.chunk_columns)
                    ptrs = [self._ptr(fds[0], k, v0, v1) for k in ks]
                    total = reduce(np.add, ptrs) if ptrs else np.zeros(v1 - v0 + 1, np.int64)  # one: no copy
                    first = sum(int(p[0]) for p in ptrs)
                    n = max(1, int(np.searchsorted(total, first + self.chunk_edges, side="right")) - 1)
                    del total
                    ptrs = [p[: n + 1] for p in ptrs]
                    idxs = [self._idx(fds[1], k, int(p[0]), int(p[-1])) for k, p in zip(ks, ptrs)]
                    if len(ks) == 1:  # one edge type: its columns are the merged ones
                        out_ptr, out_idx = ptrs[0], self.flat(idxs[0], int(ks[0]))
                    else:
                        stacked = np.stack([p - p[0] for p in ptrs]) if len(ks) else np.zeros((0, n + 1), np.int64)
                        starts = np.concatenate([[0], np.cumsum([len(i) for i in idxs])]).astype(np.int64)
                        flat = np.concatenate([i.astype(np.int64) for i in idxs]) if idxs else np.zeros(0, np.int64)
                        out_ptr, out_idx = np.empty(n + 1, np.int64), np.empty(len(flat), np.int64)
                        kernels.merge_columns(stacked, flat, starts, self.type_offset[self.et_src[ks]], out_ptr,
                                              out_idx)
                    yield t, int(self.type_offset[t]) + v0, out_ptr, out_idx
                    v0 += n
        finally:
            for fd in fds:
                os.close(fd)

    def by_edge_type(self, k: int, weights: bool = True):
        """``(v0, ptr, idx, weights)`` per chunk of edge type ``k``'s columns, in the file's order (``ptr``: positions
        in the flat CSC; ``idx``: ids within the source type; ``weights``: None unless asked for and stored)."""
        stored = self.weights if weights else None
        fds = [os.open(f.path, os.O_RDONLY) for f in (self.indptr, self.indices, stored) if f is not None]
        try:
            n_d, v0 = int(self.counts[self.et_dst[k]]), 0
            while v0 < n_d:
                ptr = self._ptr(fds[0], k, v0, min(n_d, v0 + self.chunk_columns))
                n = max(1, int(np.searchsorted(ptr, ptr[0] + self.chunk_edges, side="right")) - 1)
                ptr = ptr[: n + 1]
                lo, hi = int(ptr[0]), int(ptr[-1])
                w = stored.read(fds[2], lo, hi) if stored is not None else None
                yield v0, ptr, self._idx(fds[1], k, lo, hi), w
                v0 += n
        finally:
            for fd in fds:
                os.close(fd)


def assign_typed_owners(csc: TypedCSC, opts) -> tuple[np.ndarray, int]:
    """Each flat node's part (int16), and how many passes over the graph that took."""
    P = opts.parts
    owner = np.full(csc.num_flat, -1, np.int16)
    if opts.method == "hash":
        kernels.hash_owners(opts.seed, P, owner)
        return owner, 0
    T = len(csc.node_types)
    capacity = [max(1.0, float(np.ceil(n * (1.0 + opts.imbalance) / P))) for n in csc.counts]
    sizes = np.zeros((T, P), np.int64)
    counts = np.zeros(P, np.int64)
    for k in range(opts.passes):
        with progress(csc.num_edges, f"assign (ldg pass {k + 1}/{opts.passes})", "edge", opts.quiet) as bar:
            moved = 0
            for t, c0, ptr, idx in csc.by_destination():
                moved += kernels.ldg_chunk(c0, ptr, idx, owner, sizes[t], capacity[t], counts)
                bar.update(int(ptr[-1] - ptr[0]))
        if k and moved < SETTLED * csc.num_flat:
            break
    return owner, k + 1


class _Ranks:
    """A part's halo bits with their word ranks: the rank of a flat id among the part's halo nodes."""

    def __init__(self, bits: np.ndarray) -> None:
        self.bits = bits
        self.ranks = np.empty(len(bits), np.int64)
        self.total = kernels.word_ranks(bits, self.ranks)

    def below(self, g: int) -> int:
        """Halo nodes with a flat id below ``g``."""
        w = g >> 6
        if w >= len(self.bits):
            return self.total
        return int(self.ranks[w]) + (int(self.bits[w]) & ((1 << (g & 63)) - 1)).bit_count()


def partition_typed(ds, data: Path, out: Path, tmp: Path, opts, checksum: str) -> dict:
    """Partition the typed dataset ``ds`` into ``tmp`` (the caller moves it into place); returns the manifest."""
    P = opts.parts
    weighted = fmt.EDGE_WEIGHT in ds.meta["files"]
    csc = TypedCSC(ds, opts.chunk_edges, weights=weighted)
    T, K = len(csc.node_types), len(csc.edge_types)
    owner, passes = assign_typed_owners(csc, opts)
    np.save(tmp / OWNER_FILE, owner)
    fmt.fsync_path(tmp / OWNER_FILE)
    owner_sha = fmt.sha256_file(tmp / OWNER_FILE)
    partition_id = hashlib.sha256(f"{checksum}:{owner_sha}".encode()).hexdigest()[:16]
    local = np.empty(csc.num_flat, np.int32 if csc.num_flat < 2**31 else np.int64)
    kernels.owned_local_ids(owner, P, local)
    owned = np.stack([np.bincount(owner[csc.type_offset[t] : csc.type_offset[t + 1]], minlength=P)
                      for t in range(T)], 1).astype(np.int64)  # [P, T]
    owned_start = np.cumsum(owned, 1) - owned  # flat local id of each type's first owned node, per part
    # halos and per-part, per-edge-type edge counts and cuts: one pass, edge type by edge type
    words = (csc.num_flat + 63) >> 6
    halo_bits = np.zeros((P, words), np.uint64)
    edges = np.zeros((P, K), np.int64)
    cut_by_type = np.zeros(K, np.int64)
    counted = np.zeros(P, np.int64)
    with progress(csc.num_edges, "halo", "edge", opts.quiet) as bar:
        for k in range(K):
            dst_base = int(csc.type_offset[csc.et_dst[k]])
            for v0, ptr, idx, _ in csc.by_edge_type(k, weights=False):
                counted[:] = 0
                cut_by_type[k] += kernels.mark_halo(dst_base + v0, ptr, csc.flat(idx, k), owner, halo_bits, counted)
                edges[:, k] += counted
                bar.update(len(idx))
    part_edges = edges.sum(1)
    cut = int(cut_by_type.sum())
    ranks = [_Ranks(halo_bits[p]) for p in range(P)]
    halo_start = np.array([[ranks[p].below(int(csc.type_offset[t])) for t in range(T)] for p in range(P)], np.int64)
    halo = np.diff(np.concatenate([halo_start, np.array([[r.total] for r in ranks])], 1), axis=1)  # [P, T]
    halo_ranks = np.stack([r.ranks for r in ranks])
    writers = [_TypedPart(tmp / part_folder(p), csc, owned[p], halo[p], edges[p], weighted) for p in range(P)]
    try:
        _write_topology(csc, owner, local, owned, owned_start, halo, halo_start, halo_bits, halo_ranks, writers,
                        opts.quiet)
        _write_features(ds, csc, owner, writers, opts.quiet)
        entries = []
        for p, part in enumerate(writers):
            entries.append(part.finish(ds, csc, owner, local, owned_start[p], p, halo_bits[p],
                                       _part_meta(ds, csc, p, P, partition_id, checksum, part)))
    finally:
        for part in writers:
            part.close()
    n = csc.num_flat
    quality = {
        "edge_cut": int(cut), "edge_cut_fraction": cut / max(1, csc.num_edges),
        "node_balance": float(owned.sum(1).max() * P / max(1, n)),
        "edge_balance": float(part_edges.max() * P / max(1, csc.num_edges)),
        "halo_fraction": float(halo.sum() / max(1, n)),
        "node_balance_by_type": {t: float(owned[:, i].max() * P / max(1, csc.counts[i]))
                                 for i, t in enumerate(csc.node_types)},
        "edge_balance_by_type": {fmt.edge_key(et): float(edges[:, k].max() * P / max(1, csc.edges_by_type[k]))
                                 for k, et in enumerate(csc.edge_types)},
        "edge_cut_fraction_by_type": {fmt.edge_key(et): float(cut_by_type[k] / max(1, csc.edges_by_type[k]))
                                      for k, et in enumerate(csc.edge_types)},
    }
    manifest = {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "partition_id": partition_id, "num_parts": P,
        "method": opts.method, "imbalance": opts.imbalance, "passes": passes, "seed": opts.seed,
        "dataset": {"path": str(data.absolute()), "name": ds.meta.get("name"), "checksum": checksum,
                    "num_nodes": n, "num_edges": csc.num_edges,
                    "node_types": {t: int(c) for t, c in zip(csc.node_types, csc.counts)},
                    "edge_types": [list(et) for et in csc.edge_types], "target_type": ds.target_type},
        "owner": {"file": OWNER_FILE, "dtype": "int16", "sha256": owner_sha, "ids": "flat: node type by node type"},
        "parts": entries, "quality": quality,
    }
    write_manifest(tmp, manifest)
    return manifest


class _TypedPart:
    """One typed part being written."""

    def __init__(self, folder: Path, csc: TypedCSC, owned: np.ndarray, halo: np.ndarray, edges: np.ndarray,
                 weighted: bool) -> None:
        self.writer = DatasetWriter(folder)
        self.owned, self.halo, self.edges = owned, halo, edges
        num_local = owned + halo
        columns = int(sum(num_local[csc.et_dst[k]] for k in range(len(csc.edge_types))))
        total = int(edges.sum())
        self.indptr = self.writer.stream_array(fmt.INDPTR, (columns + 1,), np.int64)
        self.indices = self.writer.stream_array(fmt.INDICES, (total,), fmt.index_dtype(int(num_local.max(initial=0))))
        self.weights = self.writer.stream_array(fmt.EDGE_WEIGHT, (total,), np.float32) if weighted else None
        self.col_start = None
        self.features = None
        self.indptr.append(np.zeros(1, np.int64))
        self.edges_written = 0

    def close(self) -> None:
        self.close_files()
        self.writer.__exit__(None, None, None)

    def close_files(self) -> None:
        for f in (self.indptr, self.indices, self.weights, self.col_start, self.features):
            if f is not None:
                f.close()

    def finish(self, ds, csc: TypedCSC, owner, local, owned_start, p: int, bits: np.ndarray, meta: dict) -> dict:
        """Per node type: the id maps, labels; the split; then commit. Returns the manifest's entry."""
        flat_halo = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little")[: len(owner)])
        assert self.edges_written == int(self.edges.sum())
        types = {}
        for i, t in enumerate(csc.node_types):
            lo, hi = int(csc.type_offset[i]), int(csc.type_offset[i + 1])
            mine = np.flatnonzero(owner[lo:hi] == p)
            halo = flat_halo[(flat_halo >= lo) & (flat_halo < hi)]
            assert len(mine) == self.owned[i] and len(halo) == self.halo[i]
            self.writer.save_array(l2g_file(t), np.concatenate([mine, halo - lo]).astype(np.int64))
            self.writer.save_array(halo_owner_file(t), owner[halo].astype(np.int32))
            if t in ds.labels_by_type:
                labels = np.full(len(mine) + len(halo), -1, np.int64)
                labels[: len(mine)] = ds.labels_by_type[t].numpy()[mine]
                self.writer.save_array(fmt.node_file(t, "labels"), labels)
            types[t] = {"num_owned": int(self.owned[i]), "num_halo": int(self.halo[i])}
        splits = {}
        if ds.target_type is not None:
            base = int(csc.type_offset[csc.node_types.index(ds.target_type)])
            target = csc.node_types.index(ds.target_type)
            for name, ids in ds.split.items():
                flat = ids.numpy() + base
                mine = flat[owner[flat] == p]
                self.writer.save_array(fmt.split_file(name), (local[mine] - owned_start[target]).astype(np.int64))
                splits[name] = len(mine)
        self.close_files()
        path = self.writer.commit(meta)
        return {"folder": path.name, "num_owned": int(self.owned.sum()), "num_halo": int(self.halo.sum()),
                "num_edges": int(self.edges.sum()), "splits": splits, "types": types,
                "edges_by_type": [int(e) for e in self.edges],
                "meta_sha256": hashlib.sha256((path / fmt.META_FILE).read_bytes()).hexdigest()}


def _write_topology(csc: TypedCSC, owner, local, owned, owned_start, halo, halo_start, halo_bits, halo_ranks,
                    parts, quiet: bool) -> None:
    """Edge type by edge type, each part's owned columns (sources relabelled), then its empty halo columns."""
    P = len(parts)
    with progress(csc.num_edges, "write parts", "edge", quiet) as bar:
        for k, et in enumerate(csc.edge_types):
            s, d = int(csc.et_src[k]), int(csc.et_dst[k])
            for part in parts:
                part.col_start = part.writer.stream_array(col_start_file(et), (int(part.owned[d]),), np.int64)
            shift = owned_start[:, s].astype(np.int64)
            halo_base = (owned[:, s] - halo_start[:, s]).astype(np.int64)
            dst_base = int(csc.type_offset[d])
            for v0, ptr, idx, w in csc.by_edge_type(k):
                c0 = dst_base + v0
                cols = owner[c0 : c0 + len(ptr) - 1]
                order = np.argsort(cols, kind="stable")
                part_cols = np.searchsorted(cols[order], np.arange(P + 1)).astype(np.int64)
                out_idx, out_pos = np.empty(len(idx), np.int64), np.empty(len(idx), np.int64)
                part_edge = np.empty(P + 1, np.int64)
                kernels.relabel_chunk(c0, ptr, csc.flat(idx, k), owner, local, halo_base, halo_bits, halo_ranks, order,
                                      part_cols, out_idx, out_pos, part_edge, shift)
                deg = np.diff(ptr)
                for p, part in enumerate(parts):
                    mine = order[part_cols[p] : part_cols[p + 1]]
                    if not len(mine):
                        continue
                    a, b = part_edge[p], part_edge[p + 1]
                    if b > a:
                        part.indices.append(out_idx[a:b])
                        if part.weights is not None:
                            part.weights.append(w[out_pos[a:b]])
                    part.indptr.append(part.edges_written + np.cumsum(deg[mine]))
                    part.edges_written += int(b - a)
                    part.col_start.append(ptr[mine] - csc.edge_offset[k])
                bar.update(len(idx))
            for p, part in enumerate(parts):
                if halo[p, d]:
                    part.indptr.append(np.full(int(halo[p, d]), part.edges_written, np.int64))
                part.col_start.close()
                part.col_start = None


def _write_features(ds, csc: TypedCSC, owner, parts, quiet: bool) -> None:
    """The owned rows of every part, per node type with features: one pass over each feature file."""
    for t, name in ds.meta.get("features", {}).items():
        i = csc.node_types.index(t)
        store = NpyFile.open(ds.path / name)
        n, dim = store.shape[0], store.shape[1]
        for part in parts:
            part.features = part.writer.stream_array(owned_features_file(t), (int(part.owned[i]), dim), store.dtype)
        rows = max(1, FEATURE_CHUNK_BYTES // max(1, dim * store.dtype.itemsize))
        fd = os.open(store.path, os.O_RDONLY)
        try:
            with progress(n, f"features ({t})", "row", quiet) as bar:
                for lo in range(0, n, rows):
                    hi = min(n, lo + rows)
                    block = store.read(fd, lo, hi)
                    who = owner[csc.type_offset[i] + lo : csc.type_offset[i] + hi]
                    for p, part in enumerate(parts):
                        sel = block[who == p]
                        if len(sel):
                            part.features.append(sel)
                    bar.update(hi - lo)
        finally:
            os.close(fd)
        for part in parts:
            part.features.close()
            part.features = None


def _part_meta(ds, csc: TypedCSC, p: int, P: int, partition_id: str, checksum: str, part: _TypedPart) -> dict:
    num_local = part.owned + part.halo
    features = {t: owned_features_file(t) for t in ds.meta.get("features", {})}
    return {
        "name": f"{ds.meta.get('name') or ds.path.name}-part{p}of{P}",
        "node_types": {t: int(num_local[i]) for i, t in enumerate(csc.node_types)},
        "edge_types": [{"src": et[0], "rel": et[1], "dst": et[2], "num_edges": int(part.edges[k]), "features": None,
                        "time": None} for k, et in enumerate(csc.edge_types)],
        "features": {},
        "labels": {t: {"file": fmt.node_file(t, "labels"), "num_classes": entry["num_classes"]}
                   for t, entry in ds.meta.get("labels", {}).items()},
        "directed": ds.directed,
        "target_type": ds.target_type if ds.split else None,
        "has_edge_weights": part.weights is not None,
        "source": {"importer": "partition", "dataset": str(ds.path.absolute())},
        PART_META: {"id": partition_id, "part": p, "num_parts": P, "num_owned": int(part.owned.sum()),
                    "num_halo": int(part.halo.sum()), "dataset_checksum": checksum,
                    "owned_features": features or None,
                    "types": {t: {"num_owned": int(part.owned[i]), "num_halo": int(part.halo[i])}
                              for i, t in enumerate(csc.node_types)}},
    }


def check_typed_files(folder: Path, manifest: dict) -> None:
    """Every per-type file a typed part needs (id maps per node type, column starts per edge type, owned features)
    is listed in its meta.json and present: one line naming the first missing one."""
    from sparsetrain.errors import DatasetError

    node_types = list(manifest["dataset"]["node_types"])
    edge_types = [tuple(et) for et in manifest["dataset"]["edge_types"]]
    for entry in manifest["parts"]:
        path = folder / entry["folder"]
        meta = fmt.read_meta(path)
        needed = [(l2g_file(t), f"node type {t!r}'s local_to_global") for t in node_types]
        needed += [(halo_owner_file(t), f"node type {t!r}'s halo owners") for t in node_types]
        needed += [(col_start_file(et), f"edge type {et}'s column starts") for et in edge_types]
        needed += [(name, f"node type {t!r}'s owned features")
                   for t, name in (meta.get(PART_META, {}).get("owned_features") or {}).items()]
        for name, what in needed:
            if name not in meta["files"] or not (path / name).is_file():
                raise DatasetError(f"{path / name}: missing ({what}); the part is incomplete, restore it or re-run "
                                   "`sparsetrain partition`")
