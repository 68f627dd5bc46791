"""benchmarks/step_timeline.py and the phase ranges it reads (sparsetrain._phases): the CLI path's steps split by
phase from one profile, and the arithmetic of the split (own time of nested ranges, the GPU's busy union)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import sparsetrain as st
from sparsetrain._phases import phase, record_phases

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import step_timeline  # noqa: E402


def _event(name, start, end, thread=1, device_us=0.0):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), thread=thread,
                           device_time_total=device_us)


def test_a_range_that_pulls_the_stages_before_it_counts_only_its_own_time():
    events = [
        _event("sparsetrain.step", 0, 100, thread=1),
        _event("sparsetrain.fetch", 0, 60, thread=2),  # pulls the next batch: the sample range runs inside it
        _event("sparsetrain.sample", 10, 40, thread=2),
        _event("sparsetrain.sample", 30, 50, thread=2),  # (overlapping nested ranges are counted once)
        _event("sparsetrain.step", 100, 300, thread=1),
        _event("sparsetrain.fetch", 100, 130, thread=2),
        _event("sparsetrain.step", 300, 400, thread=1),
    ]
    t = step_timeline.timeline(events, cuda=False, skip=0)
    assert t["steps"] == 3 and t["wall_ms"] == pytest.approx(400 / 1e3 / 3)
    assert t["fetch_host_ms"] == pytest.approx((60 - 40 + 30) / 1e3 / 3)  # 0-60 less 10-50, then 100-130
    assert t["sample_host_ms"] == pytest.approx((30 + 20) / 1e3 / 3)
    assert t["step_host_ms"] == pytest.approx(400 / 1e3 / 3)
    assert t["to_device_host_ms"] == 0 and t["gpu_busy_ms"] is None


def test_the_first_steps_are_left_out_and_a_trace_without_steps_is_refused():
    events = [_event("sparsetrain.step", 0, 1000), _event("sparsetrain.sample", 10, 900),
              _event("sparsetrain.step", 1000, 1100), _event("sparsetrain.sample", 1000, 1050)]
    t = step_timeline.timeline(events, cuda=False, skip=1)
    assert t["steps"] == 1 and t["sample_host_ms"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="profile more steps"):
        step_timeline.timeline(events[:2], cuda=False, skip=1)


def test_busy_time_is_the_union_of_spans():
    assert step_timeline._union_us([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25
    assert step_timeline._union_us([]) == 0


def test_ranges_are_free_until_asked_for():
    assert phase("sample") is phase("fetch")  # the shared no-op
    record_phases(True)
    try:
        assert isinstance(phase("sample"), torch.profiler.record_function)
    finally:
        record_phases(False)


def test_the_cli_path_profiled_phase_by_phase(tmp_path):
    """Every phase of the real training loop (the producer thread's stages included) shows in one profile."""
    from sparsetrain.engine.run import TrainSettings, train

    folder = st.datasets.synthesize(tmp_path / "ds", 400, 4000, feature_dim=8, num_classes=3, seed=0, quiet=True).path
    settings = TrainSettings(data=folder, fanouts=[5, 5], batch_size=32, hidden=16, epochs=1, eval="sampled",
                             max_steps=5, quiet=True)
    t = step_timeline.profiled(lambda: train(settings), cuda=False)
    assert t["steps"] == 4  # five steps, the first left out
    for name in ("sample", "fetch", "to_device", "step"):
        assert t[f"{name}_host_ms"] > 0, (name, t)
    assert t["launches_per_step"] is None  # (no GPU: no device columns)
    assert phase("step") is phase("sample")  # the ranges are off again
    text = "\n".join(step_timeline.lines("CLI path", t))
    assert "| sample |" in text and "| step |" in text and "host syncs a step" in text
