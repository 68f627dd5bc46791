"""The loader pipeline, the trainer, models from PyG layers, and distributed launch.

``Loader`` overlaps sampling and feature gathering with compute; ``Trainer`` / ``fit``
run epochs with progress, evaluation, metrics logs and exact checkpoint/resume;
``GraphSAGE``, ``GCN``, ``GAT`` are PyG convolutions applied block by block.
"""

from sparsetrain.engine.checkpoint import CheckpointError, load_latest_checkpoint, save_checkpoint
from sparsetrain.engine.distributed import DistributedError
from sparsetrain.engine.evaluate import accuracy, full_graph_evaluator, sampled_evaluator
from sparsetrain.engine.loader import EpochStats, Loader
from sparsetrain.engine.models import GAT, GCN, BlockGNN, GraphSAGE, block_adj_t, full_graph_inference
from sparsetrain.engine.trainer import Trainer, fit

__all__ = [
    "GAT", "GCN", "BlockGNN", "CheckpointError", "DistributedError", "EpochStats", "GraphSAGE", "Loader", "Trainer",
    "accuracy", "block_adj_t", "fit", "full_graph_evaluator", "full_graph_inference", "load_latest_checkpoint",
    "sampled_evaluator", "save_checkpoint",
]
