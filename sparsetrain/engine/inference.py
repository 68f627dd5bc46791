"""Layer-wise inference: a block GNN's exact outputs for every node, one layer at a time over the whole graph.

PyG's and DGL's ``inference()`` idea: instead of sampling each node's L-hop neighborhood (whose size grows
with the fanout product), layer ``i`` runs once for every node over all its in-neighbors, reading layer
``i - 1``'s embeddings of all nodes from a table. The table lives in a storage tier: in memory while it fits
``memory_budget``, else in a ``.npy`` file read back with ``O_DIRECT``. This is the trainer's evaluation loop
(chunking nodes, gathering rows, moving them to the device), not a model: it drives any model with
``num_layers``, ``kind`` and ``layer(i, x, edge_index, size)``.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from sparsetrain._sigbus import watch
from sparsetrain.engine.stages.fetch import check_finite
from sparsetrain.errors import SettingError
from sparsetrain.nn.models import BlockGNN
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.storage import MmapFeatures
from sparsetrain.storage.rows import gather_rows


@torch.no_grad()
def layerwise_inference(model: BlockGNN, dataset, batch_size: int = 4096, *, device: str | torch.device = "cpu",
                        memory_budget: int | None = None, spill_dir: str | Path | None = None, features=None):
    """Exact outputs of ``model`` for every node of ``dataset``: layer by layer over all nodes with every in-neighbor.

    ``dataset`` is a :class:`~sparsetrain.datasets.GraphDataset` (or anything with ``.graph`` and ``.features``);
    ``features`` overrides its features (a tensor or any feature store). ``batch_size`` nodes are computed
    at once. Each layer's output table stays in memory while it takes at most ``memory_budget`` bytes (None:
    no limit); a larger one is written to a ``.npy`` file in ``spill_dir`` (default: a new temporary folder)
    and the next layer reads it back with ``O_DIRECT``. Returns a float32 ``[num_nodes, out]`` tensor, or an
    :class:`~sparsetrain.storage.MmapFeatures` over the last layer's file when it was spilled (the file stays
    until you delete it; earlier layers' files are deleted as soon as they are read).
    Compute per layer is one pass over the edges.
    """
    x = dataset.features if features is None else features
    if x is None:
        raise SettingError(f"layerwise_inference: {dataset!r} has no node features; pass features=")
    return infer_layers(model, x, dataset.graph, batch_size, torch.device(device), memory_budget, spill_dir)


def infer_layers(model: BlockGNN, x, graph, batch_size: int, device: torch.device, memory_budget: int | None,
                 spill_dir) -> torch.Tensor | MmapFeatures:
    """:func:`layerwise_inference` on features ``x`` and a :class:`~sparsetrain.sampling.CSCGraph` (what the evaluator
    calls)."""
    if batch_size < 1:
        raise SettingError(f"layerwise_inference: batch_size={batch_size} must be at least 1")
    was_training = model.training
    model.eval()
    n = graph.num_nodes
    current = x
    previous_file: Path | None = None
    try:
        for i in range(model.num_layers):
            if model.kind == "gcn":
                # GCN normalizes by the degrees of both ends, so one layer needs the whole graph at once
                counts, neighbors = graph.columns(0, n)
                col = torch.repeat_interleave(torch.arange(n), counts)
                edge_index = torch.stack([neighbors, col]).to(device)
                current = model.layer(i, _rows(current, torch.arange(n), device, i == 0), edge_index, (n, n)).cpu()
                continue
            table = None
            for lo in range(0, n, batch_size):
                hi = min(lo + batch_size, n)
                src_nodes, edge_index = _chunk_block(graph, lo, hi)
                rows = _rows(current, src_nodes, device, i == 0)
                out = model.layer(i, rows, edge_index.to(device), (len(src_nodes), hi - lo)).float().cpu()
                if table is None:
                    table = _new_table(n, out.shape[1], memory_budget, spill_dir, i)
                table[lo:hi] = out.numpy() if isinstance(table, np.ndarray) else out
            current = _finish_table(table)
            if previous_file is not None:  # read for the last time
                previous_file.unlink(missing_ok=True)
            previous_file = current.path if isinstance(current, MmapFeatures) else None
        return current
    finally:
        model.train(was_training)


def _chunk_block(graph, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources (the chunk's own nodes first: dst = the first ``hi - lo`` sources, then their in-neighbors) and the
    block's edges."""
    counts, neighbors = graph.columns(lo, hi)  # checked: a damaged graph is an error here, not a stray read
    dst_local = torch.repeat_interleave(torch.arange(hi - lo), counts)
    src_nodes, src_local = torch.unique(torch.cat([torch.arange(lo, hi), neighbors]), return_inverse=True)
    own = src_local[: hi - lo]
    order = torch.cat([own, _complement(own, len(src_nodes))])
    position = torch.empty_like(order)
    position[order] = torch.arange(len(order))
    return src_nodes[order], torch.stack([position[src_local[hi - lo :]], dst_local])


def _rows(table, ids: torch.Tensor, device: torch.device, input_features: bool) -> torch.Tensor:
    rows = gather_rows(table, ids)
    if input_features:
        check_finite(rows, ids, table)
    return (rows.float() if rows.dtype == torch.float16 else rows).to(device)


def _new_table(n: int, width: int, memory_budget: int | None, spill_dir, layer: int):
    """A float32 ``[n, width]`` table: a tensor within the budget, else a ``.npy`` file opened for writing."""
    if memory_budget is None or n * width * 4 <= memory_budget:
        return torch.empty((n, width), dtype=torch.float32)
    folder = Path(spill_dir) if spill_dir is not None else Path(tempfile.mkdtemp(prefix="sparsetrain-layerwise-"))
    folder.mkdir(parents=True, exist_ok=True)
    table = np.lib.format.open_memmap(folder / f"layer{layer}.npy", mode="w+", dtype=np.float32, shape=(n, width))
    watch(table, folder / f"layer{layer}.npy", fix="run again")
    return table


def _finish_table(table):
    if isinstance(table, torch.Tensor):
        return table
    table.flush()
    path = Path(table.filename)
    del table
    return MmapFeatures(path, mode="direct")


def _complement(ids: torch.Tensor, n: int) -> torch.Tensor:
    mask = torch.ones(n, dtype=torch.bool)
    mask[ids] = False
    return mask.nonzero().view(-1)


def layerwise_cost(num_edges: int, num_layers: int) -> int:
    """Edges a layer-wise pass aggregates: every edge once per layer."""
    return num_edges * num_layers


def sampled_cost(num_eval_nodes: int, fanouts: Fanouts) -> float:
    """Edges sampled evaluation aggregates: per seed, the block edges of its fanouts (-1 = all: at least the graph)."""
    per_seed = fanouts.edges_per_seed()
    return math.inf if math.isinf(per_seed) else num_eval_nodes * per_seed
