"""Node-classification accuracy: exact (full neighborhoods, layer by layer) or on sampled blocks."""

from __future__ import annotations

import torch

from sparsetrain.engine.inference import infer_layers
from sparsetrain.engine.loader import Loader
from sparsetrain.storage.rows import gather_rows

EVAL_EPOCH = 2**20
"""Evaluation samples under an epoch number training never reaches, so its batches never repeat training's."""


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return (logits.argmax(dim=-1) == labels).double().mean().item() if len(labels) else float("nan")


def full_graph_evaluator(features, labels: torch.Tensor, graph, split: dict[str, torch.Tensor], device="cpu", *,
                         batch_size: int = 4096, memory_budget: int | None = None):
    """``evaluate(model) -> {"val_acc", "test_acc"}`` using exact layer-wise inference over the whole graph
    (:func:`~sparsetrain.engine.layerwise_inference`; layer tables above ``memory_budget`` bytes go to disk)."""

    def evaluate(model) -> dict:
        out = infer_layers(model, features, graph, batch_size, torch.device(device), memory_budget, None)
        result = {f"{name}_acc": accuracy(gather_rows(out, idx).float(), labels[idx]) for name,
                  idx in split.items() if name != "train"}
        if not isinstance(out, torch.Tensor):
            out.close()
            out.path.unlink(missing_ok=True)
        return result

    return evaluate


def sampled_evaluator(sampler, features, labels: torch.Tensor, split: dict[str, torch.Tensor], *, batch_size: int,
                      device="cpu"):
    """``evaluate(model)`` on sampled blocks (for graphs too large for full-graph inference)."""
    return loaders_evaluator({name: Loader(sampler, features, labels, idx, batch_size=batch_size, shuffle=False,
                                           device=device)
                              for name, idx in split.items() if name != "train"})


def loaders_evaluator(loaders: dict, reduce=None):
    """``evaluate(model) -> {"<name>_acc"}`` over one loader per split; ``reduce(counts)`` sums the float64
    ``[correct, total]`` in place over the ranks that each evaluate their share (None: one process)."""

    @torch.no_grad()
    def evaluate(model) -> dict:
        was_training = model.training
        model.eval()
        result = {}
        for name, loader in loaders.items():
            counts = torch.zeros(2, dtype=torch.float64)
            for mb in loader.epoch(EVAL_EPOCH):
                if len(mb.y):  # a rank's padding batch has no seeds
                    counts[0] += (model(mb.x, mb.to_pyg()).argmax(dim=-1) == mb.y).sum().item()
                counts[1] += len(mb.y)
            if reduce is not None:
                reduce(counts)
            result[f"{name}_acc"] = (counts[0] / counts[1]).item() if counts[1] else float("nan")
        model.train(was_training)
        return result

    return evaluate
