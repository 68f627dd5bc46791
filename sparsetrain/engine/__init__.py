"""The loader pipeline, the trainer, layer-wise inference, checkpoints and distributed launch.

``Loader`` composes the data path's stages (:mod:`sparsetrain.engine.stages`) and overlaps them with compute;
``Trainer`` / ``fit`` run epochs with progress, evaluation, metrics logs and exact checkpoint/resume;
``layerwise_inference`` runs a model layer by layer over the whole graph; ``train`` is the ``sparsetrain train`` run,
from a ``TrainSettings`` of one small settings object per concern. Models live in :mod:`sparsetrain.nn`,
``ClusterSampler`` in :mod:`sparsetrain.sampling`.
"""

from sparsetrain.engine.checkpoint import load_latest_checkpoint, save_checkpoint
from sparsetrain.engine.evaluate import accuracy, full_graph_evaluator, sampled_evaluator
from sparsetrain.engine.inference import layerwise_inference
from sparsetrain.engine.loader import EpochStats, Loader
from sparsetrain.engine.precision import PRECISIONS, autocast
from sparsetrain.engine.predict import load_model, predict
from sparsetrain.engine.run import train
from sparsetrain.engine.settings import (
    CheckpointSettings,
    DataSettings,
    FeatureSettings,
    ModelSettings,
    OptimSettings,
    ReportSettings,
    RunSettings,
    SamplingSettings,
    TrainSettings,
)
from sparsetrain.engine.trainer import Task, Trainer, fit
from sparsetrain.errors import CheckpointError, CollectiveError, LoaderError

__all__ = [
    "CheckpointError", "CollectiveError", "EpochStats", "Loader", "LoaderError", "PRECISIONS", "Task", "Trainer",
    "autocast",
    "accuracy", "fit", "full_graph_evaluator", "layerwise_inference", "load_latest_checkpoint", "load_model", "predict",
    "sampled_evaluator", "save_checkpoint",
    "CheckpointSettings", "DataSettings", "FeatureSettings", "ModelSettings", "OptimSettings", "ReportSettings",
    "RunSettings", "SamplingSettings", "TrainSettings", "train",
]
