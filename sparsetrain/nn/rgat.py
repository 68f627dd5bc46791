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

On the CPU each layer runs fused (``fused=True``, the default): per relation one :func:`~sparsetrain.nn.gat_aggregate.
gat_aggregate` pass (scores, softmax and the heads' weighted sums of the source rows in one kernel over the block's
destinations), the attention logits from the projections folded into the attention vectors (one matmul per node type
for all its relations), and per relation the projection before the sum (``GATConv``'s order) or after it (one batched
matmul over the heads' sums), whichever :func:`aggregate_first` says costs less. It reads the same ``GATConv``
parameters and computes the same function (the projection is linear, so it may move after the sum); on another
device, under CPU autocast, or with ``fused=False``, the ``HeteroConv`` of ``GATConv`` runs as PyG writes it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from sparsetrain.errors import SettingError
from sparsetrain.nn.dropout import dropout as hash_dropout
from sparsetrain.nn.gat_aggregate import dst_csr, gat_aggregate
from sparsetrain.nn.rgcn import HeteroPygBlock, layer_relations
from sparsetrain.sampling.graph import EdgeType


class RGAT(nn.Module):
    """``num_layers`` relational GAT layers over ``edge_types``; returns the ``target_type`` nodes' logits.

    ``in_channels[t]``: feature width of node type ``t`` (0 or missing: an embedding of ``num_nodes[t]`` rows of
    width ``hidden`` instead). ``hidden`` must be a multiple of ``heads``.
    """

    def __init__(self, node_types: Sequence[str], edge_types: Sequence[EdgeType], in_channels: dict[str, int],
                 hidden: int, out_channels: int, num_layers: int, target_type: str, *, heads: int = 4,
                 num_nodes: dict[str, int] | None = None, dropout: float = 0.2,
                 fused: bool = True) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv, HeteroConv

        if target_type not in node_types:
            raise SettingError(f"target_type {target_type!r} is not one of the node types {list(node_types)}")
        if heads < 1 or hidden % heads:
            raise SettingError(f"hidden={hidden} with heads={heads}: the heads split the hidden width, give a hidden "
                               f"size that is a multiple of {heads}")
        self.node_types, self.edge_types = list(node_types), [tuple(et) for et in edge_types]
        self.target_type, self.dropout, self.heads, self.fused = target_type, dropout, heads, fused
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
            if self.fused and fusable(h):
                out = fused_layer(conv, h, {et: edge_index[et] for et in pairs}, num_dst)
            else:
                out = conv(pairs, {et: edge_index[et] for et in pairs})
            # a dst type no sampled edge reaches still has its rows: zeros, as a GAT with no in-edges gives; types
            # sorted, so that dropout draws in one order whatever the process's string hashing
            any_h = next(iter(h.values()))
            nxt = {t: out[t] if t in out else any_h.new_zeros(num_dst[t], conv_width(conv))
                   for t in sorted({et[2] for et in conv.convs.keys()}) if t in num_dst}
            if layer != last:
                nxt = {t: hash_dropout(nn.functional.leaky_relu(v), self.dropout, self.training)
                       for t, v in nxt.items()}
            h = nxt
        return self.out(h[self.target_type])


def conv_width(conv) -> int:
    """The output width of a ``HeteroConv`` of ``GATConv``s (heads x channels, concatenated)."""
    first = next(iter(conv.convs.values()))
    return first.heads * first.out_channels


def fusable(h: dict[str, torch.Tensor]) -> bool:
    """Whether a layer over ``h`` runs :func:`fused_layer`: float32/float64 CPU rows, no CPU autocast (the kernel
    reads NumPy views, which have no bfloat16)."""
    return not torch.is_autocast_enabled("cpu") and all(
        v.device.type == "cpu" and v.dtype in (torch.float32, torch.float64) for v in h.values())


def _folded(lin: nn.Linear, att: torch.Tensor) -> torch.Tensor:
    """``[heads, in]``: a ``GATConv`` projection folded into its attention vector, ``x @ result.T`` being
    ``((x @ lin.weight.T).view(-1, heads, C) * att).sum(-1)``."""
    heads, channels = att.shape[-2:]
    return (lin.weight.view(heads, channels, -1) * att.view(heads, channels, 1)).sum(1)


EDGE_COST = 8
"""What a multiply-add over an edge costs against one in a dense matmul (gathered rows against a blocked product)."""


def aggregate_first(num_src: int, num_dst: int, num_edges: int, width: int, hidden: int, heads: int,
                    input_grad: bool) -> bool:
    """Whether a relation costs less with the projection after the attention sum (``x`` shared by the heads: the
    projection runs on the ``num_dst`` sums, but each edge carries ``heads x width`` values) than before it (every
    source row projected, each edge carrying ``hidden`` values), forward and backward counted."""
    after = num_dst * width * hidden * 3 + EDGE_COST * num_edges * heads * width * (2 + input_grad)
    before = num_src * width * hidden * (2 + input_grad) + EDGE_COST * num_edges * hidden * 3
    return after <= before


def fused_layer(conv, h: dict[str, torch.Tensor], edge_index: dict[EdgeType, torch.Tensor],
                num_dst: dict[str, int]) -> dict[str, torch.Tensor]:
    """What ``conv`` (a ``HeteroConv`` of ``GATConv``s, summed) gives for ``(h[src], h[dst][:num_dst])`` per edge type
    in ``edge_index``, computed with :func:`gat_aggregate` on the CPU. Per relation the projection runs before or
    after the attention sum, whichever :func:`aggregate_first` says costs less."""
    first = next(iter(conv.convs.values()))
    heads, channels, slope = first.heads, first.out_channels, first.negative_slope
    relations = sorted(edge_index)
    # the attention logits of every relation reading a node type: one matmul per type and side
    logits_src, logits_dst = {}, {}
    for side, logits, lin_att in (("src", logits_src, lambda c: (c.lin_src, c.att_src)),
                                  ("dst", logits_dst, lambda c: (c.lin_dst, c.att_dst))):
        for t in sorted({et[0] if side == "src" else et[2] for et in relations}):
            rels = [et for et in relations if (et[0] if side == "src" else et[2]) == t]
            x = h[t] if side == "src" else h[t][: num_dst[t]]
            both = x @ torch.cat([_folded(*lin_att(conv.convs[et])) for et in rels]).T
            for i, et in enumerate(rels):
                logits[et] = both[:, i * heads:(i + 1) * heads]
    out = {}
    for t in sorted({et[2] for et in relations}):
        n = num_dst[t]
        acc, bias = None, 0  # [n, heads, channels]
        for et in (et for et in relations if et[2] == t):
            gat, x = conv.convs[et], h[et[0]]
            csr = dst_csr(edge_index[et], n)
            if aggregate_first(x.shape[0], n, csr[1].shape[0], x.shape[1], heads * channels, heads, x.requires_grad):
                summed = gat_aggregate(x, logits_src[et], logits_dst[et], csr, slope, heads_first=True)
                weight = gat.lin_src.weight.view(heads, channels, -1).transpose(1, 2)  # [heads, in, C]
                part = torch.bmm(summed, weight).transpose(0, 1)  # [heads, n, C] read as [n, heads, C]
            else:
                projected = (x @ gat.lin_src.weight.T).view(-1, heads, channels)
                part = gat_aggregate(projected, logits_src[et], logits_dst[et], csr, slope)
            acc = part if acc is None else acc + part
            if gat.bias is not None:
                bias = bias + gat.bias
        out[t] = acc.reshape(n, heads * channels) + bias
    return out
