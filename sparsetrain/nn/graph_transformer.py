"""``GraphTransformer``: dual-interleaved sparse (edge) and dense (cluster) attention layers.

Per hop of a sampled batch, one *sparse* layer lets every destination attend, with an
exact softmax, to its sampled in-neighbors and itself (scores per edge, never N²), and
one *cluster* layer lets the surviving nodes attend densely within their cluster
(block-diagonal), optionally plus a global linear-attention term over their subgraph.
Layers are pre-norm transformer blocks (attention, then optionally a feed-forward net,
each with a residual). So the layer sequence is sparse, cluster, sparse, cluster, ...

Two ways in:

- ``model(x, blocks)`` on a sampled batch, exactly like :class:`~sparsetrain.nn.BlockGNN`
  (the Loader and Trainer work unchanged). Cluster ids arrive as the trailing
  :class:`~sparsetrain.sampling.clusters.BatchClusters` of ``ClusteredMiniBatch.to_pyg()``
  (wrap the sampler in :class:`~sparsetrain.sampling.clusters.ClusterSampler`); without it,
  each connected subgraph of the batch is one cluster. Attention never crosses subgraphs.
- ``model.forward_sequence(x, edge_index, cluster_ptr)`` on one long node sequence (every
  layer maps all N nodes to N nodes), optionally sequence-parallel over ranks holding whole
  clusters (``shards=SequenceShards.from_clusters(cluster_ptr)``; ``x`` is then the rank's slice).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sparsetrain.errors import SettingError
from sparsetrain.nn.attention import Packing, add_self_loops, cluster_attention, edge_attention, linear_attention
from sparsetrain.nn.sequence_parallel import SequenceShards, head_to_seq, seq_to_head
from sparsetrain.sampling.clusters import DEFAULT_MAX_CLUSTER_SIZE, BatchClusters, batch_groups


class _TransformerLayer(nn.Module):
    """Pre-norm block: ``h + attention(LN(h))`` then ``h + FFN(LN(h))``; the attention itself is chosen by
    subclasses."""

    def __init__(self, dim: int, heads: int, dropout: float, ffn_factor: int):
        super().__init__()
        if dim % heads:
            raise SettingError(f"hidden size {dim} is not divisible by {heads} heads; pick a multiple of heads")
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        self.ffn_norm = nn.LayerNorm(dim) if ffn_factor else None
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_factor * dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(ffn_factor * dim, dim)) if ffn_factor else None
        self.dropout = dropout

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(t.shape[0], self.heads, -1)

    def _qkv(self, h_dst_normed: torch.Tensor, h_src_normed: torch.Tensor):
        k, v = self.kv(h_src_normed).chunk(2, dim=-1)
        return self._split(self.q(h_dst_normed)), self._split(k), self._split(v)

    def _finish(self, residual: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        h = residual + F.dropout(self.out(attended.reshape(attended.shape[0], -1)), self.dropout, self.training)
        return h if self.ffn is None else h + F.dropout(self.ffn(self.ffn_norm(h)), self.dropout, self.training)


class SparseAttentionLayer(_TransformerLayer):
    """Every destination attends to the sources of its edges (self loop included): exact, O(E·heads) scores."""

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, num_dst: int,
                shards: SequenceShards | None = None) -> torch.Tensor:
        """``h`` [num_src, dim] -> [num_dst, dim]; ``edge_index`` [2, E] local (src, dst) with self loops.

        With ``shards`` (sequence mode), ``h`` is this rank's slice and ``edge_index`` spans the whole sequence.
        """
        hn = self.norm(h)
        q, k, v = self._qkv(hn[:num_dst], hn)
        if shards is None:
            return self._finish(h[:num_dst], edge_attention(q, k, v, edge_index))
        q, k, v = (seq_to_head(t, shards) for t in (q, k, v))
        return self._finish(h, head_to_seq(edge_attention(q, k, v, edge_index), shards))


class ClusterAttentionLayer(_TransformerLayer):
    """Dense attention within each cluster (block-diagonal), plus an optional global linear-attention term."""

    def __init__(self, dim: int, heads: int, dropout: float, ffn_factor: int, global_attention: bool = False):
        super().__init__(dim, heads, dropout, ffn_factor)
        self.global_attention = global_attention

    def forward(self, h: torch.Tensor, clusters: Packing, subgraphs: Packing | None = None,
                shards: SequenceShards | None = None) -> torch.Tensor:
        """``h`` [N, dim] -> [N, dim]. ``clusters`` packs the nodes for dense attention; ``subgraphs`` bounds
        the global term (None: all nodes). With ``shards``, ``clusters`` is local and the global term spans all
        ranks."""
        hn = self.norm(h)
        q, k, v = self._qkv(hn, hn)
        attended = cluster_attention(q, k, v, clusters)
        if self.global_attention:
            if shards is None:
                attended = attended + linear_attention(q, k, v, subgraphs)
            else:
                qh, kh, vh = (seq_to_head(t, shards) for t in (q, k, v))
                attended = attended + head_to_seq(linear_attention(qh, kh, vh, subgraphs), shards)
        return self._finish(h, attended)


class GraphTransformer(nn.Module):
    """Graph transformer over sampled blocks (``forward``) or one node sequence (``forward_sequence``).

    ``num_layers`` sparse layers (one per hop), each followed by a cluster layer when
    ``cluster_layers``; ``global_attention`` adds a linear-attention term to the cluster
    layers; ``cross_subgraph=True`` lets a batch's independent subgraphs attend to each
    other (cluster and global terms). ``max_cluster_size`` caps a dense group.
    ``ffn_factor`` > 0 adds a feed-forward net of that width factor after every attention
    (off by default: on Cora's 140 labels it cost 4-5 points of accuracy, as the extra
    parameters overfit; large graphs may want 2 or 4).
    """

    kind = "gt"

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int = 2, *,
                 heads: int = 4, dropout: float = 0.5, input_dropout: float | None = None, ffn_factor: int = 0,
                 cluster_layers: bool = True, global_attention: bool = False, cross_subgraph: bool = False,
                 max_cluster_size: int = DEFAULT_MAX_CLUSTER_SIZE):
        super().__init__()
        if num_layers < 1:
            raise SettingError(f"num_layers={num_layers} must be at least 1")
        self.dropout = dropout
        self.input_dropout = dropout if input_dropout is None else input_dropout
        self.cross_subgraph = cross_subgraph
        self.max_cluster_size = max_cluster_size
        self.embed = nn.Linear(in_channels, hidden_channels)
        self.sparse = nn.ModuleList(SparseAttentionLayer(hidden_channels, heads, dropout, ffn_factor)
                                    for _ in range(num_layers))
        self.cluster = nn.ModuleList(ClusterAttentionLayer(hidden_channels, heads, dropout, ffn_factor,
                                                           global_attention)
                                     for _ in range(num_layers if cluster_layers else 0))
        self.head_norm = nn.LayerNorm(hidden_channels)
        self.head = nn.Linear(hidden_channels, out_channels)

    @property
    def num_layers(self) -> int:
        return len(self.sparse)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(F.dropout(x, self.input_dropout, self.training))

    def _readout(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(self.head_norm(h))

    def forward(self, x: torch.Tensor, blocks: Sequence) -> torch.Tensor:
        """``x``: features of the outermost block's sources; ``blocks``: ``MiniBatch.to_pyg()`` (outermost first),
        optionally followed by the batch's :class:`BatchClusters` (``ClusteredMiniBatch.to_pyg()``)."""
        blocks = list(blocks)
        groups = blocks.pop() if blocks and isinstance(blocks[-1], BatchClusters) else None
        if len(blocks) != self.num_layers:
            raise SettingError(f"got {len(blocks)} blocks for a {self.num_layers}-layer model; use one fanout per "
                               "layer")
        if groups is None and len(self.cluster):
            groups = batch_groups(blocks, x.shape[0], max_cluster_size=self.max_cluster_size,
                                  cross_subgraph=self.cross_subgraph)
            groups = groups.to(x.device)
        h = self._embed(x)
        for i, (edge_index, (_, num_dst)) in enumerate(blocks):
            h = self.sparse[i](h, add_self_loops(edge_index, num_dst), num_dst)
            if len(self.cluster):
                clusters = Packing.from_groups(groups.clusters[:num_dst])
                subgraphs = None
                if self.cluster[i].global_attention and not self.cross_subgraph:
                    subgraphs = Packing.from_groups(groups.subgraphs[:num_dst])
                h = self.cluster[i](h, clusters, subgraphs)
        return self._readout(h)

    def forward_sequence(self, x: torch.Tensor, edge_index: torch.Tensor, cluster_ptr: torch.Tensor | None = None, *,
                         shards: SequenceShards | None = None) -> torch.Tensor:
        """All layers over one node sequence: ``x`` [N, in] (with ``shards``: this rank's [hi - lo, in] slice),
        ``edge_index`` [2, E] over all N nodes, ``cluster_ptr`` [K + 1] cluster boundaries (None: one cluster
        per ``max_cluster_size`` consecutive nodes). Returns logits for the same nodes as ``x``."""
        n_total = shards.num_nodes if shards is not None else x.shape[0]
        if cluster_ptr is None:
            step = self.max_cluster_size
            cluster_ptr = torch.arange(0, n_total + step, step).clamp_max(n_total).unique()
        cluster_ptr = cluster_ptr.to(x.device)
        local_ptr = cluster_ptr if shards is None else shards.local_cluster_pointers(cluster_ptr)
        clusters = Packing.from_pointers(local_ptr)
        edges = add_self_loops(edge_index.to(x.device), n_total)
        h = self._embed(x)
        for i in range(self.num_layers):
            h = self.sparse[i](h, edges, h.shape[0], shards)
            if len(self.cluster):
                h = self.cluster[i](h, clusters, None, shards)
        return self._readout(h)
