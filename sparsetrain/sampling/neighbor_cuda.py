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
so they are ordered with the torch ops around them (allocations, scans); the only
host syncs are the explicit reads of each hop's edge and new-node counts (and, on a
typed graph, of where each edge type's edges start).

The graph may be in device memory or page-locked host memory (read zero-copy
over PCIe). Arrays cross from PyTorch by ``__cuda_array_interface__``, never by
copies. Under ``NUMBA_ENABLE_CUDASIM=1`` the same kernels run on NumPy arrays
(:class:`NumpyArrays`), which is how the tests check them without a GPU.
"""

from __future__ import annotations

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
    """Find or claim ``node``'s slot (linear probing, CAS on the key), lower its value to ``value``; returns the slot."""
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
def _insert_known(nodes, num_nodes, key_base, table_keys, table_vals, mask):
    """Node ``i`` of one type (map key ``key_base + nodes[i]``) keeps its local id ``i``."""
    i = cuda.grid(1)
    if i < num_nodes:
        _insert(table_keys, table_vals, mask, key_base + nodes[i], np.int64(i))


@cuda.jit
def _count_kernel(indptr, weights, cols, num_work, seg_start, seg_fanout, replace, weighted, num_edges, lo, deg, counts,
                  status):
    """Per work item (a column): its edge range and count; a column whose range is outside the edges gets none and is
    noted in ``status[0]`` (column + 1)."""
    i = cuda.grid(1)
    if i < num_work:
        fanout = seg_fanout[_segment_of(seg_start, i)]
        c = _count_node(indptr, weights, cols, i, fanout, replace, weighted, num_edges, lo, deg)
        if c < 0:
            cuda.atomic.max(status, 0, cols[i] + 1)
            c = 0
        counts[i] = c


@cuda.jit
def _sample_kernel(indices, weights, edge_perm, permuted, cols, num_work, seg_start, seg_et, seg_dst, fanouts, keys,
                   col_offset, edge_offset, et_src, et_dst, type_offset, type_size, lo, deg, ends, replace, weighted,
                   table_keys, table_vals, mask, src, dst, edge_ids, slots, status):
    """Draw item i's in-edges into src[start:end] (positions), then read each source and insert it into the map.

    Item ``i`` is column ``cols[i]`` of segment ``s`` (edge type ``seg_et[s]``; its dst has local id ``seg_dst[s] + i -
    seg_start[s]``); a source's map key is its type's ``type_offset`` + its id. ``edge_ids[e]`` is ``edge_perm`` at the
    edge's CSC position when ``permuted``, else that position counted from its edge type's first edge. A source that is
    not a node of its type is noted in ``status[1]`` (its entry of ``indices`` + 1) and replaced by the dst node itself,
    already in the map: the batch stays memory-safe until the host sees ``status`` and raises.
    """
    i = cuda.grid(1)
    if i < num_work:
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


@cuda.jit
def _first_kernel(slots, table_vals, num_edges, flags):
    e = cuda.grid(1)
    if e < num_edges:
        flags[e] = 1 if table_vals[slots[e]] == OFFSET + e else 0


@cuda.jit
def _number_kernel(slots, table_keys, table_vals, num_edges, ranks, base, key_base, out_nodes):
    """First occurrences (inclusive rank steps up at e) take local id base + rank - 1; ``out_nodes`` gets their ids."""
    e = cuda.grid(1)
    if e < num_edges:
        before = ranks[e - 1] if e > 0 else 0
        if ranks[e] != before:
            local = base + before
            table_vals[slots[e]] = local
            out_nodes[local] = table_keys[slots[e]] - key_base


@cuda.jit
def _relabel_kernel(slots, table_vals, num_edges, src):
    e = cuda.grid(1)
    if e < num_edges:
        src[e] = table_vals[slots[e]]


# ---- array back ends: PyTorch CUDA tensors on a GPU, NumPy arrays under the simulator ----
class TorchArrays:
    """Allocations and scans as PyTorch CUDA tensors; kernels see them through ``__cuda_array_interface__``."""

    threads = 256

    def __init__(self, device) -> None:
        import torch

        self.torch = torch
        self.device = device
        self._dtypes = {np.int64: torch.int64, np.int32: torch.int32, np.float32: torch.float32,
                        np.uint64: torch.uint64}

    def empty(self, n: int, dtype=np.int64):
        return self.torch.empty(n, dtype=self._dtypes[dtype], device=self.device)

    def full(self, n: int, value: int, dtype=np.int64):
        return self.torch.full((n,), value, dtype=self._dtypes[dtype], device=self.device)

    def cumsum(self, a):
        return self.torch.cumsum(a, 0)

    def last(self, a) -> int:
        return int(a[-1].item()) if a.numel() else 0

    def kernel(self, a):
        # sync=False: the kernels run on the stream that produced ``a``, so no host wait is needed
        return cuda.as_cuda_array(a, sync=False) if a.device.type == "cuda" else _host_mapped(a)

    def stream(self):
        """Numba's handle on PyTorch's current stream of this device."""
        return cuda.external_stream(self.torch.cuda.current_stream(self.device).cuda_stream)

    def array(self, values, dtype=np.int64):
        """A host array's values on the device."""
        return self.torch.as_tensor(np.asarray(values, dtype), device=self.device)

    def cat(self, parts):
        return self.torch.cat(parts)

    def take(self, a, positions) -> list[int]:
        """``a`` at ``positions`` (host ints), read back to the host in one copy."""
        return a[self.torch.as_tensor(positions, device=a.device)].tolist() if len(positions) else []

    def stack(self, a, b):
        return self.torch.stack([a, b])

    def copy_into(self, dst, src, n: int):
        dst[:n] = src[:n]


class NumpyArrays(TorchArrays):
    """The same operations on NumPy arrays, for the CUDA simulator."""

    threads = 32

    def __init__(self) -> None:
        pass

    def empty(self, n: int, dtype=np.int64):
        return np.empty(n, dtype)

    def full(self, n: int, value: int, dtype=np.int64):
        return np.full(n, value, dtype)

    def cumsum(self, a):
        return np.cumsum(a)

    def last(self, a) -> int:
        return int(a[-1]) if a.size else 0

    def kernel(self, a):
        return a

    def stream(self):
        return 0  # the simulator runs kernels in order on the host

    def array(self, values, dtype=np.int64):
        return np.asarray(values, dtype)

    def cat(self, parts):
        return np.concatenate(parts)

    def take(self, a, positions) -> list[int]:
        return a[np.asarray(positions, np.int64)].tolist()

    def stack(self, a, b):
        return np.stack([a, b])


def _host_mapped(tensor):
    """A device view of a page-locked host tensor (unified addressing: the host pointer is valid on the device)."""
    if not tensor.is_pinned():
        raise SamplingBackendError("GPU sampling reads the graph from device memory or pinned host memory; call graph.to('cuda') or graph.pin_memory()")

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


class CudaGraph:
    """The sampler's device views of a CSCGraph (device memory or pinned host memory)."""

    def __init__(self, graph) -> None:
        if not cuda.is_available():
            raise SamplingBackendError("GPU sampling needs a CUDA device visible to numba.cuda; sample on the CPU (keep the graph and seeds on the host)")
        device = graph.device if graph.device.type == "cuda" else None
        self.ops = TorchArrays(device or "cuda")
        self.sources = (graph.source("indptr"), graph.source("indices"))
        self.indptr = self.ops.kernel(graph.indptr)
        self.indices = self.ops.kernel(graph.indices)
        self.weights = self.ops.kernel(graph.weights if graph.weights is not None else self.ops.empty(1, np.float32))
        self.edge_perm = None if graph.edge_perm is None else self.ops.kernel(graph.edge_perm)


def sample_layers(graph: CudaGraph, seeds, layout, keys, replace: bool, weighted: bool, new_only: bool = False,
                  seed_type: int = 0):
    """All hops on the GPU; :func:`sample_arrays`' result as CUDA tensors."""
    with graph.ops.torch.cuda.device(graph.ops.device):
        return sample_arrays(graph.ops, graph.indptr, graph.indices, graph.weights, seeds, layout, keys, replace,
                             weighted, graph.sources, edge_perm=graph.edge_perm, new_only=new_only, seed_type=seed_type)


def sample_arrays(ops, indptr, indices, weights, seeds, layout, keys, replace, weighted,
                  sources=("CSCGraph.indptr", "CSCGraph.indices"), *, edge_perm=None, new_only: bool = False,
                  seed_type: int = 0):
    """The hop loop over any array back end (``ops``); graph arrays already in kernel form.

    ``layout``: the sampler's :class:`~sparsetrain.sampling.layout.KernelLayout` (types, fanouts per hop and edge
    type); ``keys[h]``: hop ``h``'s key per edge type (``layout.hop_keys``); ``seeds``: ids of node type
    ``seed_type``. ``edge_perm`` (CSC position -> edge id; ``None`` = the position within its edge type) and
    ``new_only`` (sample each hop only for the nodes first reached at the hop before) are the graph's ``edge_perm``
    and :class:`~sparsetrain.sampling.NeighborSampler`'s ``hop_nodes="new"``. Returns ``(layers, nodes)``: per hop,
    innermost first, ``(edge_index [2, E], edge_ids [E], segments, before, after)`` (``segments``: ``(edge type,
    first edge, end edge)`` of each edge type sampled at the hop; ``before`` / ``after``: the nodes per type before
    and after it, host arrays) and the nodes per type. A damaged graph (a column's ``indptr`` range outside the edges,
    an ``indices`` entry that is not a node of its type) raises :class:`~sparsetrain.sampling.errors.SamplingError`
    naming ``sources`` (where ``indptr`` and ``indices`` come from) or the edge type.
    """
    t = ops.threads
    k = ops.kernel
    stream = ops.stream()
    num_types = len(layout.type_size)
    counts = np.zeros(num_types, np.int64)
    first = np.zeros(num_types, np.int64)  # per node type, the first node the next hop samples for
    nodes = [ops.empty(0) for _ in range(num_types)]
    nodes[seed_type] = ops.empty(len(seeds))
    ops.copy_into(nodes[seed_type], seeds, len(seeds))
    counts[seed_type] = len(seeds)
    col_offset, edge_offset, et_src, et_dst, type_offset, type_size = (
        ops.array(a) for a in (layout.col_offset, layout.edge_offset, layout.et_src, layout.et_dst, layout.type_offset,
                               layout.type_size))
    capacity = 0
    table_keys = table_vals = None
    layers = []
    status = ops.full(2, 0)  # 1 + the last column with a damaged indptr range, 1 + the last damaged entry of indices
    graph_edges = indices.shape[0]
    permuted = edge_perm is not None
    edge_perm = k(ops.empty(1)) if edge_perm is None else edge_perm  # never read then; one entry: the view is not empty
    for hop in range(layout.fanouts.shape[0]):
        before = counts.copy()
        fan = layout.fanouts[hop]
        seg_et, seg_start, seg_dst = layout.segments(hop, counts, first)
        cols = layout.columns(nodes, (seg_et, seg_start, seg_dst), ops.cat, ops.empty(0))
        work = seg_start[-1]
        # (a hop with no work still hands the kernels one-entry arrays: a device view of nothing is not made)
        seg = [ops.array(a) for a in (seg_et or [0], seg_start, seg_dst or [0], fan[seg_et] if seg_et else [0])]
        lo, deg, per_item = ops.empty(work), ops.empty(work), ops.empty(work)
        _count_kernel[_blocks(work, t), t, stream](indptr, weights, k(cols), work, k(seg[1]), k(seg[3]), replace,
                                                   weighted, graph_edges, k(lo), k(deg), k(per_item), k(status))
        ends = ops.cumsum(per_item)
        num_edges = ops.last(ends)
        total = int(counts.sum())
        needed = _capacity(total + num_edges)
        if needed > capacity:  # grow: a fresh table holding every node so far
            capacity = needed
            table_keys, table_vals = ops.full(capacity, EMPTY), ops.full(capacity, np.iinfo(np.int64).max)
            for n_type in range(num_types):
                if counts[n_type]:
                    _insert_known[_blocks(int(counts[n_type]), t), t, stream](
                        k(nodes[n_type]), int(counts[n_type]), int(layout.type_offset[n_type]), k(table_keys),
                        k(table_vals), capacity - 1)
        src, dst, edge_ids, slots = (ops.empty(num_edges) for _ in range(4))
        _sample_kernel[_blocks(work, t), t, stream](
            indices, weights, edge_perm, permuted, k(cols), work, k(seg[1]), k(seg[0]), k(seg[2]), k(ops.array(fan)),
            k(ops.array(keys[hop], np.uint64)), k(col_offset), k(edge_offset), k(et_src), k(et_dst), k(type_offset),
            k(type_size), k(lo), k(deg), k(ends), replace, weighted, k(table_keys), k(table_vals), capacity - 1, k(src),
            k(dst), k(edge_ids), k(slots), k(status),
        )
        flags = ops.empty(num_edges)
        _first_kernel[_blocks(num_edges, t), t, stream](k(slots), k(table_vals), num_edges, k(flags))
        bounds = [0, *ops.take(ends, [b - 1 for b in seg_start[1:]])] if len(seg_et) > 1 else [0, num_edges]
        segments = [(e_type, bounds[i], bounds[i + 1]) for i, e_type in enumerate(seg_et)]
        for n_type in range(num_types):
            mine = [(a, b) for e_type, a, b in segments if layout.et_src[e_type] == n_type]
            if num_types == 1:
                mine = [(0, num_edges)]
            if not mine:
                continue
            type_flags = flags
            if num_types > 1:  # first occurrences of this type's nodes only: its local ids count apart
                type_flags = ops.full(num_edges, 0)
                for a, b in mine:
                    type_flags[a:b] = flags[a:b]
            ranks = ops.cumsum(type_flags)
            num_new = ops.last(ranks)
            grown = ops.empty(int(counts[n_type]) + num_new)
            ops.copy_into(grown, nodes[n_type], int(counts[n_type]))
            _number_kernel[_blocks(num_edges, t), t, stream](k(slots), k(table_keys), k(table_vals), num_edges,
                                                             k(ranks), int(counts[n_type]),
                                                             int(layout.type_offset[n_type]), k(grown))
            nodes[n_type] = grown
            counts[n_type] += num_new
        _relabel_kernel[_blocks(num_edges, t), t, stream](k(slots), k(table_vals), num_edges, k(src))
        layers.append((ops.stack(src, dst), edge_ids, segments, before, counts.copy()))
        if new_only:
            first = before
    bad_column, bad_entry = status.tolist()
    if bad_column:
        raise _bad_range(layout, sources, indptr, graph_edges, bad_column - 1)
    if bad_entry:
        raise _bad_entry(layout, sources, indices, bad_entry - 1)
    return layers, nodes


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
