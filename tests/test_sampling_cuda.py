"""The numba.cuda sampling kernels, run under the CUDA simulator on tiny graphs (see cudasim_sampling.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("cudasim_sampling.py")
CHECKS = [
    "check_uniform_without_replacement",
    "check_uniform_with_replacement",
    "check_selection_sampling_large_fanout",
    "check_weighted_without_replacement",
    "check_weighted_with_replacement",
    "check_zero_weight_edges_and_zero_fanout",
    "check_full_fanout_is_exactly_the_in_edges",
    "check_edge_ids_follow_the_edge_permutation",
    "check_new_nodes_only_hops",
    "check_a_workspace_kept_across_batches_changes_nothing",
    "check_launch_shape_does_not_change_the_result",
    "check_one_host_read_per_batch",
    "check_launch_counts_of_a_node_batch",
    "check_launch_counts_of_a_typed_batch",
    "check_exact_sizes_past_the_bound_limit",
    "check_bad_seeds_are_errors",
    "check_damaged_graph_is_an_error_not_a_stray_read",
    "check_typed_graphs_sample_as_on_the_cpu",
    "check_typed_weighted_and_one_node_type",
    "check_typed_damaged_graph_is_an_error",
]


@pytest.fixture(scope="module")
def simulator_results() -> dict[str, str]:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, str(SCRIPT), *CHECKS], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("check", CHECKS)
def test_cuda_kernels_under_simulator_match_cpu(simulator_results, check):
    assert simulator_results[check] == "ok", simulator_results[check]
