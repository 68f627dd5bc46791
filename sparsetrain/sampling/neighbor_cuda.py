"""GPU kernels of the fused multi-hop neighbor sampler (``numba.cuda``).

Homogeneous and typed graphs alike: as on the CPU, a thread's work item is a column
of the graph (a dst node, or an (edge type, dst node) pair), a hop's items come in
segments, one per edge type, and a source's map key is its node type's offset plus
its id. One thread per work item draws its in-edges and inserts every sampled source
straight into one open-addressing hash table (global id -> local id) with
``atomicCAS`` on the key, FastGL's
Fused-Map: sampling, dedupe and relabel share the probe. Ids are made
deterministic without a second map: each inserted key keeps the smallest edge
position that carried it (``atomicMin`` on ``OFFSET + e``); a flag + scan pass
numbers the first occurrences in edge order, so new nodes get the same local ids
as on the CPU, whatever the launch shape. Nodes of earlier hops sit in the same
table with their final ids (< OFFSET), which ``atomicMin`` never overwrites. On a
typed graph each node type numbers its first occurrences apart (a scan per type).

What is shared with the CPU kernels (:mod:`sparsetrain.sampling.neighbor`): the
counter-based RNG (:mod:`sparsetrain.sampling.rng`), the per-node edge ranges and
counts and the draws (:mod:`sparsetrain.sampling.draw`), compiled here from the same Python
source as device functions (:func:`sparsetrain.sampling.retarget.retarget`), so
both targets make the same draws. What is not: the dedupe + relabel. Thousands
of threads insert at once, so it needs the atomics and the scan above; the CPU
does it in one sequential pass over a direct-address table, which on a CPU is
faster than any atomic scheme and gives the same ids.

Kernels run on PyTorch's current CUDA stream (never the legacy default stream),
so they are ordered with the torch ops around them (allocations, scans). The counts
stay on the device: arrays are sized by host bounds from the fanouts and kernels read
the true sizes from device memory, so a batch waits for the device once, at the end,
to read every hop's counts with the seed and damage checks. A sampler keeps its arrays
and their kernel views from batch to batch (:class:`Workspace`): making a view from
Python costs more than most of the kernels it feeds.

The graph may be in device memory or page-locked host memory (read zero-copy
over PCIe). Arrays cross from PyTorch by ``__cuda_array_interface__``, never by
copies. Under ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run on NumPy arrays
(:class:`NumpyArrays`), which is how the tests check them without a GPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from sparsetrain._numba_cuda import cuda

from sparsetrain.sampling import draw, rng
from sparsetrain.sampling.errors import SamplingBackendError, SamplingError
from sparsetrain.sampling.graph import DAMAGED
from sparsetrain.sampling.retarget import retarget

EMPTY = np.int64(-1)
OFFSET = np.int64(1 << 62)  # table values >= OFFSET are "first edge position + OFFSET" of this hop's new nodes


# the RNG and the per-node draws: the CPU sampler's source, compiled for the device
_device = retarget(
    [rng.mix64, rng.uniform, rng.below, rng.node_stream, draw.segment_of, draw.edge_count, draw.count_node, draw.es_key,
     draw.draw_positions],
    cuda.jit(device=True),
)
_mix64 = _device["mix64"]
_node_stream = _device["node_stream"]
_segment_of = _device["segment_of"]
_count_node = _device["count_node"]
_draw_positions = _device["draw_positions"]


# ---- the open-addressing map ----
@cuda.jit(device=True)
def _insert(table_keys, table_vals, mask, node, value):
    """Find or claim ``node``'s slot (linear probing, CAS on the key), lower its value to ``value``; returns the
    slot."""
    slot = np.int64(_mix64(np.uint64(node)) & np.uint64(mask))
    while True:
        old = cuda.atomic.cas(table_keys, slot, EMPTY, node)
        if old == EMPTY or old == node:
            break
        slot = (slot + 1) & mask
    if table_vals[slot] > value:
        cuda.atomic.min(table_vals, slot, value)
    return slot


@cuda.jit
def _insert_known(nodes, region, counts, t, key_base, table_keys, table_vals, mask):
    """Node ``i < counts[t]`` of type ``t`` (at ``nodes[region + i]``, map key ``key_base`` + its id) keeps local id
    ``i``."""
    i = cuda.grid(1)
    if i < counts[t]:
        _insert(table_keys, table_vals, mask, key_base + nodes[region + i], np.int64(i))


@cuda.jit
def _count_kernel(indptr, weights, nodes, region, counts, first, seg_dst_type, seg_et, et_dst, col_offset, seg_fanout,
                  replace, weighted, num_edges, seg_start, seg_dst, cols, lo, deg, per_item, status):
    """A hop's work items and their counts, in one launch.

    Segment ``s`` samples for its dst type's nodes ``[first, counts)``: work items ``[seg_start[s], seg_start[s + 1])``
    (empty when the type has no such nodes; thread 0 writes ``seg_start``/``seg_dst`` for the kernels after this one,
    every thread finds its own segment from the counts). Item ``i``'s column is its dst node offset by its edge type's
    first column; its edge range and count follow. Items past the hop's work (the arrays are sized by a bound) get none;
    a column whose range is outside the edges gets none and is noted in ``status[0]`` (column + 1); a column outside
    the graph (a seed that is no node id, reported by the seed check) gets none.
    """
    i = cuda.grid(1)
    num_segments = seg_dst_type.shape[0]
    if i == 0:
        seg_start[0] = 0
        for s in range(num_segments):
            d = seg_dst_type[s]
            seg_start[s + 1] = seg_start[s] + counts[d] - first[d]
            seg_dst[s] = first[d]
    if i < per_item.shape[0]:
        c = 0
        cols[i] = 0
        lo[i] = 0
        deg[i] = 0
        start = np.int64(0)
        for s in range(num_segments):
            d = seg_dst_type[s]
            size = counts[d] - first[d]
            if i < start + size:
                et = seg_et[s]
                col = nodes[region[d] + first[d] + i - start] + col_offset[et]
                cols[i] = col
                if col >= 0 and col < indptr.shape[0] - 1:
                    c = _count_node(indptr, weights, cols, i, seg_fanout[s], replace, weighted, num_edges, lo, deg)
                    if c < 0:
                        cuda.atomic.max(status, 0, col + 1)
                        c = 0
                break
            start += size
        per_item[i] = c


@cuda.jit
def _sample_kernel(indices, weights, edge_perm, permuted, cols, seg_start, seg_et, seg_dst, fanouts, keys,
                   col_offset, edge_offset, et_src, et_dst, type_offset, type_size, lo, deg, ends, replace, weighted,
                   table_keys, table_vals, mask, typed, src, dst, edge_ids, slots, src_type, status):
    """Draw item i's in-edges into src[start:end] (positions), then read each source and insert it into the map.

    Item ``i`` is column ``cols[i]`` of segment ``s`` (edge type ``seg_et[s]``; its dst has local id ``seg_dst[s] + i -
    seg_start[s]``); a source's map key is its type's ``type_offset`` + its id, and on a typed graph its type goes to
    ``src_type[e]``. ``edge_ids[e]`` is ``edge_perm`` at the edge's CSC position when ``permuted``, else that position
    counted from its edge type's first edge. A source that is not a node of its type is noted in ``status[1]`` (its
    entry of ``indices`` + 1) and replaced by the dst node itself, already in the map: the batch stays memory-safe
    until the host sees ``status`` and raises.
    """
    i = cuda.grid(1)
    if i < ends.shape[0]:
        start = ends[i - 1] if i > 0 else np.int64(0)
        k = ends[i] - start
        if k > 0:
            s = _segment_of(seg_start, i)
            et = seg_et[s]
            v = cols[i] - col_offset[et]
            a = lo[i]
            stream = _node_stream(keys[et], v)
            _draw_positions(weights, a, deg[i], k, fanouts[et], replace, weighted, stream, src, start)
            base = type_offset[et_src[et]]
            size = type_size[et_src[et]]
            d = seg_dst[s] + i - seg_start[s]
            for e in range(start, start + k):
                p = a + src[e]
                edge_ids[e] = edge_perm[p] if permuted else p - edge_offset[et]
                u = np.int64(indices[p])
                g = base + u
                if u < 0 or u >= size:
                    cuda.atomic.max(status, 1, p + 1)
                    g = type_offset[et_dst[et]] + v
                slots[e] = _insert(table_keys, table_vals, mask, g, OFFSET + e)
                dst[e] = d
                if typed:
                    src_type[e] = et_src[et]


@cuda.jit
def _first_kernel(slots, table_vals, ends, typed, src_type, flags):
    """``flags[t, e]``: 1 where edge ``e`` carries the first occurrence of a new node of type ``t`` (0 untyped)."""
    e = cuda.grid(1)
    if e < flags.shape[1]:
        seen = e < ends[ends.shape[0] - 1]
        first = seen and table_vals[slots[e]] == OFFSET + e
        t = src_type[e] if typed and seen else 0
        for n in range(flags.shape[0]):
            flags[n, e] = 1 if first and n == t else 0


@cuda.jit
def _number_kernel(slots, table_keys, table_vals, ends, typed, src_type, ranks, counts, region, type_offset, nodes):
    """First occurrences (type ``t``'s inclusive rank steps up at e) take local id ``counts[t] + rank - 1`` and are
    appended to type ``t``'s nodes."""
    e = cuda.grid(1)
    if e < ranks.shape[1] and e < ends[ends.shape[0] - 1]:
        t = src_type[e] if typed else 0
        before = ranks[t, e - 1] if e > 0 else 0
        if ranks[t, e] != before:
            local = counts[t] + before
            table_vals[slots[e]] = local
            nodes[region[t] + local] = table_keys[slots[e]] - type_offset[t]


@cuda.jit
def _relabel_kernel(slots, table_vals, ends, src):
    e = cuda.grid(1)
    if e < src.shape[0] and e < ends[ends.shape[0] - 1]:
        src[e] = table_vals[slots[e]]


# ---- array back ends: PyTorch CUDA tensors on a GPU, NumPy arrays under the simulator ----
class TorchArrays:
    """Allocations and scans as PyTorch CUDA tensors; kernels see them through ``__cuda_array_interface__``.

    Nothing here waits for the device: host values go up through pinned buffers (a copy from pageable memory would
    wait for the stream), and :meth:`read` is the one read back.
    """

    threads = 256

    def __init__(self, device) -> None:
        import torch

        self.torch = torch
        self.device = device

    def empty(self, shape):
        return self.torch.empty(shape, dtype=self.torch.int64, device=self.device)

    def full(self, shape, value: int):
        return self.torch.full(shape if isinstance(shape, tuple) else (shape,), value, dtype=self.torch.int64,
                               device=self.device)

    def cumsum(self, a, axis: int = 0, out=None):
        return self.torch.cumsum(a, axis, out=out)

    def kernel(self, a):
        # sync=False: the kernels run on the stream that produced ``a``, so no host wait is needed
        return cuda.as_cuda_array(a, sync=False) if a.device.type == "cuda" else _host_mapped(a)

    def stream(self):
        """Numba's handle on PyTorch's current stream of this device."""
        return cuda.external_stream(self.torch.cuda.current_stream(self.device).cuda_stream)

    def upload_into(self, out, values: np.ndarray):
        """``out`` filled with an int64 host array's values, copied from a pinned buffer without waiting."""
        host = self.torch.from_numpy(np.ascontiguousarray(values, np.int64)).pin_memory()
        return out.copy_(host, non_blocking=True)

    def split(self, a, sizes: list[int]) -> list:
        """``a`` cut into consecutive views of ``sizes``."""
        bounds = np.cumsum([0, *sizes])
        return [a[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]

    def record_done(self):
        """An event after the work queued so far on the current stream."""
        event = self.torch.cuda.Event()
        event.record(self.torch.cuda.current_stream(self.device))
        return event

    def wait_for(self, event) -> None:
        """Queue a wait for ``event`` on the current stream (no host wait)."""
        if event is not None:
            self.torch.cuda.current_stream(self.device).wait_event(event)

    def as_uint64(self, a):
        return a.view(self.torch.uint64)

    def cat(self, parts):
        return self.torch.cat(parts)

    def clone(self, a):
        return a.clone()

    def stack(self, a, b):
        return self.torch.stack([a, b])

    def seed_check(self, seeds, size: int):
        """``[any seed outside [0, size), any seed repeated, a repeated seed]`` on the device."""
        torch = self.torch
        if seeds.numel() == 0:
            return torch.zeros(3, dtype=torch.int64, device=self.device)
        ordered = torch.sort(seeds).values
        outside = (ordered[0] < 0) | (ordered[-1] >= size)
        same = ordered[1:] == ordered[:-1]
        # (index_select, not ordered[i]: a 0-dim tensor as an index is read back to the host)
        repeated = (ordered[1:].index_select(0, same.to(torch.int32).argmax().reshape(1)).reshape(())
                    if seeds.numel() > 1 else ordered[0])
        return torch.stack([outside.to(torch.int64), same.any().to(torch.int64), repeated])

    def read(self, a) -> list[int]:
        """The one host wait: ``a``'s values on the host."""
        return a.tolist()


class NumpyArrays(TorchArrays):
    """The same operations on NumPy arrays, for the CUDA simulator."""

    threads = 32

    def __init__(self) -> None:
        pass

    def empty(self, shape):
        return np.empty(shape, np.int64)

    def full(self, shape, value: int):
        return np.full(shape, value, np.int64)

    def cumsum(self, a, axis: int = 0, out=None):
        return np.cumsum(a, axis, out=out)

    def kernel(self, a):
        return a

    def stream(self):
        return 0  # the simulator runs kernels in order on the host

    def upload_into(self, out, values: np.ndarray):
        out[...] = values
        return out

    def record_done(self):
        return None  # the simulator runs kernels in order on the host

    def wait_for(self, event) -> None:
        pass

    def as_uint64(self, a):
        return a.view(np.uint64)

    def cat(self, parts):
        return np.concatenate(parts)

    def clone(self, a):
        return a.copy()

    def stack(self, a, b):
        return np.stack([a, b])

    def seed_check(self, seeds, size: int):
        if seeds.size == 0:
            return np.zeros(3, np.int64)
        ordered = np.sort(seeds)
        same = ordered[1:] == ordered[:-1]
        repeated = ordered[1:][same.argmax()] if seeds.size > 1 else ordered[0]
        return np.array([ordered[0] < 0 or ordered[-1] >= size, same.any(), repeated], np.int64)

    def read(self, a) -> list[int]:
        return a.tolist()


class Workspace:
    """The array back end ``ops`` as one sampler uses it batch after batch: the arrays a batch allocates are kept, with
    their kernel views, for the next batch, which asks for the same shapes in the same order when its bounds are the
    same (every full batch of a loader). A kernel view costs tens of microseconds of Python (torch's
    ``__cuda_array_interface__``, Numba's device array) and a batch passes ~60 arrays to kernels: made once, not once
    a batch. Outputs are copied out of it (:func:`_finish`), and a batch on another stream waits for the last one's work
    (an event, not a host wait) before it reuses the arrays.
    """

    MAX_ARRAYS = 512  # distinct (position, shape) entries kept; past this (batches of ever new shapes) it starts over

    def __init__(self, ops) -> None:
        self._ops = ops
        self._arrays = {}  # (position in the batch, kind, shape) -> the array (or the list of views) made there
        self._owned = {}  # id -> [array, its kernel view or None], for every array held in _arrays
        self._views = {}  # id -> (array, view) for other arrays, for one batch
        self._position = 0
        self._done = None

    def __getattr__(self, name):
        return getattr(self._ops, name)

    def begin(self) -> Workspace:
        """Start a batch (after the last batch's work, on whatever stream that ran)."""
        self._position = 0
        self._views = {}
        if len(self._arrays) > self.MAX_ARRAYS:
            self._arrays, self._owned = {}, {}
        self._ops.wait_for(self._done)
        return self

    def end(self) -> None:
        """The batch's work is queued: the next one waits for it before reusing the arrays."""
        self._done = self._ops.record_done()

    def _kept(self, kind: str, shape, make):
        key = (self._position, kind, shape if isinstance(shape, tuple) else (shape,))
        self._position += 1
        made = self._arrays.get(key)
        if made is None:
            made = self._arrays[key] = make()
            for a in made if isinstance(made, list) else [made]:
                self._owned[id(a)] = [a, None]
        return made

    def empty(self, shape):
        return self._kept("empty", shape, lambda: self._ops.empty(shape))

    def full(self, shape, value: int):
        a = self._kept("full", shape, lambda: self._ops.empty(shape))
        a[...] = value
        return a

    def upload(self, values: np.ndarray):
        return self._ops.upload_into(self._kept("upload", len(values), lambda: self._ops.empty(len(values))), values)

    def copy(self, a):
        out = self._kept("copy", tuple(a.shape), lambda: self._ops.empty(tuple(a.shape)))
        out[...] = a
        return out

    def cumsum(self, a, axis: int = 0):
        shape = tuple(a.shape)
        return self._ops.cumsum(a, axis, out=self._kept("cumsum", shape, lambda: self._ops.empty(shape)))

    def split(self, a, sizes: list[int]) -> list:
        return self._kept("split", (id(a), *sizes), lambda: self._ops.split(a, sizes))

    def as_uint64(self, a):
        return self._kept("uint64", id(a), lambda: self._ops.as_uint64(a))

    def kernel(self, a):
        owned = self._owned.get(id(a))
        if owned is not None:
            if owned[1] is None:
                owned[1] = self._ops.kernel(a)
            return owned[1]
        hit = self._views.get(id(a))
        if hit is None:
            hit = self._views[id(a)] = (a, self._ops.kernel(a))  # (a kept alive: its id stays its own)
        return hit[1]


def _host_mapped(tensor):
    """A device view of a page-locked host tensor (unified addressing: the host pointer is valid on the device)."""
    if not tensor.is_pinned():
        raise SamplingBackendError("GPU sampling reads the graph from device memory or pinned host memory; call "
                                   "graph.to('cuda') or graph.pin_memory()")

    class _View:
        __cuda_array_interface__ = {
            "shape": tuple(tensor.shape),
            "typestr": tensor.numpy().dtype.str,
            "data": (tensor.data_ptr(), False),
            "version": 3,
        }

    return cuda.as_cuda_array(_View())


def _blocks(n: int, threads: int) -> int:
    return max(1, (n + threads - 1) // threads)


def _capacity(n: int) -> int:
    """Table size for ``n`` keys: a power of two, at most half full."""
    return 1 << max(6, int(2 * max(n, 1) - 1).bit_length())


def max_degrees(indptr: np.ndarray, layout) -> np.ndarray:
    """Per edge type, the largest in-degree: what a fanout of -1 can draw for one node."""
    cols = np.append(layout.col_offset, len(indptr) - 1)
    degrees = np.diff(np.asarray(indptr, np.int64))
    return np.array([degrees[a:b].max(initial=0) for a, b in zip(cols[:-1], cols[1:])], np.int64)


class CudaGraph:
    """The sampler's device views of a CSCGraph (device memory or pinned host memory)."""

    def __init__(self, graph) -> None:
        if not cuda.is_available():
            raise SamplingBackendError("GPU sampling needs a CUDA device visible to numba.cuda; sample on the CPU "
                                       "(keep the graph and seeds on the host)")
        device = graph.device if graph.device.type == "cuda" else None
        self.ops = TorchArrays(device or "cuda")
        self.sources = (graph.source("indptr"), graph.source("indices"))
        self.indptr = self.ops.kernel(graph.indptr)
        self.indices = self.ops.kernel(graph.indices)
        self.weights = self.ops.kernel(graph.weights if graph.weights is not None else self.ops.full(1, 0).float())
        self.edge_perm = None if graph.edge_perm is None else self.ops.kernel(graph.edge_perm)
        self._graph = graph
        self._max_degree = None
        self._local = threading.local()

    def workspace(self) -> Workspace:
        """This thread's :class:`Workspace` (threads sample batches side by side, each in its own arrays)."""
        ws = getattr(self._local, "workspace", None)
        if ws is None:
            ws = self._local.workspace = Workspace(self.ops)
        return ws

    def max_degree(self, layout) -> np.ndarray:
        """:func:`max_degrees` of the graph, computed once (the one host read it costs)."""
        if self._max_degree is None:
            self._max_degree = max_degrees(self._graph.indptr.cpu().numpy(), layout)
        return self._max_degree


def sample_layers(graph: CudaGraph, seeds, layout, keys, replace: bool, weighted: bool, new_only: bool = False,
                  seed_type: int = 0):
    """All hops on the GPU; :func:`sample_arrays`' result as CUDA tensors."""
    max_degree = graph.max_degree(layout) if (layout.fanouts < 0).any() else None
    with graph.ops.torch.cuda.device(graph.ops.device):
        return sample_arrays(graph.ops, graph.indptr, graph.indices, graph.weights, seeds, layout, keys, replace,
                             weighted, graph.sources, edge_perm=graph.edge_perm, new_only=new_only,
                             seed_type=seed_type, max_degree=max_degree, workspace=graph.workspace())


class _Bounds:
    """Host upper bounds of what the device counts: nodes per type, and per hop the work items and edges of each
    segment (an edge type sampled at the hop). The arrays are sized by these, so no count has to come back before
    the batch is done; a batch whose bounds grow past :data:`EXACT_ABOVE` edges reads its counts every hop instead."""

    def __init__(self, layout, num_seeds: int, seed_type: int, new_only: bool, max_degree) -> None:
        self.layout, self.new_only, self.max_degree = layout, new_only, max_degree
        self.counts = np.zeros(len(layout.type_size), np.int64)
        self.counts[seed_type] = num_seeds
        self.new = self.counts.copy()  # nodes first reached at the hop before (the seeds, for hop 0)

    def hop(self, hop: int) -> tuple[list[int], list[int], list[int]]:
        """Hop ``hop``'s segments: edge types, work bound and edge bound of each."""
        layout = self.layout
        fan = layout.fanouts[hop]
        pool = self.new if self.new_only else self.counts
        seg_et = [k for k in range(len(fan)) if fan[k] != 0 and pool[layout.et_dst[k]] > 0]
        work = [int(pool[layout.et_dst[k]]) for k in seg_et]
        per_node = [int(fan[k]) if fan[k] > 0 else int(self.max_degree[k]) for k in seg_et]
        return seg_et, work, [w * f for w, f in zip(work, per_node)]

    def advance(self, seg_et: list[int], edges: list[int]) -> None:
        """After a hop: each type gains at most its sampled sources (and no more than its nodes)."""
        new = np.zeros_like(self.counts)
        for k, e in zip(seg_et, edges):
            new[self.layout.et_src[k]] += e
        self.new = np.minimum(new, self.layout.type_size)
        self.counts = self.counts + self.new

    def exact(self, counts: np.ndarray, first: np.ndarray) -> None:
        """Replace the bounds by the device's counts (exact mode)."""
        self.counts, self.new = counts.copy(), counts - first


EXACT_ABOVE = 1 << 24  # edges: a batch whose bounds pass this reads its counts every hop and sizes arrays exactly


class _Regions:
    """The batch's nodes: one buffer, a region per node type (``start``, ``caps`` on the host, ``offsets`` on the
    device); type ``n``'s local id ``i`` is at ``buffer[start[n] + i]``."""

    def __init__(self, ops, caps: np.ndarray) -> None:
        self.ops = ops
        self._allocate(np.asarray(caps, np.int64))

    def _allocate(self, caps: np.ndarray) -> None:
        self.caps = caps
        self.start = np.concatenate([[0], np.cumsum(caps)[:-1]]).astype(np.int64)
        self.offsets = self.ops.upload(self.start)
        self.buffer = self.ops.empty(max(int(caps.sum()), 1))

    def reserve(self, caps: np.ndarray) -> None:
        """Room for ``caps`` nodes per type, keeping every node so far."""
        if (caps <= self.caps).all():
            return
        old, old_start, old_caps = self.buffer, self.start, self.caps
        self._allocate(np.maximum(caps, old_caps))
        for n, (a, c) in enumerate(zip(old_start, old_caps)):
            self.buffer[self.start[n]: self.start[n] + c] = old[a: a + c]

    def of(self, n: int, count: int):
        return self.buffer[self.start[n]: self.start[n] + count]


class _Table:
    """The open-addressing map (global key -> local id) of the batch."""

    def __init__(self, ops, stream) -> None:
        self.ops, self.stream = ops, stream
        self.capacity, self.keys, self.vals, self.mask = 0, None, None, 0

    def reserve(self, num_keys: int, nodes: _Regions, counts, type_offset: np.ndarray) -> None:
        """Room for ``num_keys`` keys: a fresh table holding every node so far when the current one is too small."""
        needed = _capacity(num_keys)
        if needed <= self.capacity:
            return
        ops, k, t = self.ops, self.ops.kernel, self.ops.threads
        self.capacity, self.mask = needed, needed - 1
        self.keys, self.vals = ops.full(needed, EMPTY), ops.full(needed, np.iinfo(np.int64).max)
        for n, cap in enumerate(nodes.caps):
            if cap:
                _insert_known[_blocks(int(cap), t), t, self.stream](
                    k(nodes.buffer), int(nodes.start[n]), k(counts), n, int(type_offset[n]), k(self.keys),
                    k(self.vals), self.mask)


@dataclass
class _Batch:
    """What every hop of one batch reads: the back end and stream, the layout, the graph's kernel views and the
    layout's (``col_offset`` ... ``type_size``), and the batch's device counts, nodes, table and status."""

    ops: Workspace
    stream: object
    layout: object
    exact: bool
    indptr: object
    indices: object
    weights: object
    edge_perm: object
    permuted: bool
    replace: bool
    weighted: bool
    col_offset: object
    edge_offset: object
    et_src: object
    et_dst: object
    type_offset: object
    type_size: object
    counts: object
    nodes: _Regions
    table: _Table
    status: object

    @property
    def typed(self) -> bool:
        return len(self.layout.type_size) > 1

    @property
    def graph_edges(self) -> int:
        return self.indices.shape[0]


def sample_arrays(ops, indptr, indices, weights, seeds, layout, keys, replace, weighted,
                  sources=("CSCGraph.indptr", "CSCGraph.indices"), *, edge_perm=None, new_only: bool = False,
                  seed_type: int = 0, max_degree=None, workspace: Workspace | None = None):
    """The hop loop over any array back end (``ops``); graph arrays already in kernel form.

    ``layout``: the sampler's :class:`~sparsetrain.sampling.layout.KernelLayout` (types, fanouts per hop and edge
    type); ``keys[h]``: hop ``h``'s key per edge type (``layout.hop_keys``); ``seeds``: ids of node type
    ``seed_type``. ``edge_perm`` (CSC position -> edge id; ``None`` = the position within its edge type) and
    ``new_only`` (sample each hop only for the nodes first reached at the hop before) are the graph's ``edge_perm``
    and :class:`~sparsetrain.sampling.NeighborSampler`'s ``hop_nodes="new"``. ``max_degree``: per edge type, the
    largest in-degree (:func:`max_degrees`; needed for fanouts of -1). Returns ``(layers, nodes)``: per hop, innermost
    first, ``(edge_index [2, E], edge_ids [E], segments, before, after)`` (``segments``: ``(edge type, first edge, end
    edge)`` of each edge type sampled at the hop; ``before`` / ``after``: the nodes per type before and after it, host
    arrays) and the nodes per type.

    The counts stay on the device: arrays are sized by host bounds from the fanouts (:class:`_Bounds`), kernels read
    the true sizes from device memory, and the counts come back in one read at the end, with the damage and seed
    checks. Seeds outside their type, repeated seeds and a damaged graph (a column's ``indptr`` range outside the
    edges, an ``indices`` entry that is not a node of its type) raise
    :class:`~sparsetrain.sampling.errors.SamplingError`, naming ``sources`` (where ``indptr`` and ``indices`` come
    from) or the edge type. ``workspace``: a :class:`Workspace` over ``ops`` kept from batch to batch (default: one for
    this batch).
    """
    if max_degree is None and (layout.fanouts < 0).any():
        max_degree = max_degrees(indptr if isinstance(indptr, np.ndarray) else indptr.copy_to_host(), layout)
    ops = (workspace or Workspace(ops)).begin()
    try:
        return _sample(ops, indptr, indices, weights, seeds, layout, keys, replace, weighted, sources, edge_perm,
                       new_only, seed_type, max_degree)
    finally:
        ops.end()


def _sample(ops, indptr, indices, weights, seeds, layout, keys, replace, weighted, sources, edge_perm, new_only,
            seed_type, max_degree):
    k, stream = ops.kernel, ops.stream()
    num_types = len(layout.type_size)
    num_hops = layout.fanouts.shape[0]
    const = ops.upload(np.concatenate([layout.col_offset, layout.edge_offset, layout.et_src, layout.et_dst,
                                       layout.type_offset, layout.type_size]))
    layout_views = [k(part) for part in ops.split(const, [len(layout.edge_types)] * 4 + [num_types + 1, num_types])]
    permuted = edge_perm is not None
    edge_perm = k(ops.full(1, 0)) if edge_perm is None else edge_perm  # never read then; one entry: a view exists
    status = ops.full(2, 0)  # 1 + the last column with a damaged indptr range, 1 + the last damaged entry of indices
    checks = [status, ops.seed_check(seeds, int(layout.type_size[seed_type]))]

    # the whole batch's bounds first: the node regions and the table are sized once, unless the bounds are too large
    # to allocate (then every hop reads its counts, and both grow as needed)
    plan = _Bounds(layout, len(seeds), seed_type, new_only, max_degree)
    planned_edges = 0
    for hop in range(num_hops):
        seg_et, _, edges = plan.hop(hop)
        planned_edges += sum(edges)
        plan.advance(seg_et, edges)
    exact = planned_edges > EXACT_ABOVE
    seeds_only = np.zeros(num_types, np.int64)
    seeds_only[seed_type] = len(seeds)
    nodes = _Regions(ops, seeds_only if exact else plan.counts)
    nodes.of(seed_type, len(seeds))[:] = seeds
    counts, first = ops.full(num_types, 0), ops.full(num_types, 0)
    counts[seed_type] = len(seeds)
    table = _Table(ops, stream)
    if not exact:
        table.reserve(int(plan.counts.sum()), nodes, counts, layout.type_offset)
    batch = _Batch(ops, stream, layout, exact, indptr, indices, weights, edge_perm, permuted, replace, weighted,
                   *layout_views, counts, nodes, table, status)
    bounds = _Bounds(layout, len(seeds), seed_type, new_only, max_degree)
    layers = []
    for hop in range(num_hops):
        if exact:
            now = np.array(ops.read(ops.cat([counts, first])))
            bounds.exact(now[:num_types], now[num_types:])
        before = ops.copy(counts)
        seg_et, work, edges = bounds.hop(hop)
        if not seg_et:  # nothing to sample at this hop
            layers.append(([], None, None, None, before))
        else:
            layers.append(_hop(batch, hop, keys[hop], seg_et, sum(work), sum(edges), bounds.counts, first))
        bounds.advance(seg_et, edges)
        if new_only:
            first = before
    return _finish(ops, layout, sources, indptr, indices, batch.graph_edges, seed_type, len(seeds), checks, layers,
                   nodes)


def _hop(b: _Batch, hop: int, hop_keys, seg_et: list[int], num_work: int, edge_bound: int, counts_now, first):
    """One hop's kernels, queued without a host wait (unless ``b.exact``); returns its record for :func:`_finish`.

    ``num_work`` / ``edge_bound``: host bounds of its work items and edges (``counts_now``: of the nodes per type);
    ``first``: per type, the first node the hop samples for (device)."""
    ops, stream, layout, nodes, table, counts = b.ops, b.stream, b.layout, b.nodes, b.table, b.counts
    t, k = ops.threads, ops.kernel
    fan = layout.fanouts[hop]
    hop_host = ops.upload(np.concatenate([seg_et, layout.et_dst[seg_et], fan[seg_et], fan, hop_keys.view(np.int64)]))
    seg_et_d, seg_dst_type, seg_fan, fan_d, keys_d = ops.split(hop_host, [len(seg_et)] * 3 + [len(fan)] * 2)
    seg_start, seg_dst = ops.empty(len(seg_et) + 1), ops.empty(len(seg_et))
    cols, lo, deg, per_item = (ops.empty(num_work) for _ in range(4))
    grid = _blocks(num_work, t)
    _count_kernel[grid, t, stream](b.indptr, b.weights, k(nodes.buffer), k(nodes.offsets), k(counts), k(first),
                                   k(seg_dst_type), k(seg_et_d), b.et_dst, b.col_offset, k(seg_fan), b.replace,
                                   b.weighted, b.graph_edges, k(seg_start), k(seg_dst), k(cols), k(lo), k(deg),
                                   k(per_item), k(b.status))
    ends = ops.cumsum(per_item)
    if b.exact:  # sized by the true count
        edge_bound = ops.read(ends[-1:])[0]
        nodes.reserve(counts_now + np.minimum(edge_bound, layout.type_size))
        table.reserve(int(counts_now.sum()) + edge_bound, nodes, counts, layout.type_offset)
    size = max(edge_bound, 1)  # (a hop drawing nothing still hands the kernels one-entry arrays)
    src, dst, edge_ids, slots = (ops.empty(size) for _ in range(4))
    src_type = ops.empty(size if b.typed else 1)
    _sample_kernel[grid, t, stream](
        b.indices, b.weights, b.edge_perm, b.permuted, k(cols), k(seg_start), k(seg_et_d), k(seg_dst), k(fan_d),
        k(ops.as_uint64(keys_d)), b.col_offset, b.edge_offset, b.et_src, b.et_dst, b.type_offset, b.type_size, k(lo),
        k(deg), k(ends), b.replace, b.weighted, k(table.keys), k(table.vals), table.mask, b.typed, k(src), k(dst),
        k(edge_ids), k(slots), k(src_type), k(b.status),
    )
    flags = ops.empty((len(layout.type_size), size))
    edge_grid = _blocks(size, t)
    _first_kernel[edge_grid, t, stream](k(slots), k(table.vals), k(ends), b.typed, k(src_type), k(flags))
    ranks = ops.cumsum(flags, 1)
    _number_kernel[edge_grid, t, stream](k(slots), k(table.keys), k(table.vals), k(ends), b.typed, k(src_type),
                                         k(ranks), k(counts), k(nodes.offsets), b.type_offset, k(nodes.buffer))
    counts += ranks[:, -1]
    _relabel_kernel[edge_grid, t, stream](k(slots), k(table.vals), k(ends), k(src))
    seg_edges = ops.cat([ops.full(1, 0), ends])[seg_start]  # where each segment's edges start, and the last end
    return seg_et, seg_edges, (src, dst), edge_ids, ops.copy(counts)


def _finish(ops, layout, sources, indptr, indices, graph_edges: int, seed_type: int, num_seeds: int, checks, layers,
            nodes: _Regions):
    """The batch's one read: the checks and every hop's counts; then the layers and nodes cut to their sizes."""
    num_types = len(layout.type_size)
    parts = list(checks)
    for seg_et, seg_edges, *_, after in layers:
        parts += [after] if seg_edges is None else [seg_edges, after]
    values = ops.read(ops.cat(parts))
    bad_column, bad_entry, outside, repeated, repeated_seed = values[:5]
    if outside:
        raise layout.seeds_outside(seed_type)
    if repeated:
        raise layout.seed_repeated(repeated_seed)
    if bad_column:
        raise _bad_range(layout, sources, indptr, graph_edges, bad_column - 1)
    if bad_entry:
        raise _bad_entry(layout, sources, indices, bad_entry - 1)
    pos = 5
    before = np.zeros(num_types, np.int64)
    before[seed_type] = num_seeds
    out = []
    for seg_et, seg_edges, pair, edge_ids, _ in layers:
        edge_bounds = [] if seg_edges is None else values[pos: pos + len(seg_et) + 1]
        pos += len(edge_bounds)
        after = np.array(values[pos: pos + num_types], np.int64)
        pos += num_types
        if pair is None:
            edge_index, ids = ops.empty((2, 0)), ops.empty(0)
        else:
            m = edge_bounds[-1]
            edge_index, ids = ops.stack(pair[0][:m], pair[1][:m]), ops.clone(edge_ids[:m])  # out of the workspace
        segments = [(e_type, edge_bounds[i], edge_bounds[i + 1]) for i, e_type in enumerate(seg_et)]
        out.append((edge_index, ids, segments, before, after))
        before = after
    return out, [ops.clone(nodes.of(n, int(before[n]))) for n in range(num_types)]


def _bad_range(layout, sources, indptr, graph_edges: int, column: int) -> SamplingError:
    if not layout.typed:
        return SamplingError(f"{sources[0]}: node {column}'s in-edges are entries {int(indptr[column])} to "
                             f"{int(indptr[column + 1])} of indices, which has {graph_edges}; {DAMAGED}")
    e_type = int(np.searchsorted(layout.col_offset, column, side="right")) - 1
    node = column - int(layout.col_offset[e_type])
    return SamplingError(f"edge type {layout.edge_types[e_type]}: the in-edges of node {node} lie outside its edge "
                         f"list; {DAMAGED}")


def _bad_entry(layout, sources, indices, position: int) -> SamplingError:
    if not layout.typed:
        return SamplingError(f"{sources[1]}: entry {position} is {int(indices[position])}, which must be in "
                             f"[0, {int(layout.type_size[0])}); {DAMAGED}")
    e_type = int(np.searchsorted(layout.edge_offset, position, side="right")) - 1
    et = layout.edge_types[e_type]
    entry = position - int(layout.edge_offset[e_type])
    return SamplingError(f"edge type {et}: CSC entry {entry} is not a {et[0]!r} node id; {DAMAGED}")
