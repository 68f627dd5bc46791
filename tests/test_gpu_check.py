"""``benchmarks/gpu_check.py --simulate``: the one device check keeps running on a CPU (the sections that do not need a
GPU's own timings, under Numba's CUDA simulator on tiny sizes), its JSON and Markdown table written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _run(tmp_path, only: str) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--logs",
                           str(tmp_path / "logs"), "--data", str(tmp_path / "data"), "--simulate", "--only", only],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    assert table.count("\n| ") == len(only.split(",")) + 2  # a row a section, the header and its rule
    return report


def test_the_race_and_sink_sections_run_simulated(tmp_path):
    sections = _run(tmp_path, "race,sink")["sections"]
    assert set(sections["race"]["simulated"].values()) == {"ok"}, sections["race"]
    assert "5 passed" in sections["race"]["workspace_ring"]["summary"]
    sink, spread = sections["sink"]["rows"]
    assert (sink["padding"], spread["padding"]) == ("sink", "spread")
    # 2,011 padded edges of 9,011 (1/100 of products' outermost block): one row before, a share of 300 rows now
    assert sink["largest_row"] >= 2011 and spread["largest_row"] <= 2011 // (1802 - 1500) + 15


@pytest.mark.slow
def test_every_section_runs_simulated(tmp_path):
    report = _run(tmp_path, ",".join(["tests", "race", "data", "sampling", "epoch", "pinned_static", "sink", "gather",
                                      "moe"]))
    assert not [name for name, sec in report["sections"].items() if "error" in sec], report["sections"]
