"""Cluster-aware sequence parallelism: 2 and 4 gloo ranks give the single-process outputs and gradients (float64)."""

import datetime
import os
import pickle
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sparsetrain.errors import SettingError
from sparsetrain.nn.graph_transformer import GraphTransformer
from sparsetrain.nn.sequence_parallel import SequenceShards, cluster_shard_bounds
from tests.collective_harness import free_port

pytestmark = pytest.mark.distributed

NUM_NODES, IN_DIM, HIDDEN, HEADS, CLASSES = 40, 6, 16, 4, 3
CLUSTER_PTR = torch.tensor([0, 5, 12, 13, 20, 27, 33, 40])


def problem():
    """A fixed random graph (edges across clusters), features, labels and a model (weights from seed 0)."""
    g = torch.Generator().manual_seed(7)
    edge_index = torch.randint(0, NUM_NODES, (2, 160), generator=g)
    x = torch.randn(NUM_NODES, IN_DIM, generator=g, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (NUM_NODES,), generator=g)
    torch.manual_seed(0)
    model = GraphTransformer(
        IN_DIM, HIDDEN, CLASSES, num_layers=2, heads=HEADS, dropout=0.0, global_attention=True, ffn_factor=2
    ).double()
    return model, x, y, edge_index


def loss_and_grads(model, logits, y, total):
    loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum") / total
    model.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _rank_main(rank: int, world: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        model, x, y, edge_index = problem()
        shards = SequenceShards.from_clusters(CLUSTER_PTR)
        lo, hi = shards.lo, shards.hi
        logits = model.forward_sequence(x[lo:hi], edge_index, CLUSTER_PTR, shards=shards)
        grads = loss_and_grads(model, logits, y[lo:hi], NUM_NODES)
        for g in grads.values():  # data-parallel style: the loss is the sum over ranks
            dist.all_reduce(g)
        result = ("ok", (lo, hi, logits.detach(), grads))
    except BaseException:  # shipped to the parent
        import traceback

        result = ("error", traceback.format_exc())
    Path(out_dir, f"{rank}.pkl").write_bytes(pickle.dumps(result))
    dist.barrier()
    os._exit(0)


def run_world(world: int) -> list:
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(
            _rank_main, args=(world, free_port(), out_dir), nprocs=world, join=False, start_method="spawn"
        )
        for p in ctx.processes:
            p.join(180)
            if p.is_alive():
                for q in ctx.processes:
                    q.kill()
                pytest.fail(f"a rank of the {world}-rank world hung")
        results = []
        for rank in range(world):
            file = Path(out_dir, f"{rank}.pkl")
            assert file.is_file(), f"rank {rank} died without a result"
            status, value = pickle.loads(file.read_bytes())
            assert status == "ok", f"rank {rank} failed:\n{value}"
            results.append(value)
        return results


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])  # (4 ranks on 2 cores: slow)
def test_sequence_parallel_equals_single_process(world):
    model, x, y, edge_index = problem()
    logits = model.forward_sequence(x, edge_index, CLUSTER_PTR)
    grads = loss_and_grads(model, logits, y, NUM_NODES)
    results = run_world(world)
    bounds = cluster_shard_bounds(CLUSTER_PTR, world)
    assert [r[0] for r in results] == bounds[:-1] and results[-1][1] == NUM_NODES
    assert all(b in CLUSTER_PTR.tolist() for b in bounds)  # every rank holds whole clusters
    torch.testing.assert_close(torch.cat([r[2] for r in results]), logits.detach(), rtol=1e-11, atol=1e-12)
    for name, want in grads.items():
        for _, _, _, rank_grads in results:
            torch.testing.assert_close(rank_grads[name], want, rtol=1e-10, atol=1e-12, msg=name)


def test_shard_bounds_cut_at_cluster_boundaries_and_layout_errors():
    assert cluster_shard_bounds(CLUSTER_PTR, 2) == [0, 20, 40]
    assert cluster_shard_bounds(CLUSTER_PTR, 4) == [0, 12, 20, 27, 40]  # 30 is 3 from 27 and 33: the earlier wins
    shards = SequenceShards([0, 10, 40], rank=0, world_size=2)
    with pytest.raises(SettingError, match="cuts through a cluster"):
        shards.local_cluster_pointers(CLUSTER_PTR)
    with pytest.raises(SettingError, match="heads"):
        SequenceShards([0, 12, 20, 40], rank=0, world_size=3).check_heads(4)
