"""`PartitionedFeatures` on gloo ranks in spawned processes: the rows gathered for any global ids, local, halo, cached
or from a peer, equal the unpartitioned dataset's rows; the cache holds the halo's most-drawn rows and counts hits;
bad ids on one rank raise on every rank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sparsetrain.datasets import load, synthesize
from sparsetrain.errors import InputError
from sparsetrain.partition import PartitionOptions, load_partition, partition_dataset
from sparsetrain.partition.load import owners
from sparsetrain.partitioned import DistNeighborSampler, PartitionedFeatures, halo_hotness, rank_batches
from tests.collective_harness import spawn, values

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pfeat") / "g"
    synthesize(path, 300, 3000, feature_dim=5, num_classes=3, seed=7, quiet=True)
    return path


def _gathers(rank: int, world: int, folder: str, cache_rows: int) -> dict:
    part = load_partition(folder, rank)
    store = PartitionedFeatures(part, cache_rows=cache_rows)
    rng = np.random.default_rng(rank)
    out = {"random": [], "batches": [], "cached": store.cached_ids.copy()}
    own = owners(folder).astype(np.int64)  # the test's reference for owner=; the store itself never reads it
    for size in (0, 1, 50, 400):  # duplicates, any order, every rank a different size
        ids = torch.from_numpy(rng.integers(0, part.num_nodes, size * (rank + 1)))
        out["random"].append((ids, store.gather(ids, owner=torch.from_numpy(own[ids.numpy()]))))
    local = part.local_to_global.flip(0)  # owned and halo: no owner needed
    out["local"] = (local, store.gather(local))
    sampler = DistNeighborSampler(part, [5, 5], seed=1)
    for inp in rank_batches(part, "train", 16, seed=2):
        mb = sampler.sample(inp)
        out["batches"].append((mb.input_nodes, store.gather(mb.input_nodes, owner=mb.node_owner)))
    out["stats"] = store.stats.as_dict()
    out["bytes_exchanged"] = store.bytes_exchanged
    out["hotness"] = halo_hotness(part)
    out["halo"] = part.local_to_global[part.num_owned :].numpy()
    try:  # an id out of range on rank 0 only: every rank raises, none hangs
        store.gather(torch.tensor([part.num_nodes if rank == 0 else 0]))
    except InputError as exc:
        out["error"] = str(exc)
    except Exception as exc:  # the rank whose input was bad raises its own one-line error
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


@pytest.mark.parametrize("world, method, cache_rows", [(2, "ldg", 0), (2, "hash", 40), (3, "ldg", 25)])
def test_rows_equal_the_unpartitioned_rows(graph, tmp_path, world, method, cache_rows):
    folder = tmp_path / "parts"
    partition_dataset(graph, folder, PartitionOptions(world, method=method, quiet=True))
    table = load(graph).features
    per_rank = values(spawn(_gathers, world, str(folder), cache_rows, timeout_s=240))
    for rank, out in enumerate(per_rank):
        for ids, rows in out["random"] + [out["local"]] + out["batches"]:
            assert rows.shape == (len(ids), 5) and torch.equal(rows, table[ids]), rank
        assert len(out["cached"]) == min(cache_rows, len(out["halo"]))
        if cache_rows:  # the cache holds the halo rows with the most in-edges into the part
            threshold = np.sort(out["hotness"])[::-1][len(out["cached"]) - 1]
            assert (out["hotness"][np.searchsorted(out["halo"], out["cached"])] >= threshold).all()
            assert out["stats"]["hits"] > 0
        else:
            assert out["stats"]["hits"] == 0
        assert out["stats"]["misses"] > 0 and out["stats"]["bytes_moved"] == out["stats"]["misses"] * 5 * 4
        assert out["bytes_exchanged"] > out["stats"]["bytes_moved"]
        assert ("out of range" in out["error"]) if rank == 0 else ("ranks [0] passed bad ids" in out["error"])


def test_one_part_without_a_process_group(graph, tmp_path):
    folder = tmp_path / "one"
    partition_dataset(graph, folder, PartitionOptions(1, quiet=True))
    store = PartitionedFeatures(load_partition(folder, 0), cache_rows=10)
    ids = torch.tensor([5, 0, 299, 5])
    assert torch.equal(store.gather(ids), load(graph).features[ids])
    assert store.stats.misses == 0 and store.cached_ids.size == 0  # no halo, nothing remote


def _wire(rank: int, world: int, folder: str) -> dict:
    """Every all-to-all a gather runs, as (input split sizes, output split sizes, dtype, row bytes), beside the store's
    own counts."""
    import torch.distributed as dist

    calls, real = [], dist.all_to_all_single

    def recording(output, input, output_split_sizes=None, input_split_sizes=None, **kwargs):
        calls.append((list(input_split_sizes), list(output_split_sizes), input.dtype,
                      input[0].numel() * input.element_size() if input.dim() > 1 else input.element_size()))
        return real(output, input, output_split_sizes, input_split_sizes, **kwargs)

    part = load_partition(folder, rank)
    store = PartitionedFeatures(part, cache_rows=0)
    dist.all_to_all_single = recording
    try:
        ids = torch.from_numpy(np.random.default_rng(rank).integers(0, part.num_nodes, 200))
        store.gather(ids, owner=torch.from_numpy(owners(folder).astype(np.int64)[ids.numpy()]))
    finally:
        dist.all_to_all_single = real
    return {"calls": calls, "misses": store.stats.misses, "bytes": store.bytes_exchanged - store.cache_fill_bytes}


def test_a_gather_sends_the_counts_then_the_ids_then_the_rows(graph, tmp_path):
    """The bytes on the wire: one header (a count and a failure flag per rank), the distinct remote ids (int64) to
    their owners, their rows back; ``bytes_exchanged`` is what those calls sent and received."""
    folder = tmp_path / "parts"
    partition_dataset(graph, folder, PartitionOptions(2, quiet=True))
    per_rank = values(spawn(_wire, 2, str(folder), timeout_s=240))
    for rank, out in enumerate(per_rank):
        (h_in, h_out, h_dtype, h_row), (i_in, i_out, i_dtype, _), (r_in, r_out, r_dtype, r_row) = out["calls"]
        assert (h_in, h_out, h_dtype, h_row) == ([1, 1], [1, 1], torch.int64, 16)
        assert sum(i_in) == out["misses"] > 0 and i_in[rank] == 0 and i_dtype == torch.int64
        assert i_out == [per_rank[src]["calls"][1][0][rank] for src in range(2)]  # what the others asked of it
        assert (r_in, r_out, r_dtype, r_row) == (i_out, i_in, torch.float32, 5 * 4)
        sent = 16 * 2 + 8 * sum(i_in) + 20 * sum(r_in)
        received = 16 * 2 + 8 * sum(i_out) + 20 * sum(r_out)
        assert out["bytes"] == sent + received


def _gather_after_peer_dies(rank: int, world: int, folder: str):
    import os
    import time

    from sparsetrain.errors import CollectiveError

    store = PartitionedFeatures(load_partition(folder, rank))
    ids = torch.arange(store.num_rows)
    own = torch.from_numpy(owners(folder).astype(np.int64))
    store.gather(ids, owner=own)  # one healthy exchange first
    if rank == 1:
        os._exit(3)
    start = time.monotonic()
    try:
        store.gather(ids, owner=own)
    except CollectiveError as exc:
        return type(exc).__name__, str(exc), time.monotonic() - start
    return "no error", "", 0.0


def test_a_dead_peer_is_the_collective_layers_one_line(graph, tmp_path):
    """The dead-peer rule of the sharded store (``sparse_all_gather``'s): one ``CollectiveError`` line naming the
    operation, the stage, this rank and the fix."""
    folder = tmp_path / "parts"
    partition_dataset(graph, folder, PartitionOptions(2, quiet=True))
    (status0, (kind, message, seconds)), (status1, _) = spawn(_gather_after_peer_dies, 2, str(folder),
                                                              pg_timeout_s=10, teardown=False, timeout_s=120)
    assert status0 == "ok" and status1 == "died"
    assert kind == "CollectiveError" and message.startswith("PartitionedFeatures.gather: the header exchange failed "
                                                            "on rank 0 of 2 (")
    assert "A peer rank died" in message and "restart the job" in message
    assert "\n" not in message and seconds < 15
