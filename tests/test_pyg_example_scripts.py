"""PyG's example scripts after the two-line swap: unguarded module-level ``NeighborLoader(..., num_workers=6)``.

PyG's ``examples/reddit.py``, ``examples/hetero/to_hetero_mag.py`` and ``examples/hierarchical_sampling.py`` build
their loaders at module level with ``num_workers=6`` and no ``if __name__ == "__main__":`` guard. The scripts under
``tests/pyg_scripts/`` are written in that style (synthetic Reddit- and ogbn-mag-shaped graphs, nothing downloads)
with ``from sparsetrain.pyg import NeighborLoader``; each runs as ``python script.py`` and must finish cleanly: exit
0, none of the multiprocessing failures a re-imported script or a dead worker prints, within a timeout, and finite
losses (each script asserts them and prints them; hierarchical_style.py also asserts that ``trim_to_layer`` left the
seeds and their first hop, read from the batch's ``num_sampled_nodes``).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = ("reddit_style", "to_hetero_mag_style", "hierarchical_style")
TIMEOUT_S = 240
FAILURES = ("bootstrapping phase", "leaked semaphore", "exited unexpectedly", "Traceback", "Terminating")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[int, str, str, float]]:
    """All three scripts, started together (each mostly waits on imports), from an unrelated working directory."""
    cwd = tmp_path_factory.mktemp("scripts")
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="default")
    started = {name: (time.perf_counter(), subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "pyg_scripts" / f"{name}.py")], cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for name in SCRIPTS}
    results = {}
    for name, (start, proc) in started.items():
        try:
            out, err = proc.communicate(timeout=max(1.0, TIMEOUT_S - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n(timed out after {TIMEOUT_S} s)"
        results[name] = (proc.returncode, out, err, time.perf_counter() - start)
    return results


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_unguarded_pyg_example_script_trains_with_six_workers(runs, name):
    code, out, err, seconds = runs[name]
    assert code == 0, err[-3000:]
    assert seconds < TIMEOUT_S
    for bad in FAILURES:
        assert bad not in err, err[-3000:]
    fields = out.split()
    losses = [float(fields[fields.index(key) + 1]) for key in ("first_loss", "last_loss")]
    steps = int(fields[fields.index("steps") + 1])
    assert steps >= 4 and all(math.isfinite(v) and v > 0 for v in losses), out
