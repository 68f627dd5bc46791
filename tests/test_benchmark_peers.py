"""A benchmark whose peer is not installed says so in one line and still measures and prints its own half."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def load(name: str):
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    return load


@pytest.mark.slow  # (a tiny synthetic graph made and timed: ~60 s on two shared cores)
def test_pyg_loader_without_pyg_sampler_prints_its_own_half(bench, monkeypatch, tmp_path, capsys):
    peers = bench("peers")
    peers._said.clear()
    pyg_loader = bench("pyg_loader")
    monkeypatch.setattr(pyg_loader, "pyg_sampler_missing", lambda backend="any": "pyg-lib or torch-sparse is not "
                        "installed for torch X; pip install ...")
    monkeypatch.setattr(pyg_loader, "OUT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["pyg_loader.py", "--data", str(tmp_path / "graph"), "--nodes", "2000",
                                      "--edges", "20000", "--batches", "2", "--rounds", "1", "--steps", "2",
                                      "--batch-size", "64", "--hidden", "16"])
    pyg_loader.main()
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "not run" in line]
    assert said == ["PyG's NeighborLoader: not run (pyg-lib or torch-sparse is not installed for torch X; pip install "
                    "...); only sparsetrain's half is measured"]
    assert "| sparsetrain | " in out and "| sparsetrain_trim | " in out and "pyg_0_workers" not in out
    result = json.loads((tmp_path / "pyg_loader.json").read_text())
    assert set(result["loader_batches_per_s"]) == {"sparsetrain"} and result["loader_batches_per_s"]["sparsetrain"] > 0
    assert result["loader_ratio"] is None and "not installed" in result["pyg"]["error"]


def test_the_dgl_peer_without_its_environment_is_one_line(bench, monkeypatch, capsys):
    bench("peers")._said.clear()
    dgl_peer = bench("dgl_peer")
    monkeypatch.setattr(dgl_peer, "DGL_PYTHON", "/nonexistent/python")
    first = dgl_peer.run_in_dgl_env("x.py", [], 2)
    second = dgl_peer.run_in_dgl_env("x.py", [], 1)
    out = capsys.readouterr().out.splitlines()
    assert first == second and "no DGL environment at /nonexistent/python" in first["error"]
    assert "pip install torch==2.2.1 dgl==2.1.0" in first["error"]
    assert out == [first["error"]]  # said once
