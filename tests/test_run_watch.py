"""Watching a run: TensorBoard event files and the CSV twin hold the metrics log's numbers, ``--patience`` stops at the
epoch a known validation curve says, a resume keeps the count, each loader stage's time is its own, and
``sparsetrain plot`` draws the log's numbers to a valid PNG."""

import csv
import json
import sys
import time

import pytest
import torch

import sparsetrain as st
from sparsetrain.engine import plot as plot_module
from sparsetrain.engine import run_log

TINY = ["--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--quiet"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny") / "tiny"
    return st.datasets.synthesize(folder, 400, 3200, feature_dim=8, num_classes=3, seed=0, quiet=True).path


@pytest.fixture(scope="module")
def watched(tiny, tmp_path_factory):
    """One 3-epoch run with a metrics log, its CSV and TensorBoard events."""
    from sparsetrain.cli import main

    out = tmp_path_factory.mktemp("watched")
    code = main(["train", "--data", str(tiny), *TINY, "--epochs", "3", "--metrics-log", str(out / "m.jsonl"),
                 "--tensorboard", str(out / "tb"), "--cache-gb", "0.0001", "--device", "cpu"])
    assert code == 0
    return out


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _numbers(record):
    return {k: v for k, v in record.items()
            if k not in ("step", "epoch") and isinstance(v, (int, float)) and not isinstance(v, bool)}


def test_tensorboard_events_hold_every_number_of_the_log(watched):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = _records(watched / "m.jsonl")
    expected: dict[str, list] = {}
    for record in records:
        for key, value in _numbers(record).items():
            expected.setdefault(key, []).append((record["step"], value))
    # what the issue asks to watch is in the log, hence in TensorBoard
    for key in ("loss", "train_loss", "val_acc", "test_acc", "step_seconds", "sample_seconds", "fetch_seconds",
                "compute_seconds", "hit_rate"):
        assert key in expected, key
    acc = EventAccumulator(str(watched / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == set(expected)
    for key, points in expected.items():
        events = acc.Scalars(key)
        assert [e.step for e in events] == [step for step, _ in points], key
        # TensorBoard keeps float32
        assert [e.value for e in events] == pytest.approx([v for _, v in points], rel=1e-6, abs=1e-7), key


def test_the_csv_beside_the_log_holds_the_same_records(watched):
    records = _records(watched / "m.jsonl")
    with open(watched / "m.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records) > 3
    header = list(rows[0])
    assert header[:3] == ["step", "epoch", "loss"]  # fields in the order first seen, as Lightning's CSVLogger
    for record, row in zip(records, rows):
        read = {k: json.loads(v) if v not in ("",) else None for k, v in row.items()}
        assert {k: v for k, v in read.items() if v is not None} == {k: v for k, v in record.items() if v is not None}


def test_a_csv_named_log_is_refused(cli, tiny, tmp_path):
    code, _, err = cli("train", "--data", tiny, *TINY, "--epochs", "1", "--metrics-log", tmp_path / "m.csv")
    assert code == 1 and "name the log .jsonl" in err and len(err.strip().splitlines()) == 1


def test_without_tensorboard_the_error_is_one_line_naming_pip(cli, tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as without the package
    code, out, err = cli("train", "--data", tiny, *TINY, "--epochs", "1", "--tensorboard", tmp_path / "tb")
    assert code == 1 and "pip install tensorboard" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "tb").exists()


# ---------------------------------------------------------------- patience

VAL = [0.50, 0.70, 0.60, 0.70, 0.65, 0.90, 0.95, 0.99]
"""A known validation curve: best 0.70 at epoch 2; epochs 3, 4 (a tie is no improvement), 5 do not improve it."""


def _trainer(ds, folder, epochs, patience, resume=False):
    torch.manual_seed(0)
    loader = st.engine.Loader(st.sampling.NeighborSampler(ds.graph, [3]), ds.features, ds.labels, ds.split["train"],
                              batch_size=128, prefetch=0, seed=1)
    model = st.nn.GraphSAGE(ds.num_features, 8, ds.num_classes, 1)
    holder = {}

    def evaluate(_model):
        epoch = holder["trainer"].epoch  # 0-based while the epoch is evaluated
        return {"val_acc": VAL[epoch], "test_acc": VAL[epoch] / 2}

    trainer = st.engine.Trainer(model, loader, torch.optim.Adam(model.parameters()), epochs=epochs, evaluate=evaluate,
                                patience=patience, checkpoints=st.engine.settings.CheckpointSettings(
                                    dir=folder, resume=resume),
                                report=st.engine.settings.ReportSettings(quiet=True))
    holder["trainer"] = trainer
    return trainer


def test_patience_stops_at_the_epoch_the_validation_curve_says(tiny, tmp_path):
    ds = st.datasets.load(tiny)
    summary = _trainer(ds, None, epochs=8, patience=3).fit()
    assert summary["stopped_early"] and summary["stopped_epoch"] == 5 and summary["epochs"] == 5
    assert summary["best_epoch"] == 2 and summary["val_acc"] == 0.70 and summary["test_acc"] == 0.35
    summary = _trainer(ds, None, epochs=8, patience=4).fit()  # one more evaluation allowed: 0.90 at epoch 6
    assert not summary["stopped_early"] and summary["epochs"] == 8 and summary["best_epoch"] == 8


def test_a_resume_keeps_the_patience_count(tiny, tmp_path):
    ds = st.datasets.load(tiny)
    first = _trainer(ds, tmp_path / "ck", epochs=4, patience=3).fit()  # two evaluations without improvement
    assert not first["stopped_early"] and first["epochs"] == 4
    resumed = _trainer(ds, tmp_path / "ck", epochs=8, patience=3, resume=True).fit()
    assert resumed["stopped_early"] and resumed["stopped_epoch"] == 5  # a count from 0 would have trained on to 8


def test_patience_through_the_cli_says_where_it_stopped(cli, tiny, tmp_path):
    summary = tmp_path / "s.json"
    code, out, err = cli("train", "--data", tiny, *TINY, "--epochs", "40", "--patience", "1", "--lr", "0.05",
                         "--summary-json", summary, "--metrics-log", tmp_path / "m.jsonl")
    assert code == 0, err
    result = json.loads(summary.read_text())
    records = [r for r in _records(tmp_path / "m.jsonl") if "val_acc" in r]
    vals = [r["val_acc"] for r in records]
    # the hand rule: stop at the first epoch whose val_acc is not above every earlier one
    first_flat = next(i for i in range(1, len(vals)) if vals[i] <= max(vals[:i])) + 1
    assert result["stopped_early"] and result["stopped_epoch"] == first_flat == len(records)
    assert f"stopped early at epoch {first_flat}" in out
    assert cli("train", "--data", tiny, *TINY, "--patience", "0")[0] == 1


# ---------------------------------------------------------------- the split of a step's time

def test_each_stage_time_is_its_own(tiny):
    ds = st.datasets.load(tiny)
    sampler = st.sampling.NeighborSampler(ds.graph, [3])
    pause = 0.02

    class Slow:  # a sampler whose every batch takes at least `pause` seconds more
        def __getattr__(self, name):
            return getattr(sampler, name)

        def sample(self, inp):
            time.sleep(pause)
            return sampler.sample(inp)

    for prefetch in (0, 2):
        loader = st.engine.Loader(Slow(), ds.features, ds.labels, ds.split["train"], batch_size=32,
                                  prefetch=prefetch)
        batches = sum(1 for _ in loader)
        stats = loader.last_epoch_stats
        split = stats.stage_seconds
        assert list(split) == ["sample", "fetch", "to_device"]
        assert pause * batches <= split["sample"] < pause * batches + 2.0
        assert 0 <= split["fetch"] < split["sample"] and 0 <= split["to_device"] < split["sample"]
        if prefetch == 0:  # in line, the loop waits for every stage
            assert sum(split.values()) <= stats.wait_seconds + 1e-3


# ---------------------------------------------------------------- plot

def test_plot_draws_the_log_to_a_valid_png(cli, watched, tmp_path):
    import matplotlib.image

    out = tmp_path / "curves.png"
    code, printed, err = cli("plot", watched, "--out", out)
    assert code == 0, err
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(out).shape[:2] == (400, 1100)
    records = _records(watched / "m.jsonl")
    series = plot_module.curves(records)
    assert series["loss"] == ([r["step"] for r in records if "loss" in r], [r["loss"] for r in records if "loss" in r])
    assert series["val_acc"][1] == [r["val_acc"] for r in records if "val_acc" in r]
    # the CSV twin plots the same curves
    assert plot_module.curves(plot_module.read_records(watched / "m.csv")) == series
    assert cli("plot", watched)[0] == 0 and (watched / "m.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib_or_a_log_is_one_line(cli, watched, tmp_path, monkeypatch):
    code, _, err = cli("plot", tmp_path)
    assert code == 1 and "no metrics log" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = cli("plot", watched / "m.jsonl", "--out", tmp_path / "x.png")
    assert code == 1 and "pip install matplotlib" in err and len(err.strip().splitlines()) == 1


def test_csv_text_fills_missing_fields_with_empty_cells():
    text = run_log.csv_text([{"step": 1, "loss": 0.5}, {"step": 1, "epoch": 1, "val_acc": None, "x": [1, 2]}])
    assert text == 'step,loss,epoch,val_acc,x\n1,0.5,,,\n1,,1,,"[1, 2]"\n'


def test_a_resumed_run_replaces_the_redone_steps_in_tensorboard_and_the_csv(cli, tiny, tmp_path):
    """A run resumed from an earlier checkpoint than its last step (a crash after the log went on) redoes those
    steps: the metrics log drops its lines after the checkpoint, the CSV follows it, and TensorBoard's reader drops
    the first run's events from the resumed step on (``purge_step``), so every view holds each step once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ck, log, tb = tmp_path / "ck", tmp_path / "m.jsonl", tmp_path / "tb"
    flags = ["--data", tiny, *TINY, "--epochs", "2", "--checkpoint-dir", ck, "--metrics-log", log, "--tensorboard", tb,
             "--dropout", "0.5"]
    assert cli("train", *flags)[0] == 0
    first = _records(log)
    newest = sorted(ck.glob("step-*.pt"))[-1]
    newest.unlink()  # as if the run died before writing it: the resume starts from epoch 1's checkpoint
    time.sleep(1.1)  # (a later event file name: TensorBoard reads the files in name order)
    assert cli("train", *flags, "--resume", "--lr", "0.02")[0] == 0
    records = _records(log)
    steps = [r["step"] for r in records if "loss" in r]
    assert steps == sorted(set(steps)) and len(records) == len(first)
    assert [r.get("loss") for r in records] != [r.get("loss") for r in first]  # epoch 2 redone with another lr
    with open(tmp_path / "m.csv", newline="") as f:
        assert [json.loads(row["step"]) for row in csv.DictReader(f)] == [r["step"] for r in records]
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars("loss")
    assert [e.step for e in events] == steps
    assert [e.value for e in events] == pytest.approx([r["loss"] for r in records if "loss" in r], rel=1e-6)
