"""The GPU sampler's kernels (``numba.cuda``): one hop's counts, draws, dedupe and relabel.

One thread per work item (a column: a dst node, or an (edge type, dst node) pair) draws its in-edges and inserts every
sampled source straight into one open-addressing hash table (global id -> local id) with ``atomicCAS`` on the key,
FastGL's Fused-Map: sampling, dedupe and relabel share the probe. Ids are made deterministic without a second map: each
inserted key keeps the smallest edge position that carried it (``atomicMin`` on ``OFFSET + e``); a flag + scan pass
numbers the first occurrences in edge order, so new nodes get the same local ids as on the CPU, whatever the launch
shape. Nodes of earlier hops sit in the same table with their final ids (< OFFSET), which ``atomicMin`` never
overwrites. On a typed graph each node type numbers its first occurrences apart (a scan per type).

The RNG and the per-node draws are the CPU kernels' Python source (:mod:`sparsetrain.sampling.rng`,
:mod:`sparsetrain.sampling.draw`) compiled as device functions (:func:`sparsetrain.sampling.retarget.retarget`), so both
targets make the same draws.
"""

from __future__ import annotations

import numpy as np

from sparsetrain._numba_cuda import cuda
from sparsetrain.sampling import draw, rng
from sparsetrain.sampling.retarget import retarget

EMPTY = np.int64(-1)
UNSET = np.int64(np.iinfo(np.int64).max)  # a slot's value before any insert
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
def _claim(table_keys, mask, node):
    """Find or claim ``node``'s slot (linear probing, CAS on the key); returns the slot and whether another thread
    had claimed it."""
    slot = np.int64(_mix64(np.uint64(node)) & np.uint64(mask))
    while True:
        old = cuda.atomic.cas(table_keys, slot, EMPTY, node)
        if old == EMPTY or old == node:
            return slot, old == node
        slot = (slot + 1) & mask


@cuda.jit(device=True)
def _insert(table_keys, table_vals, mask, node, value):
    """``node``'s slot, its value lowered to ``value``."""
    slot, _ = _claim(table_keys, mask, node)
    if table_vals[slot] > value:
        cuda.atomic.min(table_vals, slot, value)
    return slot


@cuda.jit
def clear_kernel(table_keys, table_vals):
    """An empty map: every key ``EMPTY``, every value above any local id or edge position."""
    i = cuda.grid(1)
    if i < table_keys.shape[0]:
        table_keys[i] = EMPTY
        table_vals[i] = UNSET


@cuda.jit
def insert_known(nodes, region, counts, type_offset, type_size, table_keys, table_vals, mask, status):
    """The nodes so far into the map: node ``i < counts[t]`` of type ``t`` (at ``nodes[region[t] + i]``; the type of
    entry ``j`` is the last whose region starts at or before it) keeps local id ``i``, under key ``type_offset[t]`` +
    its id. The seed checks ride along: a node outside ``[0, type_size[t])`` sets ``status[2]``, a node claimed twice
    (a repeated seed: sampled nodes are unique) raises ``status[3]`` to its id + 1."""
    j = cuda.grid(1)
    if j < nodes.shape[0]:
        t = 0
        for n in range(1, region.shape[0]):
            if region[n] <= j:
                t = n
        i = j - region[t]
        if i < counts[t]:
            node = nodes[j]
            if node < 0 or node >= type_size[t]:
                status[2] = 1
            slot, repeated = _claim(table_keys, mask, type_offset[t] + node)
            if repeated:
                cuda.atomic.max(status, 3, node + 1)
            cuda.atomic.min(table_vals, slot, np.int64(i))


@cuda.jit
def count_kernel(indptr, weights, nodes, region, counts, first, seg_dst_type, seg_et, et_dst, col_offset, seg_fanout,
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
def sample_kernel(indices, weights, edge_perm, permuted, cols, seg_start, seg_et, seg_dst, fanouts, keys,
                   col_offset, edge_offset, et_src, et_dst, type_offset, type_size, lo, deg, ends, replace, weighted,
                   table_keys, table_vals, mask, src, dst, edge_ids, slots, src_type, status):
    """Draw item i's in-edges into src[start:end] (positions), then read each source and insert it into the map.

    Item ``i`` is column ``cols[i]`` of segment ``s`` (edge type ``seg_et[s]``; its dst has local id ``seg_dst[s] + i -
    seg_start[s]``); a source's map key is its type's ``type_offset`` + its id, and with several node types its type
    goes to ``src_type[e]`` (one type: all 0, not written). ``edge_ids[e]`` is ``edge_perm`` at the edge's CSC position
    when ``permuted``, else that position counted from its edge type's first edge. A source that is not a node of its
    type is noted in ``status[1]`` (its entry of ``indices`` + 1) and replaced by the dst node itself, already in the
    map: the batch stays memory-safe until the host sees ``status`` and raises. Items whose edges end past the edge
    arrays (sized by a bound that only a damaged ``indptr``, ranges of two columns overlapping, can pass) draw only what
    fits and set ``status[4]``: every edge slot the later kernels read is still written.
    """
    i = cuda.grid(1)
    if i < ends.shape[0]:
        start = ends[i - 1] if i > 0 else np.int64(0)
        k = ends[i] - start
        if k > 0 and ends[i] > src.shape[0]:
            status[4] = 1
            k = src.shape[0] - start  # (<= 0 when the item starts past the arrays)
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
                if type_size.shape[0] > 1:
                    src_type[e] = et_src[et]


@cuda.jit
def first_kernel(slots, table_vals, ends, src_type, flags):
    """``flags[t, e]``: 1 where edge ``e`` carries the first occurrence of a new node of type ``t`` (0: one type)."""
    e = cuda.grid(1)
    if e < flags.shape[1]:
        seen = e < ends[ends.shape[0] - 1]
        first = seen and table_vals[slots[e]] == OFFSET + e
        t = src_type[e] if flags.shape[0] > 1 and seen else 0
        for n in range(flags.shape[0]):
            flags[n, e] = 1 if first and n == t else 0


@cuda.jit
def number_kernel(slots, table_keys, table_vals, ends, src_type, ranks, counts, region, type_offset, nodes):
    """First occurrences (type ``t``'s inclusive rank steps up at e) take local id ``counts[t] + rank - 1`` and are
    appended to type ``t``'s nodes."""
    e = cuda.grid(1)
    if e < ranks.shape[1] and e < ends[ends.shape[0] - 1]:
        t = src_type[e] if ranks.shape[0] > 1 else 0
        before = ranks[t, e - 1] if e > 0 else 0
        if ranks[t, e] != before:
            local = counts[t] + before
            table_vals[slots[e]] = local
            nodes[region[t] + local] = table_keys[slots[e]] - type_offset[t]


@cuda.jit
def relabel_kernel(slots, table_vals, ends, src, dst, src_sink, dst_sink, seg_start, ranks, counts, counts_after,
                   seg_edges):
    """Sources to local ids; when ``src_sink >= 0`` (a padded, homogeneous batch; ``*_sink``: the last row of the
    source and destination levels) the edges past the hop's count are spread over the padding rows of both levels in
    ascending order (:func:`~sparsetrain.sampling.cuda.padded.padding_row`), so the block stays grouped by destination
    and no row takes more than its share; thread 0 keeps the hop's books on the device: ``counts_after`` (the nodes per
    type after the hop) and ``seg_edges`` (where each segment's edges start, then the hop's edge count)."""
    e = cuda.grid(1)
    real = ends[ends.shape[0] - 1]
    if e < src.shape[0] and e < real:
        src[e] = table_vals[slots[e]]
    elif e < src.shape[0] and src_sink >= 0:
        pad, k = src.shape[0] - real, e - real
        dst_first, src_first = counts[0], counts[0] + ranks[0, ranks.shape[1] - 1]
        dst[e] = dst_first + (k * (dst_sink + 1 - dst_first)) // pad
        src[e] = src_first + (k * (src_sink + 1 - src_first)) // pad
    if e == 0:
        for t in range(counts.shape[0]):
            counts_after[t] = counts[t] + ranks[t, ranks.shape[1] - 1]
        for s in range(seg_start.shape[0]):
            seg_edges[s] = ends[seg_start[s] - 1] if seg_start[s] > 0 else 0
