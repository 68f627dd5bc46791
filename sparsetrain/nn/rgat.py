"""R-GAT, MLPerf Training's GNN model, from PyG layers: per layer a ``HeteroConv`` of one ``GATConv`` per relation,
summed per destination type, run block by block.

As the reference (graphlearn-for-pytorch's ``examples/igbh/rgnn.py``, which MLPerf's ``graph_neural_network`` uses):
each relation's ``GATConv(in, hidden // heads, heads=heads, add_self_loops=False)`` concatenates its heads; the
relations into a type are summed; leaky ReLU and dropout between layers; a linear layer maps the target type's last
hidden state to the classes. There is no per-type self-connection: a paper sees itself through the self-loops the
reference adds to ``cites`` (:func:`~sparsetrain.datasets.igb.with_reference_reverses`). MLPerf's closed division
trains hidden 512, 4 heads, 3 layers, fanouts [15, 10, 5], dropout 0.2, Adam at lr 0.001; ``train --model rgat``
defaults to hidden 128 (the reference script's own default, and what two CPU cores train in minutes) and 4 heads.
Node types without features get a learnable embedding per node (their ``x`` is the int64 global node ids).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from sparsetrain.errors import SettingError
from sparsetrain.nn.rgcn import HeteroPygBlock, layer_relations
from sparsetrain.sampling.graph import EdgeType


class RGAT(nn.Module):
    """``num_layers`` relational GAT layers over ``edge_types``; returns the ``target_type`` nodes' logits.

    ``in_channels[t]``: feature width of node type ``t`` (0 or missing: an embedding of ``num_nodes[t]`` rows of
    width ``hidden`` instead). ``hidden`` must be a multiple of ``heads``.
    """

    def __init__(self, node_types: Sequence[str], edge_types: Sequence[EdgeType], in_channels: dict[str, int],
                 hidden: int, out_channels: int, num_layers: int, target_type: str, *, heads: int = 4,
                 num_nodes: dict[str, int] | None = None, dropout: float = 0.2) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv, HeteroConv

        if target_type not in node_types:
            raise SettingError(f"target_type {target_type!r} is not one of the node types {list(node_types)}")
        if heads < 1 or hidden % heads:
            raise SettingError(f"hidden={hidden} with heads={heads}: the heads split the hidden width, give a hidden "
                               f"size that is a multiple of {heads}")
        self.node_types, self.edge_types = list(node_types), [tuple(et) for et in edge_types]
        self.target_type, self.dropout, self.heads = target_type, dropout, heads
        needed, relations = layer_relations(self.edge_types, target_type, num_layers)
        self.embed = nn.ModuleDict()
        width = {}
        for t in sorted(needed[0]):
            if in_channels.get(t, 0) > 0:
                width[t] = in_channels[t]
            elif num_nodes is not None and t in num_nodes:
                self.embed[t] = nn.Embedding(num_nodes[t], hidden)
                width[t] = hidden
            else:
                raise SettingError(f"node type {t!r} has no features; give num_nodes[{t!r}] for a learnable embedding")
        self.convs = nn.ModuleList()
        for layer in range(num_layers):
            with warnings.catch_warnings():  # types no later layer reads are left out on purpose; PyG warns about them
                warnings.filterwarnings("ignore", message="There exist node types")
                self.convs.append(HeteroConv({
                    et: GATConv((width[et[0]], width[et[2]]) if layer == 0 else (hidden, hidden), hidden // heads,
                                heads=heads, add_self_loops=False)
                    for et in relations[layer]}, aggr="sum"))
        self.out = nn.Linear(hidden, out_channels)

    def inputs(self, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Input rows per node type: the features, or (for int64 node ids) embedding rows."""
        h = {t: v for t, v in x.items() if t not in self.embed and v.is_floating_point()}
        h.update({t: emb(x[t]) for t, emb in self.embed.items() if t in x})
        return h

    def forward(self, x: dict[str, torch.Tensor], blocks: Sequence[HeteroPygBlock]) -> torch.Tensor:
        """Logits of the target type's first ``num_dst`` nodes of the last block (the seeds)."""
        h = self.inputs(x)
        last = len(self.convs) - 1
        for layer, (conv, (edge_index, (num_src, num_dst))) in enumerate(zip(self.convs, blocks)):
            pairs = {et: (h[et[0]], h[et[2]][: num_dst[et[2]]]) for et in edge_index
                     if et in conv.convs and et[0] in h and et[2] in h}
            out = conv(pairs, {et: edge_index[et] for et in pairs})
            # a dst type no sampled edge reaches still has its rows: zeros, as a GAT with no in-edges gives; types
            # sorted, so that dropout draws in one order whatever the process's string hashing
            any_h = next(iter(h.values()))
            nxt = {t: out[t] if t in out else any_h.new_zeros(num_dst[t], conv_width(conv))
                   for t in sorted({et[2] for et in conv.convs.keys()}) if t in num_dst}
            if layer != last:
                nxt = {t: nn.functional.dropout(nn.functional.leaky_relu(v), self.dropout, self.training)
                       for t, v in nxt.items()}
            h = nxt
        return self.out(h[self.target_type])


def conv_width(conv) -> int:
    """The output width of a ``HeteroConv`` of ``GATConv``s (heads x channels, concatenated)."""
    first = next(iter(conv.convs.values()))
    return first.heads * first.out_channels
