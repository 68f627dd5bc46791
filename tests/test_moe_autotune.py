"""The measured backend choice: fastest by timing, cached per process and on disk, forced when asked."""

import json
import time

import pytest
import torch

from sparsetrain.errors import SettingError
from sparsetrain.moe import MoE, autotune, grouped


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv(autotune.ENV, raising=False)
    autotune.clear()
    yield
    autotune.clear()


def test_choose_keeps_the_fastest_and_measures_once():
    delays = {"native": 0.02, "loop": 0.002, "bucketed": 0.06}
    calls = []

    def run(backend, backward):
        calls.append(backend)
        time.sleep(delays[backend] * (3 if backward else 1))

    assert autotune.choose("k", list(delays), run, torch.device("cpu")) == "loop"
    assert calls.count("bucketed") == calls.count("native") == 1  # forward past PRUNE x the fastest: dropped
    assert calls.count("loop") == 1  # the only one left: nothing to compare
    n = len(calls)
    assert autotune.choose("k", list(delays), run, torch.device("cpu")) == "loop"
    assert len(calls) == n  # cached
    assert autotune.table()["k"]["backend"] == "loop"
    assert autotune.table()["k"]["ms"]["forward"]["bucketed"] >= 60.0
    calls.clear()
    delays.update(native=0.03, loop=0.03, bucketed=0.3)  # native and loop tie: both timed on, ROUNDS times each
    assert autotune.choose("k2", list(delays), run, torch.device("cpu")) in ("loop", "native")
    assert calls.count("loop") == calls.count("native") == 1 + autotune.ROUNDS
    assert calls.count("bucketed") == 1


def test_table_round_trips_through_the_env_file(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    monkeypatch.setenv(autotune.ENV, str(path))
    autotune.choose("a", ["loop", "bucketed"], lambda b, backward: time.sleep(0.002 if b == "bucketed" else 0.03),
                    torch.device("cpu"))
    assert json.loads(path.read_text())["a"]["backend"] == "bucketed"
    autotune.clear()
    assert autotune.lookup("a") == "bucketed"  # read back from the file, nothing measured
    path.write_text("{not json")
    autotune.clear()
    with pytest.raises(SettingError, match="cannot be read"):
        autotune.lookup("a")
    path.write_text(json.dumps({"a": {"backend": "cublas"}}))
    autotune.clear()
    with pytest.raises(SettingError, match="cublas"):
        autotune.lookup("a")


def test_token_bucket_and_key():
    assert [autotune.token_bucket(n) for n in (0, 1, 2, 3, 1024, 1025)] == [1, 1, 2, 4, 1024, 2048]
    k = autotune.tune_key(torch.device("cpu"), torch.float32, 256, 128, "swiglu", 16, 4, 2000, True)
    assert k == "cpu|float32|d256|h128|swiglu|E16|k4|T2048|train"


def test_layer_measures_once_per_shape_and_forced_backend_skips_it(monkeypatch):
    measured = []
    real = autotune.measure

    def spy(run, backends, device, train):
        measured.append(tuple(backends))
        return real(run, backends, device, train)

    monkeypatch.setattr(autotune, "measure", spy)
    torch.manual_seed(0)
    moe = MoE(16, 16, 4, top_k=2)
    x = torch.randn(40, 16)
    y0, _ = moe(x)
    y1, _ = moe(torch.randn(33, 16))  # same token bucket (64): no new measurement
    assert len(measured) == 1
    assert set(measured[0]) == set(grouped.candidates("cpu", torch.float32, 16, 32, 16))
    key = autotune.tune_key(torch.device("cpu"), torch.float32, 16, 16, "swiglu", 4, 2, 40, True)
    assert autotune.lookup(key) in measured[0]
    forced = MoE(16, 16, 4, top_k=2, backend="bucketed")
    forced.load_state_dict(moe.state_dict())
    torch.testing.assert_close(forced(x)[0], y0, atol=1e-5, rtol=1e-5)
    assert len(measured) == 1


def test_measuring_leaves_the_global_rng_alone():
    torch.manual_seed(1)
    moe = MoE(16, 16, 4, top_k=2)
    x = torch.randn(40, 16)
    state = torch.get_rng_state()
    moe(x)[0].sum().backward()  # measures here (first call of this shape)
    assert autotune.table()
    assert torch.equal(torch.get_rng_state(), state)
