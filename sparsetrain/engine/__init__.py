"""The loader pipeline, the trainer, models from PyG layers, and distributed launch.

``Loader`` composes the data path's stages (:mod:`sparsetrain.engine.stages`) and overlaps them with compute; ``Trainer`` / ``fit``
run epochs with progress, evaluation, metrics logs and exact checkpoint/resume;
``GraphSAGE``, ``GCN``, ``GAT`` are PyG convolutions applied block by block;
``GraphTransformer`` interleaves exact sparse (edge) and dense (cluster) attention, with
``ClusterSampler`` bringing cluster ids into batches and ``SequenceShards`` for
cluster-aware sequence parallelism.
"""

from sparsetrain.engine.checkpoint import CheckpointError, load_latest_checkpoint, save_checkpoint
from sparsetrain.engine.distributed import DistributedError
from sparsetrain.engine.evaluate import accuracy, full_graph_evaluator, sampled_evaluator
from sparsetrain.engine.loader import EpochStats, Loader
from sparsetrain.engine.models import GAT, GCN, BlockGNN, GraphSAGE, block_adj_t, full_graph_inference
from sparsetrain.engine.precision import PRECISIONS, autocast
from sparsetrain.engine.stages import LoaderError
from sparsetrain.engine.trainer import Trainer, fit
from sparsetrain.engine.attention import Packing, cluster_attention, edge_attention, linear_attention
from sparsetrain.engine.graph_transformer import GraphTransformer
from sparsetrain.engine.gt_batches import BatchClusters, ClusteredMiniBatch, ClusterSampler, load_clusters
from sparsetrain.engine.sequence_parallel import SequenceParallelError, SequenceShards, head_to_seq, seq_to_head

__all__ = [
    "GAT", "GCN", "BlockGNN", "CheckpointError", "DistributedError", "EpochStats", "GraphSAGE", "Loader", "LoaderError", "PRECISIONS", "Trainer", "autocast",
    "accuracy", "block_adj_t", "fit", "full_graph_evaluator", "full_graph_inference", "load_latest_checkpoint",
    "sampled_evaluator", "save_checkpoint",
    "BatchClusters", "ClusterSampler", "ClusteredMiniBatch", "GraphTransformer", "Packing", "SequenceParallelError",
    "SequenceShards", "cluster_attention", "edge_attention", "head_to_seq", "linear_attention", "load_clusters", "seq_to_head",
]
