"""Issue 16, item 4 and the kernel side of item 2: mapped files that shrink after ``load``, and damaged topology
read without ``verify``, end in one clear error, never a SIGBUS or SIGSEGV.

The reads run in a subprocess (tests/bounds_probe.py): a signal death fails the test instead of killing pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparsetrain.datasets import format as fmt

PROBE = Path(__file__).with_name("bounds_probe.py")

SHRINK_GRAPH = [
    f"{fmt.INDPTR}/sample", f"{fmt.INDPTR}/inference", f"{fmt.INDPTR}/in_memory", f"{fmt.INDPTR}/verify",
    f"{fmt.INDICES}/sample", f"{fmt.INDICES}/inference", f"{fmt.INDICES}/in_memory",
    f"{fmt.EDGE_WEIGHT}/sample weighted", f"{fmt.EDGE_WEIGHT}/in_memory",
]
SHRINK_NODE = [fmt.LABELS, "train_idx.npy", fmt.ORIGINAL_IDS, "clusters.npy"]
DAMAGES = ["index beyond the nodes", "negative index", "indptr not monotone", "indptr past the edges", "indptr beyond the edges"]
DAMAGED_READERS = ["sample all", "sample uniform", "sample replace", "sample weighted", "inference sage", "inference gcn"]
CASES = ([f"shrink-graph:{c}" for c in SHRINK_GRAPH] + [f"shrink-node:{c}" for c in SHRINK_NODE]
         + [f"damaged:{d}/{r}" for d in DAMAGES for r in DAMAGED_READERS])


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("bounds")
    proc = subprocess.run([sys.executable, str(PROBE), str(work), *CASES], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"the probe died with {proc.returncode} (a negative code is a signal):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _one_line_error(message: str, classes: tuple[str, ...], *fragments: str) -> None:
    assert message.split(":")[0] in classes, message
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("case", SHRINK_GRAPH)
def test_graph_file_shrinking_after_load_is_an_error_not_sigbus(results, case):
    name = case.split("/")[0]
    _one_line_error(results[f"shrink-graph:{case}"], ("DatasetError",), name, "shrank", "sparsetrain.datasets.load")


@pytest.mark.parametrize("name", SHRINK_NODE)
def test_per_node_files_are_read_at_load_so_shrinking_them_is_harmless(results, name):
    assert results[f"shrink-node:{name}"] == "same"


@pytest.mark.parametrize("reader", DAMAGED_READERS)
@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_topology_is_an_error_not_a_crash(results, damage, reader):
    name = fmt.INDICES if "index" in damage else fmt.INDPTR
    _one_line_error(results[f"damaged:{damage}/{reader}"], ("SamplingError", "DatasetError"), name, "sparsetrain info")
