"""The fused last hop on the GPU: :mod:`sparsetrain.sampling.fused_draw`'s draws and mean, compiled as device
functions (:func:`sparsetrain.sampling.retarget.retarget`), so both targets draw and average the same edges.

Two launches: one thread per destination draws its sources into a scratch row of ``draw_slots`` (a fanout of -1
reads ``indices`` in place), then one thread per (dst row, feature column) averages, consecutive threads over
consecutive columns so the feature rows are read coalesced. One host read: the damage check.
"""

from __future__ import annotations

import numpy as np

from sparsetrain._numba_cuda import cuda
from sparsetrain.sampling import draw, fused_draw, rng
from sparsetrain.sampling.cuda.arrays import TorchArrays
from sparsetrain.sampling.retarget import retarget

_device = retarget(
    [rng.mix64, rng.uniform, rng.below, rng.node_stream, draw.edge_count, draw.es_key, draw.draw_positions,
     fused_draw.draw_sources, fused_draw.mean_columns],
    cuda.jit(device=True),
)
_draw_sources = _device["draw_sources"]
_mean_columns = _device["mean_columns"]
COLUMNS, ROWS = 32, 8  # the mean kernel's thread block: a warp over columns, 8 rows


@cuda.jit
def draw_kernel(indptr, indices, weights, nodes, fanout, slots, key, replace, weighted, num_nodes, scratch, start,
                count, status):
    """Destination ``i``'s sources: ``(start[i], count[i])`` into ``scratch`` (``indices`` for a fanout of -1);
    ``status[0]`` lowered to ``i`` when its in-edges lie outside the graph (it then averages nothing)."""
    i = cuda.grid(1)
    if i < nodes.shape[0]:
        s, k = _draw_sources(indptr, indices, weights, nodes[i], fanout, replace, weighted, key, num_nodes, scratch,
                             np.int64(i) * slots)
        if k < 0:
            cuda.atomic.min(status, 0, np.int64(i))
            k = 0
        start[i] = s
        count[i] = k


@cuda.jit
def mean_kernel(x, sources, start, count, first, out):
    """``out[r, f]``: the mean over destination ``r - first``'s sources of ``x[:, f]``; zeros for ``r < first``.

    Rows go along the grid's x (up to 2**31 - 1 blocks; its y takes 65535), a block's threads along the columns."""
    f = cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    r = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
    if r < out.shape[0] and f < out.shape[1]:
        if r < first:
            out[r, f] = 0.0
        else:
            _mean_columns(x, sources, start[r - first], count[r - first], out, r, f, f + 1)


def fused_mean_arrays(ops, indptr, indices, weights, nodes, first: int, fanout: int, key: int, replace: bool,
                      weighted: bool, num_nodes: int, x, out) -> int:
    """Fill ``out`` (as :func:`sparsetrain.sampling.fused_mean.fused_mean_cpu` does) over any array back end
    (``ops``: PyTorch CUDA tensors, or NumPy under the simulator); returns -1 or the first damaged destination."""
    n = int(nodes.shape[0])
    k = ops.kernel
    slots = fused_draw.draw_slots(indptr, fanout, replace)
    scratch = ops.empty(max(n * slots, 1))
    start, count = ops.empty(max(n, 1)), ops.empty(max(n, 1))
    status = ops.full(1, n)
    stream = ops.stream()
    if n:
        draw_kernel[(n + ops.threads - 1) // ops.threads, ops.threads, stream](
            k(indptr), k(indices), k(weights), k(nodes), np.int64(fanout), np.int64(slots), np.uint64(key), replace,
            weighted, np.int64(num_nodes), k(scratch), k(start), k(count), k(status))
    rows, cols = out.shape
    if rows and cols:
        grid = ((rows + ROWS - 1) // ROWS, (cols + COLUMNS - 1) // COLUMNS)
        sources = indices if fanout < 0 else scratch
        mean_kernel[grid, (COLUMNS, ROWS), stream](k(x), k(sources), k(start), k(count), np.int64(first), k(out))
    bad = ops.read(status)[0]
    return -1 if bad == n else bad


def fused_mean_cuda(graph, nodes, first: int, fanout: int, key: int, replace: bool, weighted: bool, x, out) -> int:
    """:func:`fused_mean_arrays` for a graph on ``x``'s GPU (or pinned) and CUDA tensors ``x``, ``out``."""
    ops = TorchArrays(x.device)
    weights = graph.weights if weighted else ops.full(1, 0).float()
    with ops.torch.cuda.device(x.device):
        return fused_mean_arrays(ops, graph.indptr, graph.indices, weights, nodes.to(x.device), first, fanout, key,
                                 replace, weighted, int(graph.num_nodes), x, out)
