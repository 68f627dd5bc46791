"""R-GCN-style typed GNN from PyG layers: per layer a ``HeteroConv`` of one convolution per relation, run block by
block.

Layer ``l`` takes block ``l`` of a typed :class:`~sparsetrain.sampling.MiniBatch` (``mb.to_pyg()[l]``): every
relation's convolution maps its source type's features to its dst type's first ``num_dst`` nodes, the
``HeteroConv`` sums them per dst type, and a per-type root weight (R-GCN's self-connection ``W_0``) is added.
Node types without input features get a learnable embedding per node: their ``x`` is the int64 global node ids
(what the loader's fetch stage gives a type without a feature store).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from sparsetrain.errors import SettingError
from sparsetrain.sampling.graph import EdgeType

HeteroPygBlock = tuple[dict[EdgeType, torch.Tensor], tuple[dict[str, int], dict[str, int]]]
"""One typed hop as :meth:`MiniBatch.to_pyg` gives it: (edge_index per edge type, (num_src, num_dst) per node
type)."""



def layer_relations(edge_types: list[tuple], target_type: str, num_layers: int) -> tuple[list[set], list[list]]:
    """``(needed, relations)``: the node types each layer's input must hold (``needed[l]``, ``needed[-1]`` the target
    type) and the edge types layer ``l`` convolves (``relations[l]``): layer ``l`` computes only the types layer
    ``l + 1`` reads, so every parameter reaches the loss (as DDP requires)."""
    needed = [{target_type}]
    relations = []
    for _ in range(num_layers):
        ets = [et for et in edge_types if et[2] in needed[0]]
        relations.insert(0, ets)
        needed.insert(0, needed[0] | {et[0] for et in ets})
    return needed, relations

class RGCN(nn.Module):
    """``num_layers`` relational layers over ``edge_types``; returns the ``target_type`` nodes' logits.

    ``in_channels[t]``: feature width of node type ``t`` (0 or missing: an embedding of ``num_nodes[t]`` rows instead).
    Each relation uses a mean-aggregating ``SAGEConv`` without its own root weight (``conv`` picks another PyG
    convolution class taking ``(in_channels, out_channels)``).
    """

    def __init__(self, node_types: Sequence[str], edge_types: Sequence[EdgeType], in_channels: dict[str, int],
                 hidden: int, out_channels: int, num_layers: int, target_type: str, *,
                 num_nodes: dict[str, int] | None = None, dropout: float = 0.5, conv=None) -> None:
        super().__init__()
        from torch_geometric.nn import HeteroConv, SAGEConv

        if target_type not in node_types:
            raise SettingError(f"target_type {target_type!r} is not one of the node types {list(node_types)}")
        self.node_types, self.edge_types = list(node_types), [tuple(et) for et in edge_types]
        self.target_type = target_type
        self.dropout = dropout
        needed, relations = layer_relations(self.edge_types, target_type, num_layers)
        self.project = nn.ModuleDict()
        self.embed = nn.ModuleDict()
        for t in sorted(needed[0]):
            if in_channels.get(t, 0) > 0:
                self.project[t] = nn.Linear(in_channels[t], hidden)
            elif num_nodes is not None and t in num_nodes:
                self.embed[t] = nn.Embedding(num_nodes[t], hidden)
            else:
                raise SettingError(f"node type {t!r} has no features; give num_nodes[{t!r}] for a learnable embedding")
        make = conv or (lambda i, o: SAGEConv(i, o, aggr="mean", root_weight=False))
        self.convs = nn.ModuleList()
        self.roots = nn.ModuleList()
        for layer in range(num_layers):
            out = out_channels if layer == num_layers - 1 else hidden
            with warnings.catch_warnings():  # types no later layer reads are left out on purpose; PyG warns about them
                warnings.filterwarnings("ignore", message="There exist node types")
                self.convs.append(HeteroConv({et: make((hidden, hidden), out) for et in relations[layer]}, aggr="sum"))
            self.roots.append(nn.ModuleDict({t: nn.Linear(hidden, out) for t in sorted(needed[layer + 1])}))

    def inputs(self, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hidden-width input per node type: projected features, or (for int64 node ids) embedding rows."""
        h = {t: self.project[t](x[t]) for t in self.project if t in x}
        h.update({t: emb(x[t]) for t, emb in self.embed.items() if t in x})
        return h

    def forward(self, x: dict[str, torch.Tensor], blocks: Sequence[HeteroPygBlock]) -> torch.Tensor:
        """Logits of the target type's first ``num_dst`` nodes of the last block (the seeds)."""
        h = self.inputs(x)
        last = len(self.convs) - 1
        for layer, (conv, roots, (edge_index, (num_src, num_dst))) in enumerate(zip(self.convs, self.roots, blocks)):
            pairs = {et: (h[et[0]], h[et[2]][: num_dst[et[2]]]) for et, ei in edge_index.items()
                     if et in conv.convs and et[0] in h and et[2] in h}
            edges = {et: edge_index[et] for et in pairs}
            out = conv(pairs, edges)
            nxt = {}
            for t, root in roots.items():
                r = root(h[t][: num_dst[t]])
                nxt[t] = r + out[t] if t in out else r
            if layer != last:
                nxt = {t: nn.functional.dropout(v.relu(), self.dropout, self.training) for t, v in nxt.items()}
            h = nxt
        return h[self.target_type]
