"""Layer-wise inference: a block GNN's exact outputs for every node, one layer at a time over the whole graph.

This is the trainer's evaluation loop (chunking nodes, gathering rows, moving them to the
device), not a model: it drives any model with ``num_layers``, ``kind`` and ``layer(i, x, edge_index, size)``.
"""

from __future__ import annotations

import torch

from sparsetrain.nn.models import BlockGNN
from sparsetrain.storage.rows import gather_rows


@torch.no_grad()
def full_graph_inference(model: BlockGNN, x, graph, nodes_per_chunk: int = 4096, device: str | torch.device = "cpu") -> torch.Tensor:
    """Exact outputs for every node: layer by layer over all nodes with their full in-neighborhood.

    ``x`` is anything indexable by a LongTensor of node ids (a tensor or a feature
    store with ``gather``); ``graph`` is a :class:`~sparsetrain.sampling.CSCGraph`.
    Memory is one layer's output for all nodes; compute per layer is one pass over the edges.
    """
    was_training = model.training
    model.eval()
    n = graph.num_nodes
    current = x
    for i in range(model.num_layers):
        if model.kind == "gcn":
            # GCN normalizes by the degrees of both ends, so one layer needs the whole graph at once
            counts, neighbors = graph.columns(0, n)
            col = torch.repeat_interleave(torch.arange(n), counts)
            edge_index = torch.stack([neighbors, col]).to(device)
            current = model.layer(i, gather_rows(current, torch.arange(n)).to(device), edge_index, (n, n)).cpu()
            continue
        outputs = []
        for lo in range(0, n, nodes_per_chunk):
            hi = min(lo + nodes_per_chunk, n)
            counts, neighbors = graph.columns(lo, hi)  # checked: a damaged graph is an error here, not a stray read
            dst_local = torch.repeat_interleave(torch.arange(hi - lo), counts)
            # sources = the chunk's own nodes first (dst = first num_dst sources), then their neighbors
            src_nodes, src_local = torch.unique(torch.cat([torch.arange(lo, hi), neighbors]), return_inverse=True)
            own = src_local[: hi - lo]
            order = torch.cat([own, _complement(own, len(src_nodes))])
            position = torch.empty_like(order)
            position[order] = torch.arange(len(order))
            src_nodes = src_nodes[order]
            edge_index = torch.stack([position[src_local[hi - lo :]], dst_local]).to(device)
            feats = gather_rows(current, src_nodes).to(device)
            outputs.append(model.layer(i, feats, edge_index, (len(src_nodes), hi - lo)).cpu())
        current = torch.cat(outputs)
    model.train(was_training)
    return current


def _complement(ids: torch.Tensor, n: int) -> torch.Tensor:
    mask = torch.ones(n, dtype=torch.bool)
    mask[ids] = False
    return mask.nonzero().view(-1)
