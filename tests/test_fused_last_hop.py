"""The fused last hop (``NeighborSampler(fuse_last_hop=True)``): the same draws as the unfused sampler's outermost hop,
averaged in one pass; GraphSAGE fed that mean gives the unfused model's outputs and gradients."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.nn import SAGEConv

from sparsetrain.errors import InputError, SettingError
from sparsetrain.nn.models import GCN, GraphSAGE
from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput
from sparsetrain.sampling.fused_mean import FusedMiniBatch

SIMULATOR = Path(__file__).with_name("cudasim_fused_mean.py")
SEEDS = torch.tensor([1, 5, 9, 100, 233])


def graph(num_nodes=300, num_edges=3000, seed=0) -> CSCGraph:
    g = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, num_nodes, (2, num_edges), generator=g), dim=1)
    weights = torch.rand(ei.shape[1], generator=g)
    weights[::7] = 0  # zero-weight edges are never drawn by weighted sampling
    return CSCGraph.from_edge_index(ei, num_nodes, weights)


def features(num_nodes=300, width=16) -> torch.Tensor:
    return torch.randn(num_nodes, width, generator=torch.Generator().manual_seed(1))


def scatter_mean(block, x_src: torch.Tensor) -> torch.Tensor:
    """The outermost block's per-dst mean of its sources' rows (PyG's mean aggregation: zeros for no edges)."""
    src, dst = block.edge_index
    index = dst[:, None].expand(-1, x_src.shape[1])
    out = torch.zeros(block.num_dst, x_src.shape[1], dtype=x_src.dtype)
    return out.scatter_reduce_(0, index, x_src[src], "mean", include_self=False)


def pair(fanouts, key, **kw) -> tuple:
    """The unfused and the fused batch of one key."""
    g = kw.pop("graph", None) or graph()
    inp = SamplerInput(SEEDS, key=key)
    return (NeighborSampler(g, fanouts, seed=3, **kw).sample(inp),
            NeighborSampler(g, fanouts, seed=3, fuse_last_hop=True, **kw).sample(inp))


OPTIONS = [{}, {"replace": True}, {"weighted": True}, {"weighted": True, "replace": True}, {"hop_nodes": "new"}]
FANOUTS = [[3, 2, 4], [2, -1], [5], [3, 40], [2, 2**31 - 1]]  # 40: selection sampling; 2**31 - 1: every in-edge


CASES = [(f, o) for f in FANOUTS for o in OPTIONS if not (o.get("replace") and max(f) > 100)]  # (that many draws)


@pytest.mark.parametrize("fanouts, options", CASES,
                         ids=lambda v: (",".join(v) or "uniform") if isinstance(v, dict) else str(v))
def test_fused_mean_is_the_mean_of_the_unfused_outermost_block(fanouts, options):
    x = features()
    for key in (0, 4, 11):
        full, fused = pair(fanouts, key, **options)
        outer = full.blocks[0]
        assert isinstance(fused, FusedMiniBatch)
        assert torch.equal(fused.input_nodes, full.input_nodes[: outer.num_dst])
        assert torch.equal(fused.seeds, full.seeds) and len(fused.blocks) == len(full.blocks) - 1
        for mine, theirs in zip(fused.blocks, full.blocks[1:]):
            assert torch.equal(mine.edge_index, theirs.edge_index) and mine.num_src == theirs.num_src
        mean = fused.last_hop.mean(x)
        reference = scatter_mean(outer, x[full.input_nodes])
        assert outer.num_edges > 0 and mean.dtype == torch.float32
        torch.testing.assert_close(mean, reference, rtol=1e-6, atol=1e-6)


def test_a_float64_table_averages_in_float32_and_a_numpy_table_is_read_in_place():
    full, fused = pair([4, 3], 2)
    x = features().double()
    reference = scatter_mean(full.blocks[0], x[full.input_nodes])
    torch.testing.assert_close(fused.last_hop.mean(x), reference.float())
    torch.testing.assert_close(fused.last_hop.mean(x.numpy()), reference.float())


def test_a_node_without_in_edges_averages_to_zeros():
    g = CSCGraph.from_edge_index(torch.tensor([[1, 2], [0, 0]]), 4)  # nodes 1..3 have no in-edges
    mb = NeighborSampler(g, [2, 2], seed=0, fuse_last_hop=True).sample(torch.tensor([0]))
    x = torch.arange(8.0).view(4, 2)
    assert mb.input_nodes.tolist() == [0, 1, 2]
    torch.testing.assert_close(mb.last_hop.mean(x), torch.tensor([[3.0, 4.0], [0, 0], [0, 0]]))


def test_what_cannot_be_fused_is_refused_in_one_line():
    typed = CSCGraph.from_edge_index_dict({("a", "w", "p"): torch.tensor([[0, 1], [0, 1]])}, {"a": 2, "p": 2})
    for make in (lambda: NeighborSampler(typed, [2], seed_type="p", fuse_last_hop=True),
                 lambda: NeighborSampler(graph(), [2], disjoint=True, fuse_last_hop=True),
                 lambda: NeighborSampler(graph(), [2], subgraph_type="induced", fuse_last_hop=True),
                 lambda: NeighborSampler(graph(), [], fuse_last_hop=True)):
        with pytest.raises(InputError, match="fuse_last_hop") as info:
            make()
        assert "\n" not in str(info.value)
    _, fused = pair([2, 2], 0)
    for bad in (torch.zeros(300, 4, dtype=torch.int64), torch.zeros(10, 4), torch.zeros(300)):
        with pytest.raises(InputError, match="whole feature table"):
            fused.last_hop.mean(bad)
    with pytest.raises(InputError, match="no gradient"):
        fused.last_hop.mean(torch.zeros(300, 4, requires_grad=True))


def test_a_damaged_graph_is_an_error_not_a_stray_read():
    g = graph()
    indices = g.indices.clone()
    indices[:] = 10**6  # every in-neighbour id outside the graph
    damaged = CSCGraph(g.indptr, indices)
    fused = NeighborSampler(damaged, [-1], seed=0, fuse_last_hop=True).sample(SEEDS)
    with pytest.raises(InputError, match="lie outside the graph"):
        fused.last_hop.mean(features())


def _grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("first_conv", [None, {"normalize": True}, {"root_weight": False, "bias": False}],
                         ids=["default", "normalize", "no_root_no_bias"])
@pytest.mark.parametrize("layers", [1, 3])
def test_graphsage_on_the_fused_mean_equals_the_unfused_model(first_conv, layers):
    fanouts = [4, 3, 5][:layers]
    full, fused = pair(fanouts, 6)
    x = features(width=12)
    torch.manual_seed(0)
    model = GraphSAGE(12, 8, 3, num_layers=layers, dropout=0.0, norm=True)
    if first_conv is not None:
        model.convs[0] = SAGEConv(12, 8 if layers > 1 else 3, **first_conv)
    out_full = model(x[full.input_nodes], full.to_pyg())
    out_full.square().sum().backward()
    expected = _grads(model)
    model.zero_grad()
    out_fused = model(x[fused.input_nodes], fused.to_pyg(), neighbor_mean=fused.last_hop.mean(x))
    out_fused.square().sum().backward()
    torch.testing.assert_close(out_fused, out_full, rtol=1e-5, atol=1e-6)
    got = _grads(model)
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_neighbor_mean_the_first_layer_cannot_take_is_refused():
    full, fused = pair([3, 2], 1)
    x = features(width=12)
    mean = fused.last_hop.mean(x)
    with pytest.raises(SettingError, match="mean-aggregating SAGEConv"):
        GCN(12, 8, 3, num_layers=2)(x[fused.input_nodes], fused.to_pyg(), neighbor_mean=mean)
    sage = GraphSAGE(12, 8, 3, num_layers=2)
    sage.convs[0] = SAGEConv(12, 8, aggr="max")
    with pytest.raises(SettingError, match="mean-aggregating SAGEConv"):
        sage(x[fused.input_nodes], fused.to_pyg(), neighbor_mean=mean)
    with pytest.raises(SettingError, match="blocks"):
        GraphSAGE(12, 8, 3, num_layers=2)(x[full.input_nodes], full.to_pyg(), neighbor_mean=mean)


SLOW_SIMULATOR_CHECKS = ["check_captured_fused_sampled_loader_trains_as_the_loader"]  # (8 s on two cores)


def _simulate(checks: list[str]) -> dict[str, str]:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, str(SIMULATOR), *checks], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_cuda_kernels_under_the_simulator_average_as_the_cpu():
    checks = [name for name in re.findall(r"^def (check_\w+)", SIMULATOR.read_text(), re.M)
              if name not in SLOW_SIMULATOR_CHECKS]
    results = _simulate(checks)
    assert checks and results == {name: "ok" for name in checks}, results


@pytest.mark.slow
def test_the_captured_fused_loader_under_the_simulator():
    results = _simulate(SLOW_SIMULATOR_CHECKS)
    assert results == {name: "ok" for name in SLOW_SIMULATOR_CHECKS}, results


COMPILE = """
import json, numba, numba.cuda.dispatcher, numpy as np
from numba import cuda
from sparsetrain.sampling.cuda import fused_mean as fm

class H100:
    compute_capability = (9, 0)

numba.cuda.dispatcher.get_current_device = H100  # device functions ask the device for its compute capability
i64, f32 = np.zeros(4, np.int64), np.zeros((4, 3), np.float32)
one = np.int64(1)
calls = [(fm.draw_kernel, (i64, i64.astype(np.int32), f32[0], i64, one, i64, one, one, i64.view(np.uint64), one, one,
                           False, True, one, i64, i64, i64, i64, one)),
         (fm.mean_kernel, (f32, i64, i64, i64, f32)),
         (fm.mean_kernel, (f32.astype(np.float64), i64.astype(np.int32), i64, i64, f32))]
sizes = []
for kernel, args in calls:
    try:
        sizes.append(len(cuda.compile_ptx(kernel.py_func, tuple(map(numba.typeof, args)), cc=(9, 0))[0]))
    except Exception as exc:
        sizes.append(str(exc).splitlines()[0])
print(json.dumps(sizes))
"""


def test_the_cuda_kernels_compile_for_a_gpu_without_one():
    """The simulator never types the kernels: compile them to PTX for sm_90 (NVVM, no GPU) with the driver's types
    (int32 and int64 indices, float32 and float64 tables)."""
    from numba.cuda.cudadrv import nvvm

    if not nvvm.is_available():
        pytest.skip("no NVVM to compile with")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    sizes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(isinstance(size, int) for size in sizes), sizes


CORA_ARGS = ["--fanout", "10,10", "--batch-size", "64", "--lr", "0.005", "--weight-decay", "5e-4", "--hidden", "64",
             "--epochs", "8", "--seed", "2", "--quiet"]


@pytest.fixture(scope="module")
def cora_dir(cora_data, tmp_path_factory):
    import sparsetrain as st

    return st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("cora") / "cora", quiet=True).path


def _run(cli, cora_dir, out: Path, *extra) -> tuple[list[float], float]:
    code, _, err = cli("train", "--data", cora_dir, *CORA_ARGS, "--metrics-log", out / "log.jsonl", "--summary-json",
                       out / "summary.json", *extra)
    assert code == 0, err
    losses = [r["loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "loss" in r]
    return losses, json.loads((out / "summary.json").read_text())["test_acc"]


@pytest.mark.parametrize("features", ["mmap", "memory"])
def test_training_with_a_fused_last_hop_matches_the_unfused_run_on_cora(cli, cora_dir, tmp_path, features):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    losses, acc = _run(cli, cora_dir, tmp_path / "a", "--features", features)
    fused_losses, fused_acc = _run(cli, cora_dir, tmp_path / "b", "--features", features, "--fuse-last-hop")
    assert len(fused_losses) == len(losses) > 10
    torch.testing.assert_close(torch.tensor(fused_losses), torch.tensor(losses), rtol=1e-4, atol=1e-5)
    assert acc > 0.7 and abs(fused_acc - acc) <= 0.01


@pytest.mark.parametrize("extra, says", [
    (["--model", "gcn"], "not --model gcn"),
    (["--features", "disk"], "the features are disk"),
    (["--cache-gb", "0.001"], "no --cache-gb"),
])
def test_what_a_fused_training_run_cannot_do_is_refused_in_one_line(cli, cora_dir, extra, says):
    code, _, err = cli("train", "--data", cora_dir, "--fuse-last-hop", "--epochs", "1", "--quiet", *extra)
    assert code != 0 and says in err and "--fuse-last-hop" in err and "Traceback" not in err, err


def test_a_static_fused_run_gives_the_eager_fused_runs_losses_on_cora(cli, cora_dir, tmp_path):
    """--step static --fuse-last-hop: every level but the fused one padded, the mean copied in; the eager fused run's
    losses, hence its accuracy."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    losses, acc = _run(cli, cora_dir, tmp_path / "a", "--fuse-last-hop")
    static_losses, static_acc = _run(cli, cora_dir, tmp_path / "b", "--fuse-last-hop", "--step", "static")
    assert len(static_losses) == len(losses) > 10
    torch.testing.assert_close(torch.tensor(static_losses), torch.tensor(losses), rtol=1e-4, atol=1e-5)
    assert acc > 0.7 and abs(static_acc - acc) <= 0.01


def test_a_static_fused_run_refuses_all_neighbours_below_the_fused_hop(cli, cora_dir):
    code, _, err = cli("train", "--data", cora_dir, "--fuse-last-hop", "--step", "static", "--fanout", "-1,5",
                       "--epochs", "1", "--quiet")
    assert code != 0 and "each hop (all but the fused last) by its fanout" in err and "Traceback" not in err, err
