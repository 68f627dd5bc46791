"""The numba.cuda sampling kernels, run under the CUDA simulator on tiny graphs (see cudasim_sampling.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("cudasim_sampling.py")
# Ordered so that the two processes below (even and odd positions) get about the same work: the costly checks
# alternate. The captured batches' checks (sampling/cuda/capture.py) run here too: one set of processes for the script.
CHECKS = [
    "check_padded_batches_equal_eager_batches",
    "check_captured_sampled_loader_trains_as_the_loader",
    "check_padded_batch_counts",
    "check_captured_batches_replay_the_eager_batches",
    "check_uniform_without_replacement",
    "check_uniform_with_replacement",
    "check_selection_sampling_large_fanout",
    "check_weighted_without_replacement",
    "check_weighted_with_replacement",
    "check_zero_weight_edges_and_zero_fanout",
    "check_full_fanout_is_exactly_the_in_edges",
    "check_edge_ids_follow_the_edge_permutation",
    "check_new_nodes_only_hops",
    "check_launch_shape_does_not_change_the_result",
    "check_one_host_read_per_batch",
    "check_launch_counts_of_a_node_batch",
    "check_launch_counts_of_a_typed_batch",
    "check_exact_sizes_past_the_bound_limit",
    "check_bad_seeds_are_errors",
    "check_typed_graphs_sample_as_on_the_cpu",
    "check_typed_weighted_and_one_node_type",
    "check_typed_damaged_graph_is_an_error",
    "check_overlapping_ranges_are_an_error_not_a_stray_write",
    "check_padded_bad_input_raises_one_batch_late",
    "check_a_failed_capture_is_an_error",
]
# The longest simulator runs (7-27 s each on two cores), kept out of the default suite's time: a damaged graph in every
# place, a workspace over many batches, the step on a padded batch and the eager SampledLoader (the captured
# SampledLoader check above runs both its eager and its replayed batches).
SLOW_CHECKS = [
    "check_damaged_graph_is_an_error_not_a_stray_read",
    "check_a_workspace_kept_across_batches_changes_nothing",
    "check_static_step_on_a_padded_batch_equals_the_eager_step",
    "check_sampled_loader_trains_as_the_loader",
]


def _simulate(checks: list[str]) -> dict[str, str]:
    """Each check's outcome; the simulator is slow Python on one core, so two processes share the checks."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), *checks[half::2]], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for half in (0, 1)]
    results = {}
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
        results.update(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture(scope="module")
def simulator_results() -> dict[str, str]:
    return _simulate(CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_cuda_kernels_under_simulator_match_cpu(simulator_results, check):
    assert simulator_results[check] == "ok", simulator_results[check]


@pytest.mark.slow
def test_the_longest_simulator_checks():
    results = _simulate(SLOW_CHECKS)
    assert results == {check: "ok" for check in SLOW_CHECKS}, results


def test_kernels_compile_for_a_gpu_without_one():
    """The simulator runs the kernels as Python and never types them: compile each to PTX for sm_90 (NVVM, no GPU),
    with the argument types the driver passes, for a node and a typed batch."""
    pytest.importorskip("numba")
    from numba.cuda.cudadrv import nvvm

    if not nvvm.is_available():
        pytest.skip("no NVVM to compile with")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    kernels = ["clear_kernel", "insert_known", "count_kernel", "sample_kernel", "first_kernel", "number_kernel",
               "relabel_kernel"]
    for batch in ("node", "typed"):
        assert sorted(compiled[batch]) == sorted(kernels), compiled
        assert all(isinstance(size, int) for size in compiled[batch].values()), compiled  # else the error


def _compile_every_kernel() -> dict:
    """Run the driver with kernels compiled, not launched: ``{batch: {kernel: PTX size or the error}}``."""
    import numba
    import numba.cuda.dispatcher
    import numpy as np
    import torch
    from numba import cuda

    from sparsetrain.sampling import CSCGraph
    from sparsetrain.sampling.cuda import driver
    from sparsetrain.sampling.cuda.arrays import NumpyArrays
    from sparsetrain.sampling.cuda.workspace import DeviceWorkspace
    from sparsetrain.sampling.fanouts import Fanouts
    from sparsetrain.sampling.layout import KernelLayout

    class H100:
        compute_capability = (9, 0)

    numba.cuda.dispatcher.get_current_device = H100  # device functions ask the device for its compute capability
    compiled = {}

    class Compiling(DeviceWorkspace):
        def launch(self, kernel, n, *args):
            name = kernel.py_func.__name__
            if name not in compiled:
                try:
                    compiled[name] = len(cuda.compile_ptx(kernel.py_func, tuple(map(numba.typeof, args)), cc=(9, 0))[0])
                except Exception as exc:
                    compiled[name] = str(exc).splitlines()[0]
            self.counts.add(kernels=1)  # not launched: what the arrays hold is never read

    def run(g, fanouts, seed_type=0):
        indptr, indices, _ = g.numpy()
        layout = KernelLayout(g, Fanouts(fanouts))
        keys = [layout.hop_keys(0, 0, h) for h in range(len(fanouts))]
        compiled.clear()
        try:
            with np.errstate(all="ignore"):
                driver.sample_arrays(NumpyArrays(), indptr, indices, np.empty(1, np.float32), np.array([0, 3]), layout,
                                     keys, False, False, edge_perm=None if g.edge_perm is None else g.edge_perm.numpy(),
                                     seed_type=seed_type, workspace=Compiling(NumpyArrays()))
        except Exception:  # the record was never written: any error the host draws from it
            pass
        return dict(compiled)

    gen = torch.Generator().manual_seed(0)
    node = CSCGraph.from_edge_index(torch.randint(0, 40, (2, 200), generator=gen), 40)
    typed = CSCGraph.from_edge_index_dict({("a", "w", "p"): torch.randint(0, 20, (2, 80), generator=gen),
                                           ("p", "c", "p"): torch.randint(0, 30, (2, 80), generator=gen)},
                                          {"a": 20, "p": 30})
    return {"node": run(node, [3, 2]), "typed": run(typed, [3, 2], typed.node_types.index("p"))}


if __name__ == "__main__":
    print(json.dumps(_compile_every_kernel()))
