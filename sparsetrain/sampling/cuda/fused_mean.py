"""The fused last hop on the GPU: :mod:`sparsetrain.sampling.fused_draw`'s draws and mean, compiled as device
functions (:func:`sparsetrain.sampling.retarget.retarget`), so both targets draw and average the same edges.

Two launches (:func:`queue_mean`): one thread per output row draws its node's sources into a scratch row of
``draw_slots`` (a fanout of -1 reads ``indices`` in place), then one thread per (row, feature column) averages,
consecutive threads over consecutive columns so the feature rows are read coalesced. The rows that draw, the hop's key
and the damage check live in device memory, never in a launch's arguments, so the same launches serve a batch as it
comes (:func:`fused_mean_arrays`: one host read, the damage check) and a padded batch (:class:`PaddedHop`: queued by
the driver after the batch's hops, its rows bounded by the last level's count on the device, its check in the batch's
record, raised late; captured with the hops when the batch is).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsetrain._numba_cuda import cuda
from sparsetrain.sampling import draw, fused_draw, rng
from sparsetrain.sampling.cuda.arrays import TorchArrays
from sparsetrain.sampling.cuda.padded import address
from sparsetrain.sampling.cuda.workspace import DeviceWorkspace
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
def draw_kernel(indptr, indices, weights, nodes, offset, bounds, lo_at, hi_at, keys, fanout, slots, replace, weighted,
                num_nodes, scratch, start, count, status, bad_at):
    """Row ``r`` in ``[bounds[lo_at], bounds[hi_at])`` (``lo_at`` < 0: from row 0) draws the sources of node
    ``nodes[r - offset]`` with hop key ``keys[0]``: ``(start[r], count[r])`` into ``scratch`` (``indices`` for a fanout
    of -1); other rows draw none. A node whose in-edges lie outside the graph draws none and raises ``status[bad_at]``
    to its id + 1."""
    r = cuda.grid(1)
    if r < count.shape[0]:
        s = np.int64(0)
        k = np.int64(0)
        lo = bounds[lo_at] if lo_at >= 0 else np.int64(0)
        if lo <= r and r < bounds[hi_at]:
            v = nodes[r - offset]
            s, k = _draw_sources(indptr, indices, weights, v, fanout, replace, weighted, keys[0], num_nodes, scratch,
                                 (np.int64(r) - offset) * slots)
            if k < 0:
                cuda.atomic.max(status, bad_at, v + 1)
                k = 0
        start[r] = s
        count[r] = k


@cuda.jit
def mean_kernel(x, sources, start, count, out):
    """``out[r, f]``: the mean over row ``r``'s ``count[r]`` sources of ``x[:, f]`` (zero for none).

    Rows go along the grid's x (up to 2**31 - 1 blocks; its y takes 65535), a block's threads along the columns."""
    f = cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    r = cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y
    if r < out.shape[0] and f < out.shape[1]:
        _mean_columns(x, sources, start[r], count[r], out, r, f, f + 1)


def queue_mean(ws: DeviceWorkspace, indptr, indices, weights, nodes, offset: int, bounds, lo_at: int, hi_at: int, keys,
               fanout: int, slots: int, replace: bool, weighted: bool, num_nodes: int, x, out, status,
               bad_at: int) -> None:
    """Queue the two launches on ``ws`` (see :func:`draw_kernel`): ``out`` (``[rows, F]`` float32) gets each drawing
    row's mean and zeros elsewhere. The graph's arrays in kernel form; the others as ``ws`` keeps them."""
    rows, cols = out.shape
    k = ws.kernel
    scratch = ws.empty(max((rows - offset) * slots, 1))
    start, count = ws.empty(max(rows, 1)), ws.empty(max(rows, 1))
    if not rows:
        return
    ws.launch(draw_kernel, rows, indptr, indices, weights, k(nodes), np.int64(offset), k(bounds), np.int64(lo_at),
              np.int64(hi_at), k(keys), np.int64(fanout), np.int64(slots), replace, weighted, np.int64(num_nodes),
              k(scratch), k(start), k(count), k(status), np.int64(bad_at))
    if cols:
        grid = ((rows + ROWS - 1) // ROWS, (cols + COLUMNS - 1) // COLUMNS)
        ws.launch_grid(mean_kernel, grid, (COLUMNS, ROWS), k(x), indices if fanout < 0 else k(scratch), k(start),
                       k(count), k(out))


def fused_mean_arrays(ops, indptr, indices, weights, nodes, first: int, fanout: int, key: int, replace: bool,
                      weighted: bool, num_nodes: int, x, out) -> int:
    """Fill ``out`` (as :func:`sparsetrain.sampling.fused_mean.fused_mean_cpu` does: ``nodes`` draw into rows
    ``first`` on) over any array back end (``ops``: PyTorch CUDA tensors, or NumPy under the simulator); returns -1 or
    the id of a node whose in-edges lie outside the graph (the largest)."""
    ws = DeviceWorkspace(ops).begin()
    try:
        k = ws.kernel
        meta = ws.empty(4)  # the hop's key, the rows that draw, the damage check
        for i, value in enumerate([np.array([key], np.uint64).view(np.int64)[0], first, first + len(nodes), 0]):
            ws.fill(meta[i: i + 1], int(value))
        queue_mean(ws, k(indptr), k(indices), k(weights), nodes, first, meta, 1, 2, ws.as_uint64(meta), fanout,
                   fused_draw.draw_slots(indptr, fanout, replace), replace, weighted, num_nodes, x, out, meta, 3)
        return ws.read(meta[3:])[0] - 1
    finally:
        ws.end()


def fused_mean_cuda(graph, nodes, first: int, fanout: int, key: int, replace: bool, weighted: bool, x, out) -> int:
    """:func:`fused_mean_arrays` for a graph on ``x``'s GPU (or pinned) and CUDA tensors ``x``, ``out``."""
    ops = TorchArrays(x.device)
    weights = graph.weights if weighted else ops.full(1, 0).float()
    with ops.torch.cuda.device(x.device):
        return fused_mean_arrays(ops, graph.indptr, graph.indices, weights, nodes.to(x.device), first, fanout, key,
                                 replace, weighted, int(graph.num_nodes), x, out)


@dataclass(frozen=True)
class PaddedHop:
    """A fused sampler's last hop in a padded batch (``sample_padded``): the driver queues it after the batch's hops,
    for the last level's nodes (``hop_nodes="new"``: those first reached at the hop before), averaging rows of
    ``features`` into ``PaddedOut.neighbor_mean``. ``keys`` (uint64 ``[1]``): its key, uploaded with the batch's (a
    captured batch's replay rewrites it); ``slots``: ``draw_slots`` of the graph."""

    fanout: int
    slots: int
    keys: np.ndarray
    features: object

    @property
    def key(self) -> tuple:
        """What a batch captured with this hop bakes in."""
        return self.fanout, self.slots, address(self.features)

    def queue(self, ws: DeviceWorkspace, indptr, indices, weights, padded, keys, replace: bool, weighted: bool,
              new_only: bool, num_nodes: int, status, bad_at: int) -> None:
        """:func:`queue_mean` over ``padded``'s last level, its count read from ``padded.sizes`` on the device (the
        driver has filled them); ``keys``: this hop's key on the device."""
        last = padded.num_hops
        lo_at = last - 1 if new_only and last else -1
        queue_mean(ws, indptr, indices, weights, ws.keep(padded.node_ids), 0, ws.keep(padded.sizes), lo_at, last,
                   ws.as_uint64(keys), self.fanout, self.slots, replace, weighted, num_nodes, ws.keep(self.features),
                   ws.keep(padded.neighbor_mean), status, bad_at)
