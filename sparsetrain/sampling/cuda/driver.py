"""The GPU sampler's per-hop driver: a batch's hops queued as kernels, the counts kept on the device, one host read.

Kernels run on PyTorch's current CUDA stream (never the legacy default stream), so they are ordered with the torch ops
around them (allocations, scans). The counts stay on the device: arrays are sized by host bounds from the fanouts and
kernels read the true sizes from device memory, so a batch waits for the device once, at the end, to read every hop's
counts with the seed and damage checks. A sampler keeps its arrays and their kernel views from batch to batch
(:class:`~sparsetrain.sampling.cuda.workspace.Workspace`): making a view from Python costs more than most of the
kernels it feeds.
"""

from __future__ import annotations

import numpy as np

from sparsetrain.sampling.cuda.batch import Batch, Bounds, Regions, Table, launch_blocks
from sparsetrain.sampling.cuda.graph import CudaGraph, max_degrees
from sparsetrain.sampling.cuda.kernels import count_kernel, first_kernel, number_kernel, relabel_kernel, sample_kernel
from sparsetrain.sampling.cuda.workspace import Workspace
from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.graph import DAMAGED

EXACT_ABOVE = 1 << 24  # edges: a batch whose bounds pass this reads its counts every hop and sizes arrays exactly


def sample_layers(graph: CudaGraph, seeds, layout, keys, replace: bool, weighted: bool, new_only: bool = False,
                  seed_type: int = 0):
    """All hops on the GPU; :func:`sample_arrays`' result as CUDA tensors."""
    max_degree = graph.max_degree(layout) if (layout.fanouts < 0).any() else None
    with graph.ops.torch.cuda.device(graph.ops.device):
        return sample_arrays(graph.ops, graph.indptr, graph.indices, graph.weights, seeds, layout, keys, replace,
                             weighted, graph.sources, edge_perm=graph.edge_perm, new_only=new_only,
                             seed_type=seed_type, max_degree=max_degree, workspace=graph.workspace())


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

    The counts stay on the device: arrays are sized by host bounds from the fanouts (:class:`Bounds`), kernels read
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
    plan = Bounds(layout, len(seeds), seed_type, new_only, max_degree)
    planned_edges = 0
    for hop in range(num_hops):
        seg_et, _, edges = plan.hop(hop)
        planned_edges += sum(edges)
        plan.advance(seg_et, edges)
    exact = planned_edges > EXACT_ABOVE
    seeds_only = np.zeros(num_types, np.int64)
    seeds_only[seed_type] = len(seeds)
    nodes = Regions(ops, seeds_only if exact else plan.counts)
    nodes.of(seed_type, len(seeds))[:] = seeds
    counts, first = ops.full(num_types, 0), ops.full(num_types, 0)
    counts[seed_type] = len(seeds)
    table = Table(ops, stream)
    if not exact:
        table.reserve(int(plan.counts.sum()), nodes, counts, layout.type_offset)
    batch = Batch(ops, stream, layout, exact, indptr, indices, weights, edge_perm, permuted, replace, weighted,
                   *layout_views, counts, nodes, table, status)
    bounds = Bounds(layout, len(seeds), seed_type, new_only, max_degree)
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


def _hop(b: Batch, hop: int, hop_keys, seg_et: list[int], num_work: int, edge_bound: int, counts_now, first):
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
    grid = launch_blocks(num_work, t)
    count_kernel[grid, t, stream](b.indptr, b.weights, k(nodes.buffer), k(nodes.offsets), k(counts), k(first),
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
    sample_kernel[grid, t, stream](
        b.indices, b.weights, b.edge_perm, b.permuted, k(cols), k(seg_start), k(seg_et_d), k(seg_dst), k(fan_d),
        k(ops.as_uint64(keys_d)), b.col_offset, b.edge_offset, b.et_src, b.et_dst, b.type_offset, b.type_size, k(lo),
        k(deg), k(ends), b.replace, b.weighted, k(table.keys), k(table.vals), table.mask, b.typed, k(src), k(dst),
        k(edge_ids), k(slots), k(src_type), k(b.status),
    )
    flags = ops.empty((len(layout.type_size), size))
    edge_grid = launch_blocks(size, t)
    first_kernel[edge_grid, t, stream](k(slots), k(table.vals), k(ends), b.typed, k(src_type), k(flags))
    ranks = ops.cumsum(flags, 1)
    number_kernel[edge_grid, t, stream](k(slots), k(table.keys), k(table.vals), k(ends), b.typed, k(src_type),
                                         k(ranks), k(counts), k(nodes.offsets), b.type_offset, k(nodes.buffer))
    counts += ranks[:, -1]
    relabel_kernel[edge_grid, t, stream](k(slots), k(table.vals), k(ends), k(src))
    seg_edges = ops.cat([ops.full(1, 0), ends])[seg_start]  # where each segment's edges start, and the last end
    return seg_et, seg_edges, (src, dst), edge_ids, ops.copy(counts)


def _finish(ops, layout, sources, indptr, indices, graph_edges: int, seed_type: int, num_seeds: int, checks, layers,
            nodes: Regions):
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
