"""Models and their kernels: GNNs from PyG layers, the graph transformer, attention and dropout.

``GraphSAGE``, ``GCN``, ``GAT`` are PyG convolutions applied block by block (a
``BlockGNN``); ``LinkPredictor`` pairs such an encoder with a ``DotDecoder`` or ``MLPDecoder``; ``RGCN`` is their typed
counterpart (a ``HeteroConv`` of per-relation convolutions per
block of a typed ``MiniBatch``), ``RGAT`` MLPerf's relational GAT;
``GraphTransformer`` interleaves exact sparse (edge) and dense (cluster)
attention (``edge_attention``, ``cluster_attention`` with a ``Packing``, ``linear_attention``),
with ``SequenceShards`` for cluster-aware sequence parallelism over ranks.
"""

from sparsetrain.errors import SettingError
from sparsetrain.nn.attention import Packing, cluster_attention, edge_attention, linear_attention
from sparsetrain.nn.dropout import dropout, relu_dropout
from sparsetrain.nn.graph_transformer import GraphTransformer
from sparsetrain.nn.link import DotDecoder, LinkPredictor, MLPDecoder
from sparsetrain.nn.models import GAT, GCN, BlockGNN, GraphSAGE
from sparsetrain.nn.rgat import RGAT
from sparsetrain.nn.rgcn import RGCN
from sparsetrain.nn.sequence_parallel import SequenceShards, head_to_seq, seq_to_head

__all__ = [
    "GAT", "GCN", "BlockGNN", "GraphSAGE", "GraphTransformer", "RGAT", "RGCN",
    "DotDecoder", "LinkPredictor", "MLPDecoder",
    "Packing", "cluster_attention", "edge_attention", "linear_attention",
    "dropout", "relu_dropout",
    "SettingError", "SequenceShards", "head_to_seq", "seq_to_head",
]
