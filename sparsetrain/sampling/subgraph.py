"""Subgraph types other than the directional message-flow graph: ``"induced"`` and ``"bidirectional"`` (PyG's names).

- ``"induced"``: every edge of the graph between two sampled nodes (the nodes are sampled as usual).
  :func:`induced_edges` reads the sampled nodes' columns and keeps the sources the batch's node map holds.
- ``"bidirectional"``: the sampled edges and their reverses, each pair once, sorted by (dst, src), as PyG's
  ``to_bidirectional``; on a typed graph an edge type is merged with its reverse type (``rev_<rel>``, itself when
  its two ends are one type and it has no ``rev_`` twin, else the one edge type from its dst type to its src type;
  an edge type with none of these stays directional, with a warning). Merged edges carry no edge ids except the
  one-type graph's (:data:`KEEP_IDS`).

Both are *flat* subgraphs: one edge list over all the batch's nodes, which :func:`flat_blocks` turns into blocks
(see :class:`~sparsetrain.sampling.NeighborSampler`). :func:`induced` is the CPU hop loop's read of the induced edges
after the hops; the sampler's core flattens a bidirectional batch with :func:`bidirectional`.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import torch
from numba import prange

from sparsetrain.sampling.graph import EDGE_TYPE, EdgeType
from sparsetrain.sampling.layout import KernelLayout
from sparsetrain.sampling.minibatch import Block
from sparsetrain.sampling.neighbor import HostScratch, threads_for

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
KEEP_IDS = {EDGE_TYPE}
"""Edge types whose merged bidirectional edges keep their ids: the one-type graph's (PyG's ``to_bidirectional`` keeps
a homogeneous batch's edge ids and drops a typed one's)."""


@numba.njit(cache=True, nogil=True, parallel=True)
def induced_edges(indptr, indices, edge_perm, cols, table, src_base, src_size, id_base):
    """The edges into columns ``cols`` (local dst id = position in ``cols``) whose source is in ``table`` (>= 0).

    ``table[src_base + u]``: the local id of source ``u``, or -1. Returns ``(edge_index [2, E], edge_ids [E])`` in
    (dst, CSC position) order; edge ids are ``edge_perm`` at the position, else the position minus ``id_base``.
    """
    n = cols.shape[0]
    num_edges = indices.shape[0]
    offsets = np.zeros(n + 1, np.int64)
    for i in prange(n):
        a, b = max(indptr[cols[i]], 0), min(indptr[cols[i] + 1], num_edges)
        c = 0
        for p in range(a, b):
            u = indices[p]
            if u >= 0 and u < src_size and table[src_base + u] >= 0:
                c += 1
        offsets[i + 1] = c
    for i in range(n):
        offsets[i + 1] += offsets[i]
    edge_index = np.empty((2, offsets[n]), np.int64)
    edge_ids = np.empty(offsets[n], np.int64)
    permuted = edge_perm.shape[0] > 0
    for i in prange(n):
        a, b = max(indptr[cols[i]], 0), min(indptr[cols[i] + 1], num_edges)
        w = offsets[i]
        for p in range(a, b):
            u = indices[p]
            if u >= 0 and u < src_size and table[src_base + u] >= 0:
                edge_index[0, w] = table[src_base + u]
                edge_index[1, w] = i
                edge_ids[w] = edge_perm[p] if permuted else p - id_base
                w += 1
    return edge_index, edge_ids


def induced(layout: KernelLayout, ws: HostScratch, counts: np.ndarray, indptr, indices, edge_perm) -> Block:
    """Every edge of the graph between two nodes of the batch, per edge type, as one flat block; read by the CPU hop
    loop while its workspace's node map still holds the batch (``counts``: its nodes per type)."""
    edge_index, edge_ids = {}, {}
    for k, et in enumerate(layout.edge_types):
        d, s = layout.et_dst[k], layout.et_src[k]
        cols = ws.nodes[d][: counts[d]] + layout.col_offset[k]
        with threads_for(int(counts[d]) * 8):
            ei, ids = induced_edges(indptr, indices, edge_perm, cols, ws.table, layout.type_offset[s],
                                    layout.type_size[s], layout.edge_offset[k])
        edge_index[et], edge_ids[et] = torch.from_numpy(ei), torch.from_numpy(ids)
    num = {t: int(counts[i]) for i, t in enumerate(layout.node_types)}
    return Block(edge_index, num, dict(num), edge_ids)


def merge_reverse(edge_index: torch.Tensor, rev_edge_index: torch.Tensor, edge_ids: torch.Tensor | None = None,
                  rev_edge_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``edge_index`` and the reverse of ``rev_edge_index``, each (src, dst) pair once, sorted by (dst, src).

    An edge id goes with each pair: the first of ``edge_ids`` (then ``rev_edge_ids``) that has it.
    """
    src = torch.cat([edge_index[0], rev_edge_index[1]])
    dst = torch.cat([edge_index[1], rev_edge_index[0]])
    if src.numel() == 0:
        return torch.zeros(2, 0, dtype=torch.int64), None if edge_ids is None else torch.zeros(0, dtype=torch.int64)
    key = dst * (int(src.max()) + 1) + src
    order = torch.argsort(key, stable=True)
    key = key[order]
    first = torch.ones(key.numel(), dtype=torch.bool)
    first[1:] = key[1:] != key[:-1]
    keep = order[first]
    merged = torch.stack([src[keep], dst[keep]])
    ids = None if edge_ids is None else torch.cat([edge_ids, rev_edge_ids])[keep]
    return merged, ids


def bidirectional(edge_index: dict[EdgeType, torch.Tensor], edge_ids: dict[EdgeType, torch.Tensor]):
    """The bidirectional version of a batch's edges by edge type (see the module docstring): ``(edge_index,
    edge_ids)`` alike."""
    out, ids = dict(edge_index), dict(edge_ids)
    by_ends: dict[tuple[str, str], list[EdgeType]] = {}
    for et in edge_index:
        by_ends.setdefault((et[0], et[2]), []).append(et)
    for et in edge_index:
        src, rel, dst = et
        if rel.startswith("rev_"):
            continue
        rev = (dst, f"rev_{rel}", src)
        if src == dst and rev not in edge_index:
            out[et], ids[et] = merge_reverse(edge_index[et], edge_index[et], ids.get(et), ids.get(et))
            if et not in KEEP_IDS:
                ids.pop(et)
        elif rev in edge_index:
            out[et], _ = merge_reverse(edge_index[et], edge_index[rev])
            out[rev] = out[et].flip(0)
            ids.pop(et, None), ids.pop(rev, None)
        elif len(by_ends.get((dst, src), [])) == 1:
            out[et], _ = merge_reverse(edge_index[et], edge_index[by_ends[(dst, src)][0]])
            ids.pop(et, None)
        else:
            warnings.warn(f"edge type {et} has no reverse edge type, so its edges stay directional "
                          "(add its reverse, e.g. with torch_geometric.transforms.ToUndirected)", stacklevel=3)
    return out, ids


def flat_blocks(subgraph: Block, num_layers: int, num_seeds: dict[str, int]) -> list[Block]:
    """``num_layers`` blocks over one flat subgraph: the whole subgraph, then (the last) only its edges into the
    seeds (``num_seeds`` per node type)."""
    if num_layers == 0:
        return []
    keep = {et: ei[1] < num_seeds.get(et[2], 0) for et, ei in subgraph.edge_index_by_type.items()}
    last = Block({et: ei[:, keep[et]] for et, ei in subgraph.edge_index_by_type.items()}, subgraph.num_src_by_type,
                 {t: num_seeds.get(t, 0) for t in subgraph.num_src_by_type},
                 None if subgraph.edge_ids_by_type is None else
                 {et: ids[keep[et]] for et, ids in subgraph.edge_ids_by_type.items()})
    return [subgraph] * (num_layers - 1) + [last]
