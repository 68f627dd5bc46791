"""The trainer reads each step's loss when it has reached host memory (issue 36 item 3): no host wait a step unless
the host runs ``RING`` steps ahead, and the same losses, weights, metrics log, errors and checkpoints as a trainer that
read every loss at once. Off a GPU the reads are immediate, so a stand-in for the device's events makes them late."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

import sparsetrain as st
from sparsetrain.engine.checkpoint import list_checkpoints, load_latest_checkpoint
from sparsetrain.engine.late_loss import LossRing
from sparsetrain.engine.settings import CheckpointSettings, ReportSettings
from sparsetrain.engine.trainer import Task
from sparsetrain.errors import DatasetError, TrainingDivergedError

RING = LossRing.RING
NODES, BATCH = 60, 8  # 8 batches an epoch, the last of 4 seeds


class Device:
    """Events of a device that runs ``lag`` steps behind the host (``None``: finishes nothing until waited for)."""

    def __init__(self, lag: int | None) -> None:
        self.lag, self.recorded, self.finished = lag, 0, 0

    def record(self, values):
        self.recorded += 1
        if self.lag is not None:
            self.finished = max(self.finished, self.recorded - self.lag)
        return self.recorded - 1

    def done(self, event) -> bool:
        return event < self.finished

    def wait(self, event) -> None:
        self.finished = max(self.finished, event + 1)


@pytest.mark.parametrize("lag", range(2 * RING))
def test_the_host_waits_only_when_it_runs_ring_steps_ahead(lag):
    device, read = Device(lag), []
    ring = LossRing(device)
    for step in range(20):
        ring.push(torch.tensor([float(step), 0.0]), read.append)
        assert len(read) == max(0, step + 1 - min(lag, RING - 1))  # the newest step read is at most RING - 1 behind
    assert ring.step_waits == (0 if lag < RING else 20 - (RING - 1))
    ring.drain()
    assert read == [[float(s), 0.0] for s in range(20)] and ring.drain_waits == min(lag, RING - 1)


def _data(bad_labels: dict | None = None):
    g = torch.Generator().manual_seed(0)
    graph = st.CSCGraph.from_edge_index(torch.randint(0, NODES, (2, 8 * NODES), generator=g), NODES)
    x, labels = torch.randn(NODES, 6, generator=g), torch.arange(NODES) % 3
    for node, label in (bad_labels or {}).items():
        labels[node] = label
    return x, labels, graph


def _loader(data):
    x, labels, graph = data
    return st.Loader(st.NeighborSampler(graph, [4, 3]), x, labels, torch.arange(NODES), batch_size=BATCH, seed=1)


def _model():
    torch.manual_seed(0)
    return st.GraphSAGE(6, 16, 3, num_layers=2, dropout=0.3)  # dropout: the RNG must be drawn as the reference's


def _reference(epochs: int, nan_at: int | None = None) -> tuple[list[dict], dict]:
    """Today's step, written out: ``loss.item()`` before backward, every step. Its step records and weights."""
    model, loader = _model(), _loader(_data())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    records, step = [], 0
    for epoch in range(epochs):
        model.train()
        for mb in loader.epoch(epoch):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(mb.x, mb.to_pyg()).float(), mb.y)
            step += 1
            records.append({"step": step, "epoch": epoch, "loss": loss.item()})
            loss.backward()
            optimizer.step()
            if step == nan_at:
                return records, model.state_dict()
    return records, model.state_dict()


def _nan_at(step: int) -> Task:
    """Cross entropy, times NaN at the ``step``-th call."""
    calls = []

    def loss_fn(out, target):
        calls.append(1)
        return F.cross_entropy(out, target) * (math.nan if len(calls) == step else 1.0)

    return Task(loss_fn=loss_fn)


def _trainer(tmp_path, lag, epochs=2, task=Task(), data=None, every=0, resume=False, max_steps=None):
    model = _model()
    trainer = st.Trainer(model, _loader(data or _data()), torch.optim.Adam(model.parameters(), lr=0.01),
                         epochs=epochs, max_steps=max_steps, task=task,
                         checkpoints=CheckpointSettings(tmp_path / "ck", every=every, resume=resume),
                         report=ReportSettings(log=tmp_path / "m.jsonl", quiet=True))
    if lag != "cpu":
        trainer.loss_ring = LossRing(Device(lag))
    return trainer


def _log(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("lag", ["cpu", 2, None])
def test_a_finite_run_logs_and_learns_exactly_as_reading_every_loss_at_once(tmp_path, lag):
    expected, weights = _reference(epochs=2)
    trainer = _trainer(tmp_path, lag, every=5)
    summary = trainer.fit()
    log = _log(tmp_path)
    assert [r for r in log if "loss" in r] == expected  # each step's own number and epoch, in order
    epochs = [r for r in log if "train_loss" in r]
    per_epoch = [[r["loss"] for r in expected if r["epoch"] == e] for e in range(2)]
    assert [r["train_loss"] for r in epochs] == [sum(losses) / len(losses) for losses in per_epoch]
    assert [log.index(r) for r in epochs] == [8, 17]  # each after its 8 steps' records
    assert _same_weights(trainer.model.state_dict(), weights)
    assert _same_weights(load_latest_checkpoint(tmp_path / "ck")["model"], weights)
    # stalled: a wait at the 4th and 5th step queued since the last drain (steps 4, 5, 14, 15; drains at 5, 8, 10, 15)
    waits = {"cpu": 0, 2: 0, None: 4}[lag]
    assert trainer.loss_ring.step_waits == waits and summary["loss_waits_per_step"] == waits / 16


@pytest.mark.parametrize("lag", ["cpu", None])
def test_a_nan_at_step_5_names_it_and_no_checkpoint_holds_its_update(tmp_path, lag):
    trainer = _trainer(tmp_path, lag, task=_nan_at(5), every=2)
    with pytest.raises(TrainingDivergedError) as info:
        trainer.fit()
    noticed = "" if lag == "cpu" else ", read at step 6"  # stalled: unread until step 6's checkpoint drains the ring
    assert str(info.value) == (f"the loss became nan at step 5 (epoch 1, batch 5{noticed}): the training diverged; "
                               "lower the learning rate (--lr) or check the features for extreme values")
    assert [p.name for p in list_checkpoints(tmp_path / "ck")] == ["step-0000000004.pt", "step-0000000002.pt"]
    records, weights = _reference(epochs=1, nan_at=4)
    saved = load_latest_checkpoint(tmp_path / "ck")["model"]
    assert all(torch.isfinite(t).all() for t in saved.values()) and _same_weights(saved, weights)
    assert _log(tmp_path) == records  # steps 1-4, read before their checkpoint; nothing after


@pytest.mark.parametrize("lag", ["cpu", None])
def test_class_targets_out_of_range_name_their_step_and_seeds_when_read_late(tmp_path, lag):
    bad = {17: 3, 20: -2}
    data = _data(bad_labels=bad)
    order = [mb.seeds.tolist() for mb in _loader(data).epoch(0)]
    step = next(i + 1 for i, seeds in enumerate(order) if set(seeds) & set(bad))
    with pytest.raises(DatasetError) as info:
        _trainer(tmp_path, lag, data=data).fit()
    named = ", ".join(f"{n} (label {bad[n]})" for n in order[step - 1] if n in bad)
    says = f"{named.count('label')} seed(s) of the batch of step {step} have a label outside [0, 3)"
    assert str(info.value).startswith(f"{says}, the model's classes: nodes {named};"), str(info.value)


@pytest.mark.parametrize("lag", ["cpu", None])
def test_a_run_stopped_at_max_steps_resumes_exactly(tmp_path, lag):
    assert _trainer(tmp_path, lag, max_steps=5).fit()["steps"] == 5
    log = _log(tmp_path)
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 5] and log[-1]["stopped"] == "max_steps"  # read before it
    resumed = _trainer(tmp_path, lag, resume=True)
    resumed.fit()
    expected, weights = _reference(epochs=2)
    assert [r for r in _log(tmp_path) if "loss" in r] == expected
    assert _same_weights(resumed.model.state_dict(), weights)


class _NaNGradient(torch.autograd.Function):
    """Identity forward, NaN backward: what an all-reduce brings in from a rank whose step went non-finite."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.full_like(grad, math.nan)


def test_weights_made_non_finite_by_a_finite_loss_are_never_saved(tmp_path):
    calls = []

    def loss_fn(out, target):
        calls.append(1)
        return F.cross_entropy(_NaNGradient.apply(out) if len(calls) == 4 else out, target)

    trainer = _trainer(tmp_path, None, task=Task(loss_fn=loss_fn), every=2)
    with pytest.raises(TrainingDivergedError, match="the weights became NaN or infinite by step 4 while this rank's "
                                                    "losses were finite"):
        trainer.fit()
    assert [p.name for p in list_checkpoints(tmp_path / "ck")] == ["step-0000000002.pt"]
    assert _log(tmp_path) == _reference(epochs=1, nan_at=4)[0]  # step 4's loss is finite, and read
