"""benchmarks/gpu_report.py: its sections run on a CPU machine (tiny inputs) and its tables say what each one
measured."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_report  # noqa: E402


def test_markdown_names_the_device_and_every_failed_section():
    report = {
        "device": "NVIDIA H100 80GB HBM3",
        "date": "2026-11-25",
        "quick": False,
        "total_seconds": 500.0,
        "sections": {
            "tests": {
                "summary": "40 passed, 2 failed in 80s",
                "passed": 40,
                "failed": 2,
                "failures": ["FAILED tests/test_x.py::test_y"],
            },
            "gather": {"error": "did not finish within 60 s"},
            "sampling": {
                "device": "NVIDIA H100 80GB HBM3",
                "cpu_threads": 16,
                "rows": [
                    {"sampler": "node", "cpu": {"edges_per_s": 70e6}, "gpu": {"edges_per_s": 350e6}, "speedup": 5.0},
                    {
                        "sampler": "typed",
                        "cpu": {"edges_per_s": 20e6},
                        "gpu": {"error": "BackendError: no CUDA path"},
                    },
                ],
            },
        },
    }
    md = gpu_report.markdown(report)
    assert md.startswith("## GPU report: NVIDIA H100 80GB HBM3 (2026-11-25)")
    assert "40 passed, 2 failed" in md and "- FAILED tests/test_x.py::test_y" in md
    assert "**gather**: did not finish within 60 s" in md
    assert "| node | 70.0 | 350.0 | 5.000 |" in md
    assert "| typed | 20.0 | BackendError: no CUDA path | – |" in md
    assert "**epoch**: not in --only" in md and "**moe**: not in --only" in md


def test_a_section_that_fails_costs_only_its_row(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    args = gpu_report.argparse.Namespace(device="cpu", data=str(not_a_folder), quick=True, rounds=1, epoch_steps=2)
    row = gpu_report.run_section("sampling", args, tmp_path)
    assert row["error"].startswith("exit 1: ") and "file" in row["error"]
    assert (tmp_path / "sampling.log").is_file() and not (tmp_path / "sampling.json").exists()


@pytest.mark.slow
def test_quick_report_on_cpu(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_report.py"),
            "--out",
            str(tmp_path),
            "--quick",
            "--device",
            "cpu",
            "--data",
            str(tmp_path / "data"),
            "--only",
            "sampling,epoch,moe",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    for name in ("sampling", "epoch", "moe"):
        assert "error" not in report["sections"][name], report["sections"][name]
    epoch = {r["path"]: r for r in report["sections"]["epoch"]["rows"]}
    assert epoch["sparsetrain train (CLI path)"]["epoch_s"] > 0
    assert epoch["sparsetrain train (CLI path)"]["loss_waits_per_step"] == 0  # the CPU's copies are done at once
    assert epoch["sparsetrain train --step static --fuse-last-hop (CLI path)"]["epoch_s"] > 0, epoch
    assert "Host waits a step to read the loss, CLI path: 0.000" in (tmp_path / "report.md").read_text()
    timelines = report["sections"]["epoch"]["timelines"]  # the CLI path and the drop-in, phase by phase
    assert timelines["sparsetrain train (CLI path)"]["sample_host_ms"] > 0, timelines
    assert timelines["sparsetrain.pyg.NeighborLoader (drop-in), Data on the host"]["fetch_host_ms"] > 0, timelines
    assert "Timeline, sparsetrain train (CLI path)" in (tmp_path / "report.md").read_text()
    assert all(r["cpu"]["edges_per_s"] > 0 for r in report["sections"]["sampling"]["rows"])


@pytest.mark.slow  # (15 s of simulator; cudasim_sampling.py checks the same counts by default)
def test_simulated_counts_show_the_padded_and_captured_batches_beside_the_eager_one():
    """``--quick`` on a machine without a GPU: the driver's counts under the simulator, a static step's padded batch
    with no host read and fewer copies than the eager batch, and the same batch replayed from its capture as one graph
    launch and one copy (of the seeds)."""
    counts = gpu_report._counts_on_the_simulator()
    assert "error" not in counts, counts
    eager, padded = counts["node"]["batch"], counts["node, padded"]["batch"]
    assert (eager["syncs"], padded["syncs"]) == (1, 0), counts
    assert (eager["copies"], padded["copies"]) == (10, 3) and padded["allocations"] == 0, counts
    assert counts["node, captured"]["batch"] == {"launches": 2, "kernels": 0, "torch_ops": 1, "copies": 1, "syncs": 0,
                                                 "allocations": 0, "pinned_allocations": 0, "graphs": 1}, counts
    lines = "\n".join(gpu_report._per_batch_lines({"simulated": counts}))
    assert "node, padded batch:" in lines and "| batch | 27 | 17 | 10 | 3 | 0 | 0 | 0 | 0 |" in lines, lines
    assert "node, captured batch:" in lines and "| batch | 2 | 0 | 1 | 1 | 0 | 0 | 0 | 1 |" in lines, lines
