"""GNNs built from PyG convolutions, computed block by block on sampled minibatches.

Layer ``l`` receives the features of block ``l``'s source nodes and produces
features only for its destination nodes, which are the first ``num_dst`` source
nodes and exactly the sources of block ``l + 1``. The same layers also run
layer-wise over the full graph for exact evaluation
(:func:`sparsetrain.engine.layerwise_inference`, through :meth:`BlockGNN.layer`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sparsetrain.errors import SettingError
from sparsetrain.nn.dropout import relu_dropout

PygBlock = tuple[torch.Tensor, tuple[int, int]]
"""One hop as PyG takes it: (edge_index [2, E] local src -> dst, (num_src, num_dst)), or a sparse ``adj_t``."""

BLOCK_GNNS = ("sage", "gcn", "gat")
MODELS = (*BLOCK_GNNS, "gt")  # "gt": sparsetrain.nn.graph_transformer.GraphTransformer


def block_adj_t(edge_index: torch.Tensor, num_src: int, num_dst: int,
                dtype: torch.dtype = torch.float32, dst_sorted: bool = False) -> torch.Tensor:
    """The block's transposed adjacency as a torch sparse CSR tensor [num_dst, num_src] of ``dtype`` ones.

    PyG convolutions given this instead of ``edge_index`` aggregate with one SpMM (whose
    values must have the features' dtype). ``dst_sorted``: the edges come grouped by destination in ascending order
    (a sampler's blocks, :class:`~sparsetrain.sampling.minibatch.BlockSize`), so they are taken as they are. On a GPU
    nothing here waits for the device: the order is not checked (unsorted edges are sorted) and the row pointers are
    found by a search in the destinations, not by a count whose size is read back.
    """
    src, dst = edge_index[0], edge_index[1]
    device = edge_index.device
    if _reads_for_free(device):  # (host memory: reading the order and the counts costs no wait)
        if not dst_sorted and dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
            order = torch.argsort(dst, stable=True)
            src, dst = src[order], dst[order]
        crow = torch.zeros(num_dst + 1, dtype=torch.int64, device=device)
        crow[1:] = torch.cumsum(torch.bincount(dst, minlength=num_dst), 0)
    else:
        if not dst_sorted:
            dst, order = torch.sort(dst, stable=True)
            src = src[order]
        crow = torch.searchsorted(dst, torch.arange(num_dst + 1, dtype=dst.dtype, device=device))
    values = torch.ones(src.numel(), dtype=dtype, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, src, values, size=(num_dst, num_src))


def _reads_for_free(device: torch.device) -> bool:
    """Whether reading values of tensors on ``device`` costs no host wait (host memory)."""
    return device.type == "cpu"


class _SourcesAndTargets(torch.autograd.Function):
    """``(x, x[:num_dst])`` whose backward sums both gradients in one pass.

    With a plain slice, autograd builds a zero tensor the size of ``x`` for the
    slice's gradient and then adds it to the aggregation's: three passes over
    the largest activation of the step instead of one.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, num_dst: int):
        ctx.num_dst, ctx.num_src = num_dst, x.shape[0]
        return x.view_as(x), x[:num_dst]

    @staticmethod
    def backward(ctx, grad_all: torch.Tensor | None, grad_dst: torch.Tensor | None):
        n = ctx.num_dst
        if grad_dst is None:
            return grad_all, None
        if grad_all is None:
            grad_all = grad_dst.new_zeros((ctx.num_src, *grad_dst.shape[1:]))
        return torch.cat([grad_all[:n] + grad_dst, grad_all[n:]]), None


def sources_and_targets(x: torch.Tensor, num_dst: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(x_src, x_dst)`` pair a bipartite PyG convolution takes; dst nodes are the first ``num_dst`` sources."""
    if not x.requires_grad:
        return x, x[:num_dst]
    return _SourcesAndTargets.apply(x, num_dst)


class BlockGNN(nn.Module):
    """A stack of PyG convolutions applied block by block. Use :func:`GraphSAGE`, :func:`GCN` or :func:`GAT`.

    ``spmm=True`` (SAGE only) hands each layer the block's sparse ``adj_t`` so PyG aggregates with one SpMM.
    """

    def __init__(self, kind: str, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int,
                 dropout: float = 0.5, heads: int = 4, norm: bool = False, spmm: bool = True):
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv, SAGEConv

        if kind not in BLOCK_GNNS:
            raise SettingError(f"model {kind!r} is not known; choose one of {', '.join(BLOCK_GNNS)}")
        if num_layers < 1:
            raise SettingError(f"num_layers={num_layers} must be at least 1")
        self.kind = kind
        self.dropout = dropout
        # SAGE aggregates a block with one sparse matmul (adj_t @ x) instead of a scatter: about 2x faster on CPU
        self.spmm = spmm and kind == "sage"
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        for layer, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
            last = layer == num_layers - 1
            if kind == "sage":
                conv = SAGEConv(d_in, d_out)
            elif kind == "gcn":
                conv = GCNConv(d_in, d_out, cached=False)
            else:
                conv = GATConv(d_in, d_out if last else d_out // heads, heads=1 if last else heads, add_self_loops=True)
            self.convs.append(conv)
            if not last:
                self.norms.append(nn.LayerNorm(d_out) if norm else nn.Identity())

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, x: torch.Tensor, edge_index: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """Layer ``i`` on one bipartite block: features of the ``size[1]`` dst nodes."""
        num_src, num_dst = size
        conv = self.convs[i]
        if self.kind == "gcn":  # GCNConv takes one node set: run on the sources, keep the dst rows
            out = conv(x, edge_index)[:num_dst]
        else:
            adj = edge_index
            if self.spmm and adj.layout == torch.strided:
                adj = block_adj_t(adj, num_src, num_dst, x.dtype, dst_sorted=getattr(size, "dst_sorted", False))
            # a prebuilt adj_t, features in another precision
            elif adj.layout != torch.strided and adj.dtype != x.dtype:
                adj = adj.to(x.dtype)
            out = conv(sources_and_targets(x, num_dst), adj)
        return self._activate(i, out)

    def _activate(self, i: int, out: torch.Tensor) -> torch.Tensor:
        if i < self.num_layers - 1:
            out = relu_dropout(self.norms[i](out), self.dropout, self.training)
        return out

    def _first_layer_from_mean(self, x_dst: torch.Tensor, neighbor_mean: torch.Tensor) -> torch.Tensor:
        """Layer 0 given its aggregation: ``lin_l(neighbor_mean) + lin_r(x_dst)`` (then ``normalize`` if set), what
        a mean-aggregating ``SAGEConv`` computes on the block whose per-dst mean ``neighbor_mean`` is."""
        conv = self.convs[0]
        if self.kind != "sage" or conv.aggr != "mean" or getattr(conv, "project", False):
            raise SettingError(f"neighbor_mean (a fused last hop) feeds a mean-aggregating SAGEConv without project; "
                               f"the first layer is {conv!r}: sample the batch unfused")
        if neighbor_mean.shape[0] != x_dst.shape[0]:
            raise SettingError(f"neighbor_mean has {neighbor_mean.shape[0]} rows but x {x_dst.shape[0]}; pass the "
                               "fused batch's features of its input_nodes")
        out = conv.lin_l(neighbor_mean.to(x_dst.dtype))
        if conv.root_weight:
            out = out + conv.lin_r(x_dst)
        if conv.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return self._activate(0, out)

    def forward(self, x: torch.Tensor, blocks: Sequence[PygBlock],
                neighbor_mean: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: features of the outermost block's sources; ``blocks``: ``MiniBatch.to_pyg()``, outermost first.

        ``neighbor_mean``: the first layer's mean over each dst node's sampled in-neighbours, from a fused last hop
        (``FusedMiniBatch.last_hop.mean(features)``); ``x`` is then the features of that layer's dst nodes (the fused
        batch's ``input_nodes``) and ``blocks`` the layers after it.
        """
        first = 0 if neighbor_mean is None else 1
        if len(blocks) != self.num_layers - first:
            fused = " (and a fused last hop)" if first else ""
            raise SettingError(f"got {len(blocks)} blocks{fused} for a {self.num_layers}-layer model; use one fanout "
                               "per layer")
        if first:
            x = self._first_layer_from_mean(x, neighbor_mean)
        for i, (edge_index, size) in enumerate(blocks, first):
            x = self.layer(i, x, edge_index, size)
        return x


def GraphSAGE(in_channels: int, hidden_channels: int, out_channels: int, num_layers: int = 2, dropout: float = 0.5,
              **kw) -> BlockGNN:
    """GraphSAGE (mean aggregation) from PyG's ``SAGEConv``."""
    return BlockGNN("sage", in_channels, hidden_channels, out_channels, num_layers, dropout, **kw)


def GCN(in_channels: int, hidden_channels: int, out_channels: int, num_layers: int = 2, dropout: float = 0.5,
        **kw) -> BlockGNN:
    """GCN from PyG's ``GCNConv`` (symmetric normalization within each sampled block)."""
    return BlockGNN("gcn", in_channels, hidden_channels, out_channels, num_layers, dropout, **kw)


def GAT(in_channels: int, hidden_channels: int, out_channels: int, num_layers: int = 2, dropout: float = 0.5,
        heads: int = 4, **kw) -> BlockGNN:
    """GAT from PyG's ``GATConv`` (``heads`` concatenated in hidden layers, one head at the output)."""
    return BlockGNN("gat", in_channels, hidden_channels, out_channels, num_layers, dropout, heads=heads, **kw)


def build_model(kind: str, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int,
                dropout: float = 0.5, input_dropout: float | None = None, heads: int = 4) -> nn.Module:
    """The model ``kind`` (sage, gcn, gat or gt); ``input_dropout`` applies to the graph transformer only, ``heads``
    (attention heads of the hidden layers) to gat and gt."""
    if kind == "gt":
        from sparsetrain.nn.graph_transformer import GraphTransformer

        return GraphTransformer(in_channels, hidden_channels, out_channels, num_layers, dropout=dropout,
                                input_dropout=input_dropout, heads=heads)
    return BlockGNN(kind, in_channels, hidden_channels, out_channels, num_layers, dropout, heads=heads)
