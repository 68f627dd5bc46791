"""A training step with static shapes: a padded batch (:mod:`~sparsetrain.engine.static.padded_batch`), so one CUDA
graph replays every step.

The model, the loss and the optimizer see the same shapes every step (``StepShapes``), and :class:`StaticStep`
replays them as one CUDA graph (``mode="graph"``) or through ``torch.compile(mode="reduce-overhead")``
(``mode="compile"``), or runs them eagerly (``mode="eager"``, the CPU's, and the reference). Which mode a run takes is
its plan's (``RunPlan.capture``); this module only checks that the mode can hold, in one line.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparsetrain.engine.precision import autocast, check_precision
from sparsetrain.engine.static.padded_batch import StaticBatch
from sparsetrain.engine.static.shapes import StepShapes
from sparsetrain.errors import BackendError, SettingError
from sparsetrain.nn.models import BlockGNN

MODES = ("eager", "graph", "compile")


class StaticStep:
    """One optimizer step of a GraphSAGE ``model`` on padded batches: ``step(mb)`` returns the loss (mean cross
    entropy over the real seeds, a device tensor; read it when needed, it is no sync).

    ``mode``: ``"eager"`` (the CPU's, and the reference), ``"graph"`` (CUDA: the first ``warmup`` steps run eagerly on
    a side stream, then forward, backward and optimizer step are captured once and replayed; the optimizer needs
    ``capturable=True``), ``"compile"`` (``torch.compile(mode="reduce-overhead")`` of forward and loss); a run's is
    its plan's (``RunPlan.capture``). ``dtype``: the features'.
    """

    def __init__(self, model: BlockGNN, optimizer: torch.optim.Optimizer, shapes: StepShapes, num_features: int, *,
                 device: torch.device | str = "cpu", mode: str = "eager", precision: str = "fp32",
                 warmup: int = 3, dtype: torch.dtype = torch.float32) -> None:
        device = torch.device(device)
        _check(model, optimizer, device, mode, precision)
        self.model, self.optimizer, self.mode, self.precision = model, optimizer, mode, precision
        self.device, self.warmup = device, warmup
        self.batch = StaticBatch(shapes, num_features, device, dtype, csr=model.spmm)
        self.steps = 0
        self._graph: torch.cuda.CUDAGraph | None = None
        self._loss = torch.compile(self._forward_loss, mode="reduce-overhead") if mode == "compile" \
            else self._forward_loss

    def _forward_loss(self) -> torch.Tensor:
        b = self.batch
        with autocast(self.precision, self.device):
            out = self.model(b.x, b.blocks(), neighbor_mean=b.neighbor_mean)[: b.y.shape[0]]
            losses = F.cross_entropy(out.float(), b.y, reduction="none")
        return (losses * b.weight).sum() / b.count

    def _eager(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._loss()
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def step(self, mb) -> torch.Tensor:
        """Train on ``mb`` (``x``/``y`` attached, on this step's device), or on :attr:`batch` itself as it stands
        (sampled there by :meth:`StaticBatch.sample`); the real seeds' mean loss."""
        if mb is not self.batch:
            self.batch.load(mb)
        self.steps += 1
        if self.mode != "graph":
            return self._eager()
        if self._graph is None and self.steps <= self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                loss = self._eager()
            torch.cuda.current_stream(self.device).wait_stream(side)
            return loss
        if self._graph is None:
            self._capture()
        self._graph.replay()
        return self._static_loss.clone()

    def _capture(self) -> None:
        """Capture forward, backward and optimizer step once, in thread-local capture mode (a loader thread filling
        the next batch meanwhile is not part of it and may allocate or wait); a failure raises
        :class:`~sparsetrain.errors.BackendError` naming why, never an eager run."""
        self.optimizer.zero_grad(set_to_none=True)  # gradients are allocated from the graph's pool, then kept
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                loss = self._loss()
                loss.backward()
                self.optimizer.step()
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise BackendError(f"capturing the static step as a CUDA graph failed ({type(exc).__name__}: {reason}); "
                               "run without capture: drop --step static (or StaticStep(mode='eager'))") from exc
        self._graph = graph
        self._static_loss = loss.detach()


def _check(model, optimizer, device: torch.device, mode: str, precision: str) -> None:
    if mode not in MODES:
        raise SettingError(f"mode={mode!r}; choose one of {', '.join(MODES)}")
    if not isinstance(model, BlockGNN) or model.kind != "sage":
        kind = getattr(model, "kind", type(model).__name__)
        raise SettingError(f"a padded step trains GraphSAGE only, not {kind}: PyG's GCN and GAT layers add self loops "
                           "by boolean masks, whose shapes depend on the data; use the eager step for them")
    if mode == "graph" and device.type != "cuda":
        raise SettingError(f"mode='graph' captures a CUDA graph and needs a CUDA device, not {device}; use "
                           "mode='eager'")
    if mode == "graph" and not all(group.get("capturable", False) for group in optimizer.param_groups):
        raise SettingError(f"mode='graph' replays the optimizer step: build {type(optimizer).__name__} with "
                           "capturable=True")
    check_precision(precision, device)


__all__ = ["MODES", "StaticStep"]
