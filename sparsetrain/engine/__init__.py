"""The loader pipeline, the trainer, layer-wise inference, checkpoints and distributed launch.

``Loader`` composes the data path's stages (:mod:`sparsetrain.engine.stages`) and overlaps them with compute;
``Trainer`` / ``fit`` run epochs with progress, evaluation, metrics logs and exact checkpoint/resume;
``layerwise_inference`` runs a model layer by layer over the whole graph; ``train`` is the ``sparsetrain train`` run,
from a ``TrainSettings`` of one small settings object per concern. Models live in :mod:`sparsetrain.nn`,
``ClusterSampler`` in :mod:`sparsetrain.sampling`.
"""

from sparsetrain._deprecation import moved_attribute
from sparsetrain.engine.checkpoint import CheckpointError, load_latest_checkpoint, save_checkpoint
from sparsetrain.engine.distributed import DistributedError
from sparsetrain.engine.evaluate import accuracy, full_graph_evaluator, sampled_evaluator
from sparsetrain.engine.inference import layerwise_inference
from sparsetrain.engine.loader import EpochStats, Loader
from sparsetrain.engine.precision import PRECISIONS, autocast
from sparsetrain.engine.run import train
from sparsetrain.engine.settings import (CheckpointSettings, DataSettings, FeatureSettings, ModelSettings,
                                         OptimSettings, ReportSettings, RunSettings, SamplingSettings, TrainSettings)
from sparsetrain.engine.stages import LoaderError
from sparsetrain.engine.trainer import Task, Trainer, fit

__all__ = [
    "CheckpointError", "DistributedError", "EpochStats", "Loader", "LoaderError", "PRECISIONS", "Task", "Trainer",
    "autocast",
    "accuracy", "fit", "full_graph_evaluator", "layerwise_inference", "load_latest_checkpoint",
    "sampled_evaluator", "save_checkpoint",
    "CheckpointSettings", "DataSettings", "FeatureSettings", "ModelSettings", "OptimSettings", "ReportSettings",
    "RunSettings", "SamplingSettings", "TrainSettings", "train",
]

_MOVED = {
    **dict.fromkeys(("GAT", "GCN", "BlockGNN", "GraphSAGE", "block_adj_t"), "sparsetrain.nn.models"),
    **dict.fromkeys(("Packing", "cluster_attention", "edge_attention", "linear_attention"), "sparsetrain.nn.attention"),
    "GraphTransformer": "sparsetrain.nn.graph_transformer",
    **dict.fromkeys(("SequenceParallelError", "SequenceShards", "head_to_seq", "seq_to_head"),
                    "sparsetrain.nn.sequence_parallel"),
    **dict.fromkeys(("BatchClusters", "ClusteredMiniBatch", "ClusterSampler"), "sparsetrain.sampling.clusters"),
    "load_clusters": "sparsetrain.datasets.dataset",
}
"""Names that lived here in 0.1 and moved to ``sparsetrain.nn`` / ``.sampling`` / ``.datasets``; kept for one
release."""


def __getattr__(name: str):
    if name == "full_graph_inference":  # renamed: the function itself warns when called
        from sparsetrain.engine.inference import full_graph_inference

        return full_graph_inference
    return moved_attribute(__name__, _MOVED, name)
