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
import torch

from sparsetrain.datasets import format as fmt

PROBE = Path(__file__).with_name("bounds_probe.py")

SHRINK_GRAPH = [
    f"{fmt.INDPTR}/sample", f"{fmt.INDPTR}/inference", f"{fmt.INDPTR}/in_memory", f"{fmt.INDPTR}/verify",
    f"{fmt.INDICES}/sample", f"{fmt.INDICES}/inference", f"{fmt.INDICES}/in_memory",
    f"{fmt.EDGE_WEIGHT}/sample weighted", f"{fmt.EDGE_WEIGHT}/in_memory",
]
SHRINK_NODE = [fmt.LABELS, "train_idx.npy", fmt.ORIGINAL_IDS, "clusters.npy"]
DAMAGES = [
    "index beyond the nodes", "negative index", "indptr not monotone", "indptr past the edges",
    "indptr beyond the edges",
]
DAMAGED_READERS = [
    "sample all", "sample uniform", "sample replace", "sample weighted", "inference sage", "inference gcn",
]
CASES = ([f"shrink-graph:{c}" for c in SHRINK_GRAPH] + [f"shrink-node:{c}" for c in SHRINK_NODE]
         + [f"damaged:{d}/{r}" for d in DAMAGES for r in DAMAGED_READERS])


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("bounds")
    proc = subprocess.run([sys.executable, str(PROBE), str(work), *CASES], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (
        f"the probe died with {proc.returncode} (a negative code is a signal):\n{proc.stderr[-4000:]}"
    )
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
    _one_line_error(results[f"damaged:{damage}/{reader}"], ("InputError", "DatasetError"), name, "sparsetrain info")


TRAIN_AFTER_DAMAGE = """
import os, sys
import numpy as np
import sparsetrain.datasets as datasets
from sparsetrain.cli import main

folder, name, how = sys.argv[1:4]
opened = datasets.load


def load(path, verify=False):  # the file changes after `train` opened the dataset
    ds = opened(path, verify)
    target = os.path.join(folder, name)
    if how == "shrink":
        os.truncate(target, os.path.getsize(target) // 2)
    else:  # in place, behind the open mapping: an id far past the nodes
        with open(target, "r+b") as f:
            f.seek(os.path.getsize(target) - 4 * 50)
            f.write(np.full(50, 10**9, np.int32).tobytes())
    return ds


datasets.load = load
sys.exit(main(["train", "--data", folder, "--epochs", "1", "--batch-size", "64", "--quiet", "--eval", "full"]))
"""


# train's own check of the folder at open (engine/dataset_checks.py) or, past it, the read itself names the damage
@pytest.mark.parametrize(
    "name, how, fragments",
    [(fmt.INDPTR, "shrink", ("shrank", "bytes where its header describes")),
     (fmt.INDICES, "damage", ("which must be in [0, 300)", "sha256 does not match"))],
)
def test_train_on_a_graph_changed_after_load_exits_1_with_one_line(tmp_path, name, how, fragments):
    import sparsetrain as st

    folder = st.datasets.synthesize(tmp_path / "ds", 300, 3000, feature_dim=4, num_classes=5, quiet=True).path
    assert st.datasets.load(folder).graph.indices.dtype == torch.int32
    proc = subprocess.run(
        [sys.executable, "-c", TRAIN_AFTER_DAMAGE, str(folder), name, how], capture_output=True, text=True, timeout=600
    )
    message = proc.stderr.strip()
    assert proc.returncode == 1, (proc.returncode, message[-3000:])
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message, message
    assert name in message and any(f in message for f in fragments), message
