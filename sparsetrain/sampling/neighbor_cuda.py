"""GPU kernels of the fused multi-hop neighbor sampler (``numba.cuda``).

One thread per dst node draws its in-edges and inserts every sampled source
straight into one open-addressing hash table (global id -> local id) with
``atomicCAS`` on the key, FastGL's
Fused-Map: sampling, dedupe and relabel share the probe. Ids are made
deterministic without a second map: each inserted key keeps the smallest edge
position that carried it (``atomicMin`` on ``OFFSET + e``); a flag + scan pass
numbers the first occurrences in edge order, so new nodes get the same local ids
as on the CPU, whatever the launch shape. Nodes of earlier hops sit in the same
table with their final ids (< OFFSET), which ``atomicMin`` never overwrites.

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
host syncs are the explicit reads of each hop's edge and new-node counts.

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
    [rng.mix64, rng.uniform, rng.below, rng.node_stream, draw.edge_count, draw.count_node, draw.es_key, draw.draw_positions], cuda.jit(device=True)
)
_mix64 = _device["mix64"]
_node_stream = _device["node_stream"]
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
def _insert_known(nodes, num_nodes, table_keys, table_vals, mask):
    i = cuda.grid(1)
    if i < num_nodes:
        _insert(table_keys, table_vals, mask, nodes[i], np.int64(i))


@cuda.jit
def _count_kernel(indptr, weights, nodes, num_dst, fanout, replace, weighted, num_edges, lo, deg, counts, status):
    """Per dst node: its edge range and count; a node whose range is outside the edges gets none and is noted in ``status[0]``."""
    i = cuda.grid(1)
    if i < num_dst:
        c = _count_node(indptr, weights, nodes, i, fanout, replace, weighted, num_edges, lo, deg)
        if c < 0:
            cuda.atomic.max(status, 0, nodes[i] + 1)
            c = 0
        counts[i] = c


@cuda.jit
def _sample_kernel(indices, weights, edge_perm, permuted, nodes, first, num_dst, num_nodes, lo, deg, ends, fanout, replace, weighted, key, table_keys,
                   table_vals, mask, src, dst, edge_ids, slots, status):
    """Draw node first + i's in-edges into src[start:end] (positions), then read each source and insert it into the map.

    ``nodes`` here starts at the first node the hop samples for; ``num_dst`` counts those nodes. ``edge_ids[e]``
    is the edge's CSC position, or ``edge_perm`` there when ``permuted``. A source that is not a node id is noted in ``status[1]`` (its entry of ``indices`` + 1) and replaced by the dst
    node itself, already in the map: the batch stays memory-safe until the host sees ``status`` and raises.
    """
    i = cuda.grid(1)
    if i < num_dst:
        start = ends[i - 1] if i > 0 else np.int64(0)
        k = ends[i] - start
        if k > 0:
            v = nodes[i]
            a = lo[i]
            stream = _node_stream(key, v)
            _draw_positions(weights, a, deg[i], k, fanout, replace, weighted, stream, src, start)
            for e in range(start, start + k):
                p = a + src[e]
                edge_ids[e] = edge_perm[p] if permuted else p
                u = np.int64(indices[p])
                if u < 0 or u >= num_nodes:
                    cuda.atomic.max(status, 1, p + 1)
                    u = v
                slots[e] = _insert(table_keys, table_vals, mask, u, OFFSET + e)
                dst[e] = first + i


@cuda.jit
def _first_kernel(slots, table_vals, num_edges, flags):
    e = cuda.grid(1)
    if e < num_edges:
        flags[e] = 1 if table_vals[slots[e]] == OFFSET + e else 0


@cuda.jit
def _number_kernel(slots, table_keys, table_vals, num_edges, ranks, base, out_nodes):
    """First occurrences (inclusive rank steps up at e) take local id base + rank - 1."""
    e = cuda.grid(1)
    if e < num_edges:
        before = ranks[e - 1] if e > 0 else 0
        if ranks[e] != before:
            local = base + before
            table_vals[slots[e]] = local
            out_nodes[local] = table_keys[slots[e]]


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
        self._dtypes = {np.int64: torch.int64, np.int32: torch.int32, np.float32: torch.float32}

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


def sample_layers(graph: CudaGraph, seeds, fanouts, replace: bool, weighted: bool, keys, new_only: bool = False):
    """All hops on the GPU: ``([(edge_index [2, E], num_src, num_dst, edge_ids [E]) innermost first], nodes)`` as CUDA tensors."""
    with graph.ops.torch.cuda.device(graph.ops.device):
        return sample_arrays(graph.ops, graph.indptr, graph.indices, graph.weights, seeds, fanouts, replace, weighted, keys, graph.sources,
                             edge_perm=graph.edge_perm, new_only=new_only)


def sample_arrays(ops, indptr, indices, weights, seeds, fanouts, replace, weighted, keys, sources=("CSCGraph.indptr", "CSCGraph.indices"), *,
                  edge_perm=None, new_only: bool = False):
    """The hop loop over any array back end (``ops``); graph arrays already in kernel form.

    ``edge_perm`` (CSC position -> edge id; ``None`` = the position) and ``new_only`` (sample each hop only for the
    nodes first reached at the hop before) are :class:`~sparsetrain.sampling.NeighborSampler`'s graph ``edge_perm``
    and ``hop_nodes="new"``. A damaged graph (a node's ``indptr`` range outside the edges, an ``indices`` entry that is not a node id) raises
    :class:`~sparsetrain.sampling.errors.SamplingError` naming ``sources`` (where ``indptr`` and ``indices`` come from).
    """
    t = ops.threads
    k = ops.kernel
    stream = ops.stream()
    num_seeds = len(seeds)
    nodes = ops.empty(num_seeds)
    ops.copy_into(nodes, seeds, num_seeds)
    num_nodes = num_seeds
    capacity = 0
    table_keys = table_vals = None
    layers = []
    status = ops.full(2, 0)  # 1 + the last node with a damaged indptr range, 1 + the last damaged entry of indices
    graph_nodes, graph_edges = indptr.shape[0] - 1, indices.shape[0]
    permuted = edge_perm is not None
    edge_perm = k(ops.empty(1)) if edge_perm is None else edge_perm  # never read then; one entry, so the device view is not empty
    first = 0  # the hop samples for nodes[first:num_dst]
    for hop, fanout in enumerate(fanouts):
        num_dst = num_nodes
        count = num_dst - first
        lo, deg, counts = ops.empty(count), ops.empty(count), ops.empty(count)
        _count_kernel[_blocks(count, t), t, stream](indptr, weights, k(nodes[first:]), count, fanout, replace, weighted, graph_edges, k(lo), k(deg),
                                                    k(counts), k(status))
        ends = ops.cumsum(counts)
        num_edges = ops.last(ends)
        needed = _capacity(num_dst + num_edges)
        if needed > capacity:  # grow: a fresh table holding every node so far
            capacity = needed
            table_keys, table_vals = ops.full(capacity, EMPTY), ops.full(capacity, np.iinfo(np.int64).max)
            _insert_known[_blocks(num_dst, t), t, stream](k(nodes), num_dst, k(table_keys), k(table_vals), capacity - 1)
        src, dst, edge_ids, slots = ops.empty(num_edges), ops.empty(num_edges), ops.empty(num_edges), ops.empty(num_edges)
        _sample_kernel[_blocks(count, t), t, stream](
            indices, weights, edge_perm, permuted, k(nodes[first:]), first, count, graph_nodes, k(lo), k(deg), k(ends), fanout, replace, weighted,
            np.uint64(keys[hop]), k(table_keys), k(table_vals), capacity - 1, k(src), k(dst), k(edge_ids), k(slots), k(status),
        )
        flags = ops.empty(num_edges)
        _first_kernel[_blocks(num_edges, t), t, stream](k(slots), k(table_vals), num_edges, k(flags))
        ranks = ops.cumsum(flags)
        num_new = ops.last(ranks)
        grown = ops.empty(num_dst + num_new)
        ops.copy_into(grown, nodes, num_dst)
        _number_kernel[_blocks(num_edges, t), t, stream](k(slots), k(table_keys), k(table_vals), num_edges, k(ranks), num_dst, k(grown))
        _relabel_kernel[_blocks(num_edges, t), t, stream](k(slots), k(table_vals), num_edges, k(src))
        nodes = grown
        num_nodes = num_dst + num_new
        layers.append((ops.stack(src, dst), num_nodes, num_dst, edge_ids))
        if new_only:
            first = num_dst
    bad_node, bad_entry = status.tolist()
    if bad_node:
        node = bad_node - 1
        raise SamplingError(f"{sources[0]}: node {node}'s in-edges are entries {int(indptr[node])} to {int(indptr[node + 1])} of indices, "
                            f"which has {graph_edges}; {DAMAGED}")
    if bad_entry:
        raise SamplingError(f"{sources[1]}: entry {bad_entry - 1} is {int(indices[bad_entry - 1])}, which must be in [0, {graph_nodes}); {DAMAGED}")
    return layers, nodes
