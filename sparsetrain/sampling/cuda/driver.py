"""The GPU sampler's per-hop driver: a batch's hops queued as kernels, the counts kept on the device, one host read.

Kernels run on PyTorch's current CUDA stream (never the legacy default stream), so they are ordered with the torch ops
around them (scans, copies). A batch is sized from host bounds on the fanouts before its first launch, so its device
work is a fixed sequence: one upload of everything the kernels read from the host (:func:`_state`), the seeds copied
in, the map cleared and the seeds inserted (the seed checks ride along), then per hop five kernels and two scans, no
copies, no allocations once the workspace holds the batch's shapes, no host reads. The kernels keep the batch's books
(the counts per hop, the segments' edge ranges, the damage and seed checks) in one device record, which the host reads
once, at the end. What each batch queued is counted (:attr:`DeviceWorkspace.last_counts`).

A sampler keeps its arrays and their kernel views from batch to batch
(:class:`~sparsetrain.sampling.cuda.workspace.DeviceWorkspace`): making a view from Python costs more than most of the
kernels it feeds.
"""

from __future__ import annotations

import numpy as np

from sparsetrain.errors import InputError
from sparsetrain.sampling.cuda.batch import Batch, Bounds, DeviceNodeMap, Regions
from sparsetrain.sampling.cuda.graph import DeviceCSC, max_degrees
from sparsetrain.sampling.cuda.kernels import count_kernel, first_kernel, number_kernel, relabel_kernel, sample_kernel
from sparsetrain.sampling.cuda.padded import PaddedOut, sizes_index
from sparsetrain.sampling.cuda.workspace import DeviceWorkspace
from sparsetrain.sampling.graph import DAMAGED

EXACT_ABOVE = 1 << 24  # edges: a batch whose bounds pass this reads its counts every hop and sizes arrays exactly


def sample_layers(graph: DeviceCSC, seeds, layout, keys, replace: bool, weighted: bool, new_only: bool = False,
                  seed_type: int = 0, padded: PaddedOut | None = None, capture: bool = False, fused=None):
    """All hops on the GPU; :func:`sample_arrays`' result as CUDA tensors."""
    max_degree = graph.max_degree(layout) if (layout.fanouts < 0).any() else None
    with graph.ops.torch.cuda.device(graph.ops.device):
        return sample_arrays(graph.ops, graph.indptr, graph.indices, graph.weights, seeds, layout, keys, replace,
                             weighted, graph.sources, edge_perm=graph.edge_perm, new_only=new_only,
                             seed_type=seed_type, max_degree=max_degree, workspace=graph.workspace(), padded=padded,
                             capture=capture, fused=fused)


def sample_arrays(ops, indptr, indices, weights, seeds, layout, keys, replace, weighted,
                  sources=("CSCGraph.indptr", "CSCGraph.indices"), *, edge_perm=None, new_only: bool = False,
                  seed_type: int = 0, max_degree=None, workspace: DeviceWorkspace | None = None,
                  padded: PaddedOut | None = None, capture: bool = False, fused=None):
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
    :class:`~sparsetrain.errors.InputError`, naming ``sources`` (where ``indptr`` and ``indices`` come
    from) or the edge type. ``workspace``: a :class:`DeviceWorkspace` over ``ops`` kept from batch to batch (default:
    one for this batch).

    ``padded`` (a homogeneous batch only, which ``NeighborSampler.sample_padded`` checks): sample into its buffers, with
    no host read (:mod:`.padded`): the batch's arrays are sized by its shapes, its sizes stay on the device, and its
    checks are raised one batch (or more) late, by a later call on the same workspace or by its ``late.drain()``.
    Returns ``padded``. ``capture``: a full padded batch (as many seeds as ``padded`` holds) is captured once per ring
    slot and replayed after (:mod:`.capture`; the workspace then samples this graph and layout only); any other runs as
    without it. ``fused`` (with ``padded``): a fused sampler's last hop (:class:`~.fused_mean.PaddedHop`), drawn and
    averaged into ``padded.neighbor_mean`` after the hops, in the same run (and the same captured graph); its damage
    check rides in the batch's record.
    """
    if max_degree is None and (layout.fanouts < 0).any():
        max_degree = max_degrees(indptr if isinstance(indptr, np.ndarray) else indptr.copy_to_host(), layout)
    ops = (workspace or DeviceWorkspace(ops)).begin(padded=padded is not None)

    def run(batch_seeds):
        return _sample(ops, indptr, indices, weights, batch_seeds, layout, keys, replace, weighted, sources, edge_perm,
                       new_only, seed_type, max_degree, padded, fused)

    try:
        if capture and padded is not None and len(seeds) == padded.nodes[0] - 1:
            key = (padded.key, replace, weighted, new_only, seed_type, None if fused is None else fused.key)
            every_key = keys if fused is None else [*keys, fused.keys]  # (a replay rewrites each in the upload)
            return ops.captured.sample(ops, key, seeds, every_key, run)
        return run(seeds)
    finally:
        ops.end()


def _sample(ops, indptr, indices, weights, seeds, layout, keys, replace, weighted, sources, edge_perm, new_only,
            seed_type, max_degree, padded, fused=None):
    k = ops.kernel
    num_types, num_hops = len(layout.type_size), layout.fanouts.shape[0]
    graph_edges = indices.shape[0]
    # the whole batch's bounds first: the node regions and the table are sized once, unless the bounds are too large
    # to allocate (then every hop reads its counts, and both grow as needed)
    et_edges = None if replace else np.diff(np.append(layout.edge_offset, graph_edges))
    plan = Bounds(layout, len(seeds), seed_type, new_only, max_degree, et_edges)
    planned, levels, hop_edges = [], [len(seeds)], []
    for hop in range(num_hops):
        seg_et, _, edges = plan.hop(hop)
        planned.append(seg_et)
        hop_edges.append(sum(edges))
        plan.advance(seg_et, edges)
        levels.append(int(plan.counts.sum()))
    if padded is not None:
        padded.check_fits(levels, hop_edges)
    exact = padded is None and sum(hop_edges) > EXACT_ABOVE
    seeds_only = np.zeros(num_types, np.int64)
    seeds_only[seed_type] = len(seeds)
    caps = seeds_only if exact else plan.counts if padded is None else np.array([padded.nodes[-1]], np.int64)
    extra = None if padded is None else lambda at: sizes_index(at, [len(seg_et) for seg_et in planned])
    d, at = _state(ops, layout, keys, planned, caps, seeds_only, extra, None if fused is None else fused.keys)
    status = d["status"]
    nodes = Regions(ops, caps, d["region"], None if padded is None else ops.keep(padded.node_ids))
    if len(seeds):
        ops.assign(nodes.of(seed_type, len(seeds)), seeds)
    layout_views = [k(d[name]) for name in ("col_offset", "edge_offset", "et_src", "et_dst", "type_offset",
                                            "type_size")]
    table = DeviceNodeMap(ops)
    if not exact:
        table.reserve(int(caps.sum()), nodes, d["counts", 0], layout_views[4], layout_views[5], status)
    permuted = edge_perm is not None
    edge_perm = k(d["record"]) if edge_perm is None else edge_perm  # never read then
    batch = Batch(ops, layout, exact, indptr, indices, weights, edge_perm, permuted, replace, weighted, *layout_views,
                  nodes, table, status)
    bounds = Bounds(layout, len(seeds), seed_type, new_only, max_degree, et_edges)
    counts_at = [("counts", 0)]  # per hop, the record entry of the counts before it (a hop that samples nothing
    layers = []  # leaves them where they were)
    for hop in range(num_hops):
        ops.phase(f"hop {hop}")
        now = counts_at[hop]
        first = counts_at[hop - 1] if new_only and hop > 0 else "zeros"
        if exact:
            head = ops.read(d["record"][: at[now] + num_types])
            bounds.exact(np.array(head[at[now]:], np.int64), np.array(head[at[first]: at[first] + num_types], np.int64))
        seg_et, work, edges = bounds.hop(hop)
        num_work, edge_bound = sum(work), sum(edges)
        out = None if padded is None else (padded.edge_index[hop], padded.nodes[hop + 1] - 1, padded.nodes[hop] - 1)
        if out is not None:  # sized by the shapes, the same every batch
            num_work, edge_bound = padded.nodes[hop] - 1, padded.edges[hop]
        if not seg_et:  # nothing to sample at this hop
            layers.append((seg_et, None, None))
            counts_at.append(now)
            if out is not None:  # padding only
                pair, src_sink, dst_sink = out
                ops.fill(pair[0], src_sink)
                ops.fill(pair[1], dst_sink)
        else:
            consts = ([d[name, hop] for name in HOP_PARTS] if seg_et == planned[hop] else  # (exact mode only)
                      ops.split(ops.upload(np.concatenate(_hop_parts(layout, hop, seg_et, keys[hop]))),
                                [len(seg_et)] * 3 + [len(layout.edge_types)] * 2))
            pair, edge_ids = _hop(batch, consts, num_work, edge_bound, bounds.counts, d[now], d[first],
                                  d["seg_edges", hop], d["counts", hop + 1], out)
            layers.append((seg_et, pair, edge_ids))
            counts_at.append(("counts", hop + 1))
        bounds.advance(seg_et, edges)
    ops.phase("finish")
    check = Check(layout, sources, indptr, indices, seed_type)
    if padded is not None:
        ops.take(padded.sizes, d["record"], d["sizes_index"])
        if fused is not None:  # its rows bounded by the last level's count, now in sizes
            ops.phase("fused hop")
            fused.queue(ops, indptr, indices, weights, padded, d["fused_key"], replace, weighted, new_only,
                        int(layout.type_size[0]), status, FUSED)
            ops.phase("finish")
        ops.read_late(status, check)
        return padded
    return _finish(ops, layout, check, d["record"], at, counts_at, layers, nodes)


HOP_PARTS = ("seg_et", "seg_dst_type", "seg_fanout", "fanouts", "keys")


def _hop_parts(layout, hop: int, seg_et: list[int], hop_keys) -> list[np.ndarray]:
    """A hop's constants, as :data:`HOP_PARTS`: its segments' edge types, dst types and fanouts, then per edge type
    its fanout and key."""
    fan = layout.fanouts[hop]
    return [np.asarray(seg_et, np.int64), layout.et_dst[seg_et], fan[seg_et], fan, hop_keys.view(np.int64)]


def _state(ops, layout, keys, planned, caps, seeds_only, extra=None, fused_keys=None):
    """Everything the batch's kernels read from the host, in one upload: the layout, the node regions' starts, every
    hop's constants (:func:`_hop_parts`, for the ``planned`` segments), and the record the kernels keep on the device
    and the host reads once at the end: ``status`` (damage and seed checks), ``zeros``, and per hop its segments' first
    edges (``seg_edges``) and the counts after it (``("counts", hop + 1)``; ``("counts", 0)``: the seeds). ``extra``:
    a padded batch's ``sizes_index`` from the record entries' offsets; ``fused_keys``: a padded fused hop's key.

    Returns ``(views, at)``: the device view of each part by name, and each record entry's offset in ``"record"``."""
    num_types, num_et = len(layout.type_size), len(layout.edge_types)
    record = {"status": np.zeros(STATUS, np.int64), "zeros": np.zeros(num_types, np.int64), ("counts", 0): seeds_only}
    for hop in range(len(planned)):
        record["seg_edges", hop] = np.zeros(num_et + 1, np.int64)
        record["counts", hop + 1] = np.zeros(num_types, np.int64)
    sizes = [len(p) for p in record.values()]
    at = dict(zip(record, np.cumsum([0, *sizes[:-1]]).tolist()))
    parts = {"col_offset": layout.col_offset, "edge_offset": layout.edge_offset, "et_src": layout.et_src,
             "et_dst": layout.et_dst, "type_offset": layout.type_offset, "type_size": layout.type_size,
             "region": Regions.starts(caps)}
    for hop, seg_et in enumerate(planned):
        parts.update(zip([(name, hop) for name in HOP_PARTS], _hop_parts(layout, hop, seg_et, keys[hop])))
    if extra is not None:
        parts["sizes_index"] = extra(at)
    if fused_keys is not None:
        parts["fused_key"] = fused_keys.view(np.int64)
    parts["record"] = np.concatenate(list(record.values()))
    lengths = [len(p) for p in parts.values()]
    offset = dict(zip(parts, np.cumsum([0, *lengths[:-1]]).tolist()))
    keys_at = [(offset["keys", hop], hop) for hop in range(len(planned))]  # (what a captured batch's replay rewrites)
    if fused_keys is not None:
        keys_at.append((offset["fused_key"], len(planned)))
    state = ops.upload(np.concatenate([np.asarray(p, np.int64) for p in parts.values()]), keys_at)
    views = dict(zip(parts, ops.split(state, lengths)))
    views.update(zip(record, ops.split(views["record"], sizes)))
    return views, at


def _hop(b: Batch, consts, num_work: int, edge_bound: int, counts_now, counts, first, seg_edges, counts_after,
         out=None):
    """One hop's five kernels and two scans, queued without a host wait (unless ``b.exact``); returns its edges
    (``[2, bound]``, sources then dsts) and edge ids, valid up to the count in ``seg_edges``.

    ``consts``: the hop's :data:`HOP_PARTS` on the device; ``num_work`` / ``edge_bound``: host bounds of its work
    items and edges (``counts_now``: of the nodes per type); ``counts``, ``first``: per type, the nodes before the hop
    and the first one it samples for; the hop writes ``seg_edges`` and ``counts_after`` (device record entries).
    ``out``: a padded batch's ``(edges [2, edge_bound], source sink, dst sink)``, the edges written there and padded
    from sink to sink."""
    ops, layout, nodes, table = b.ops, b.layout, b.nodes, b.table
    k = ops.kernel
    seg_et_d, seg_dst_type, seg_fan, fan_d, keys_d = consts
    seg_start, seg_dst = ops.empty(len(seg_et_d) + 1), ops.empty(len(seg_et_d))
    cols, lo, deg, per_item = (ops.empty(num_work) for _ in range(4))
    ops.launch(count_kernel, num_work, b.indptr, b.weights, k(nodes.buffer), k(nodes.offsets), k(counts), k(first),
               k(seg_dst_type), k(seg_et_d), b.et_dst, b.col_offset, k(seg_fan), b.replace, b.weighted, b.graph_edges,
               k(seg_start), k(seg_dst), k(cols), k(lo), k(deg), k(per_item), k(b.status))
    ends = ops.cumsum(per_item)
    if b.exact:  # sized by the true count
        edge_bound = ops.read(ends[-1:])[0]
        nodes.reserve(counts_now + np.minimum(edge_bound, layout.type_size))
        table.reserve(int(counts_now.sum()) + edge_bound, nodes, counts, b.type_offset, b.type_size, b.status)
    size = max(edge_bound, 1)  # (a hop drawing nothing still hands the kernels one-entry arrays)
    pair, src_sink, dst_sink = (ops.empty((2, size)), -1, -1) if out is None else out
    src, dst = ops.rows(pair)
    edge_ids, slots = ops.empty(size), ops.empty(size)
    src_type = ops.empty(size if b.several_types else 1)  # (one node type: every source's is 0, not written)
    ops.launch(sample_kernel, num_work,
               b.indices, b.weights, b.edge_perm, b.permuted, k(cols), k(seg_start), k(seg_et_d), k(seg_dst), k(fan_d),
               k(ops.as_uint64(keys_d)), b.col_offset, b.edge_offset, b.et_src, b.et_dst, b.type_offset, b.type_size,
               k(lo), k(deg), k(ends), b.replace, b.weighted, k(table.keys), k(table.vals), table.mask, k(src),
               k(dst), k(edge_ids), k(slots), k(src_type), k(b.status))
    flags = ops.empty((len(layout.type_size), size))
    ops.launch(first_kernel, size, k(slots), k(table.vals), k(ends), k(src_type), k(flags))
    ranks = ops.cumsum(flags, 1)
    ops.launch(number_kernel, size, k(slots), k(table.keys), k(table.vals), k(ends), k(src_type), k(ranks),
               k(counts), k(nodes.offsets), b.type_offset, k(nodes.buffer))
    ops.launch(relabel_kernel, size, k(slots), k(table.vals), k(ends), k(src), k(dst), src_sink, dst_sink,
               k(seg_start), k(ranks), k(counts), k(counts_after), k(seg_edges))
    return pair, edge_ids


STATUS = 6  # the record's checks: bad column, bad entry, seeds outside, repeated seed, overlapping ranges, fused hop
FUSED = 5  # a padded fused hop's: the largest node whose in-edges lie outside the graph, + 1


class Check:
    """The batch's checks from its record's ``status`` values: seeds, then a damaged graph, as one-line errors."""

    def __init__(self, layout, sources, indptr, indices, seed_type: int) -> None:
        self.layout, self.sources, self.seed_type = layout, sources, seed_type
        self.indptr, self.indices = indptr, indices

    def __call__(self, values) -> None:
        layout, sources = self.layout, self.sources
        bad_column, bad_entry, outside, repeated, overlap, fused = values[:STATUS]
        if outside:
            raise layout.seeds_outside(self.seed_type)
        if repeated:
            raise layout.seed_repeated(repeated - 1)
        if bad_column:
            raise layout.bad_range(sources[0], self.indptr, self.indices.shape[0], bad_column - 1)
        if bad_entry:
            raise layout.bad_entry(sources[1], self.indices, bad_entry - 1)
        if overlap:
            raise InputError(f"{sources[0]}: the in-edge ranges of two nodes overlap; {DAMAGED}")
        if fused:
            raise InputError(f"{sources[1]}: the in-edges of node {fused - 1} lie outside the graph (its indptr "
                             f"range or an in-neighbour id); {DAMAGED}")


def _finish(ops, layout, check: Check, record, at, counts_at, layers, nodes: Regions):
    """The batch's one read: the record (checks, and every hop's counts); then the layers and nodes cut to their
    sizes, copied out of the workspace."""
    num_types = len(layout.type_size)
    values = ops.read(record)
    check(values)

    def counts(entry):
        return np.array(values[at[entry]: at[entry] + num_types], np.int64)

    out = []
    for hop, (seg_et, pair, edge_ids) in enumerate(layers):
        before, after = counts(counts_at[hop]), counts(counts_at[hop + 1])
        if pair is None:
            out.append((ops.empty((2, 0)), ops.empty(0), [], before, after))
            continue
        edge_bounds = values[at["seg_edges", hop]: at["seg_edges", hop] + len(seg_et) + 1]
        m = edge_bounds[-1]
        segments = [(e_type, edge_bounds[i], edge_bounds[i + 1]) for i, e_type in enumerate(seg_et)]
        out.append((ops.output(pair[:, :m]), ops.output(edge_ids[:m]), segments, before, after))
    last = counts(counts_at[-1])
    return out, [ops.output(nodes.of(n, int(last[n]))) for n in range(num_types)]
