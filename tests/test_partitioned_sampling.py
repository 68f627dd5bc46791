"""Distributed sampling over a partitioned graph (gloo ranks in spawned processes): the union of the ranks' batches
is the single-process `NeighborSampler`'s batches for the same seeds and keys, every rank runs as many batches, and
each input node's owner is the partition's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sparsetrain.datasets import load, synthesize
from sparsetrain.errors import InputError
from sparsetrain.partition import PartitionOptions, load_partition, partition_dataset
from sparsetrain.partition.load import owners
from sparsetrain.partitioned import DistNeighborSampler, rank_batches
from sparsetrain.sampling import NeighborSampler, SamplerInput
from tests.collective_harness import spawn, values

pytestmark = pytest.mark.distributed

FANOUTS = [4, 3, 2]
SEED = 11


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dist") / "g"
    synthesize(path, 400, 4000, feature_dim=4, num_classes=3, seed=5, quiet=True)
    return path


def _rank_batches(rank: int, world: int, folder: str, hop_nodes: str, replace: bool, batch_size: int = 24) -> list:
    part = load_partition(folder, rank)
    sampler = DistNeighborSampler(part, FANOUTS, seed=SEED, hop_nodes=hop_nodes, replace=replace)
    out = []
    for inp in rank_batches(part, "train", batch_size, seed=3):
        mb = sampler.sample(inp)
        blocks = [(b.edge_index, b.edge_ids, b.num_src, b.num_dst) for b in mb.blocks]
        out.append((inp.key, inp.seeds, mb.input_nodes, mb.node_owner, blocks))
    return out


def _check_against_single_process(graph: Path, folder: Path, per_rank: list, hop_nodes: str, replace: bool) -> None:
    ds = load(graph)
    reference = NeighborSampler(ds.graph, FANOUTS, seed=SEED, hop_nodes=hop_nodes, replace=replace)
    owner = owners(folder)
    assert len({len(batches) for batches in per_rank}) == 1  # every rank ran as many batches
    seen, keys, compared = [], set(), 0
    for rank, batches in enumerate(per_rank):
        for key, seeds, input_nodes, node_owner, blocks in batches:
            assert key not in keys
            keys.add(key)
            seen.append(seeds)
            if not seeds.numel():  # a padding batch still ran its hops' exchanges
                assert input_nodes.numel() == 0 and all(ei.shape[1] == 0 for ei, *_ in blocks)
                continue
            assert bool((torch.from_numpy(owner[seeds.numpy()].astype(np.int64)) == rank).all())
            want = reference.sample(SamplerInput(seeds, key=key))
            assert torch.equal(input_nodes, want.input_nodes)
            assert torch.equal(node_owner, torch.from_numpy(owner[input_nodes.numpy()].astype(np.int64)))
            for (ei, ids, num_src, num_dst), b in zip(blocks, want.blocks, strict=True):
                assert torch.equal(ei, b.edge_index) and torch.equal(ids, b.edge_ids)
                assert (num_src, num_dst) == (b.num_src, b.num_dst)
            compared += 1
    assert compared >= 3
    assert torch.equal(torch.sort(torch.cat(seen)).values, ds.split["train"])


@pytest.mark.parametrize("data, world, method, hop_nodes, replace", [
    ("synth", 2, "ldg", "all", False), ("synth", 3, "hash", "new", True),
    pytest.param("cora", 4, "ldg", "new", False, marks=pytest.mark.slow)])  # (4 ranks on 2 cores: slow)
def test_ranks_batches_equal_single_process(graph, tmp_path, data, world, method, hop_nodes, replace):
    if data == "cora":
        from sparsetrain.engine.default_data import builtin_dataset

        graph = builtin_dataset("cora", quiet=True).path
    folder = tmp_path / "parts"
    manifest = partition_dataset(graph, folder, PartitionOptions(world, method=method, quiet=True))
    sizes = [p["splits"]["train"] for p in manifest["parts"]]
    # a batch size that leaves some rank short: it pads with empty batches that still join every exchange
    batch_size = next(b for b in range(24, 1, -1) if len({-(-n // b) for n in sizes}) > 1)
    per_rank = values(spawn(_rank_batches, world, str(folder), hop_nodes, replace, batch_size, timeout_s=240))
    assert any(not seeds.numel() for batches in per_rank for _, seeds, *_ in batches)
    _check_against_single_process(graph, folder, per_rank, hop_nodes, replace)


def test_one_part_without_a_process_group(graph, tmp_path):
    """No torch.distributed: one part is the whole graph and the sampler is the single-process one."""
    folder = tmp_path / "one"
    partition_dataset(graph, folder, PartitionOptions(1, quiet=True))
    per_rank = [_rank_batches(0, 1, str(folder), "all", False)]
    _check_against_single_process(graph, folder, per_rank, "all", False)


def test_refuses_foreign_seeds_and_missing_keys(graph, tmp_path):
    folder = tmp_path / "two"
    partition_dataset(graph, folder, PartitionOptions(2, quiet=True))
    with pytest.raises(InputError, match="rank 0 of 1 holds part 1 of 2"):
        DistNeighborSampler(load_partition(folder, 1), FANOUTS, seed=SEED)
    folder1 = tmp_path / "one"
    partition_dataset(graph, folder1, PartitionOptions(1, quiet=True))
    sampler = DistNeighborSampler(load_partition(folder1, 0), FANOUTS, seed=SEED)
    with pytest.raises(InputError, match="with a key"):
        sampler.sample(SamplerInput(torch.tensor([0, 1])))
    with pytest.raises(InputError, match="repeated"):
        sampler.sample(SamplerInput(torch.tensor([1, 1]), key=0))
    for foreign in (400, -1):  # the graph has 400 nodes, all in the one part
        with pytest.raises(InputError, match=f"seed {foreign} is not owned by part 0"):
            sampler.sample(SamplerInput(torch.tensor([3, foreign]), key=0))


def test_weighted_draws_equal_single_process(tmp_path):
    """Edge weights travel with the part's in-edges, in the global order: weighted draws by position match too."""
    from sparsetrain.datasets import from_files

    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 300, 3000), rng.integers(0, 300, 3000)
    weights = rng.random(3000).round(3) + 0.01
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst,weight\n" + "".join(f"{s},{d},{w}\n" for s, d, w in zip(src, dst, weights)))
    from_files(tmp_path / "g", edges, num_nodes=300, quiet=True)
    ds = load(tmp_path / "g")
    assert ds.graph.weights is not None
    partition_dataset(tmp_path / "g", tmp_path / "p", PartitionOptions(1, quiet=True))
    part = load_partition(tmp_path / "p", 0)
    for replace in (False, True):
        sampler = DistNeighborSampler(part, [5, 5], seed=SEED, weighted=True, replace=replace)
        reference = NeighborSampler(ds.graph, [5, 5], seed=SEED, weighted=True, replace=replace)
        for key in range(4):
            seeds = torch.from_numpy(rng.choice(300, 20, replace=False))
            got, want = sampler.sample(SamplerInput(seeds, key=key)), reference.sample(SamplerInput(seeds, key=key))
            assert torch.equal(got.input_nodes, want.input_nodes)
            for a, b in zip(got.blocks, want.blocks, strict=True):
                assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.edge_ids, b.edge_ids)


def test_every_rank_gets_as_many_batches(graph, tmp_path):
    """Ranks with fewer owned seeds pad with empty batches; keys never collide across ranks or epochs; an epoch's
    batches cover the split once."""
    folder = tmp_path / "p"
    partition_dataset(graph, folder, PartitionOptions(3, method="hash", quiet=True))
    parts = [load_partition(folder, r) for r in range(3)]
    sizes = [p.split_global("train").numel() for p in parts]
    assert len(set(sizes)) > 1
    batch_size = 16
    keys = set()
    for epoch in range(2):
        per_rank = [rank_batches(p, "train", batch_size, seed=1, epoch=epoch) for p in parts]
        want = max(-(-n // batch_size) for n in sizes)
        assert [len(b) for b in per_rank] == [want] * 3
        for rank, batches in enumerate(per_rank):
            full = -(-sizes[rank] // batch_size)
            assert all(b.seeds.numel() == 0 for b in batches[full:])
            keys |= {b.key for b in batches}
        seeds = torch.cat([b.seeds for batches in per_rank for b in batches])
        assert torch.equal(torch.sort(seeds).values, load(graph).split["train"])
    assert len(keys) == 2 * 3 * want


def _sample_after_peer_dies(rank: int, world: int, folder: str):
    import os
    import time

    from sparsetrain.errors import CollectiveError

    part = load_partition(folder, rank)
    sampler = DistNeighborSampler(part, FANOUTS, seed=SEED)
    batches = rank_batches(part, "train", 8, seed=1)
    sampler.sample(batches[0])
    if rank == 1:
        os._exit(3)  # dies between two batches
    start = time.monotonic()
    try:
        sampler.sample(batches[1])
    except CollectiveError as exc:
        return str(exc), time.monotonic() - start
    return "no error", 0.0


def test_a_dead_peer_is_one_line_on_the_survivor(graph, tmp_path):
    folder = tmp_path / "p"
    partition_dataset(graph, folder, PartitionOptions(2, quiet=True))
    (status0, (message, seconds)), (status1, _) = spawn(_sample_after_peer_dies, 2, str(folder), pg_timeout_s=10,
                                                         teardown=False, timeout_s=120)
    assert status0 == "ok" and status1 == "died"
    assert message.startswith("distributed sampling, hop 0: the exchange failed on rank 0 of 2")
    assert "\n" not in message and seconds < 15


def _sample_with_seed_of_rank(rank: int, world: int, folder: str):
    part = load_partition(folder, rank)
    sampler = DistNeighborSampler(part, FANOUTS, seed=SEED + rank)  # a misconfigured job
    try:
        sampler.sample(rank_batches(part, "train", 8)[0])
    except InputError as exc:
        return str(exc)
    return "no error"


def test_ranks_with_other_settings_are_refused_on_every_rank(graph, tmp_path):
    folder = tmp_path / "p"
    partition_dataset(graph, folder, PartitionOptions(2, quiet=True))
    messages = values(spawn(_sample_with_seed_of_rank, 2, str(folder), timeout_s=120))
    assert messages == [f"rank {r}: ranks [{1 - r}] sample with another seed, fanouts, replace, weighted or hop_nodes; "
                        "give every rank's DistNeighborSampler the same settings" for r in range(2)]


def test_node_map_numbers_nodes_as_a_dict_while_it_grows_and_across_batches():
    """Sources the part knows come by local id (a direct table), others by global id (a table that starts at 8 nodes
    and doubles mid-hop); batch after batch (the tables reused, so the last batch's nodes must be forgotten), the
    nodes are numbered by first appearance, as a dict of global ids numbers them, with the part's owners for the
    nodes it knows and the given ones for the others."""
    from sparsetrain.partitioned.expand import PartIds
    from sparsetrain.partitioned.relabel import NodeMap

    rng = np.random.default_rng(1)
    rank, known = 1, rng.choice(2000, 300, replace=False)  # 100 owned, 200 halo, of the ids 0..1999
    owned, halo = np.sort(known[:100]), np.sort(known[100:])
    halo_owner = rng.choice([0, 2], len(halo)).astype(np.int32)
    l2g = np.concatenate([owned, halo]).astype(np.int64)
    local_of = {int(g): i for i, g in enumerate(l2g)}
    node_map = NodeMap(PartIds.of(l2g, len(owned), halo_owner, rank), capacity=8)
    for batch in range(3):
        seeds = rng.choice(owned, 6, replace=False)
        node_map.start(seeds, np.searchsorted(owned, seeds))
        want_ids, want_owner = {int(g): i for i, g in enumerate(seeds)}, [rank] * len(seeds)
        for size in (10, 40, 200):
            sources = np.concatenate([rng.choice(seeds, size), rng.integers(0, 700 * (batch + 1), size)])[
                rng.permutation(2 * size)]
            far_owner = rng.integers(0, 3, 2 * size)
            src = np.array([local_of.get(int(g), -1 - int(g)) for g in sources], np.int64)
            want_src = []
            for g, owner in zip(sources.tolist(), far_owner.tolist()):
                if g not in want_ids:
                    want_ids[g] = len(want_ids)
                    near = local_of.get(g)
                    want_owner.append(owner if near is None else rank if near < 100 else int(halo_owner[near - 100]))
                want_src.append(want_ids[g])
            node_map.relabel(src, far_owner)
            assert src.tolist() == want_src
            assert node_map.nodes[: node_map.count].tolist() == list(want_ids)
            assert node_map.owner[: node_map.count].tolist() == want_owner
    assert node_map.capacity > 8


def test_expander_finds_owned_ids_in_buckets():
    """The owner's id lookup (a binary search within a bucket of the sorted owned ids) agrees with a plain search,
    for owned ids clustered in one range and spread over the graph, and refuses an id it does not own."""
    from sparsetrain.partitioned.expand import _locate, bucket_index

    rng = np.random.default_rng(2)
    for owned in (np.arange(5000, 9000), np.sort(rng.choice(10**6, 4000, replace=False)),
                  np.sort(np.concatenate([np.arange(100), [10**7]])), np.empty(0, np.int64)):
        owned = owned.astype(np.int64)
        starts, shift = bucket_index(owned)
        assert len(starts) <= max(len(owned), 1) + 1
        ids = rng.permutation(owned)
        out = np.empty(len(ids), np.int64)
        assert _locate(owned, starts, shift, ids, out) == -1
        assert np.array_equal(out, np.searchsorted(owned, ids))
        for stranger in (-1, 4999, 9000, 10**8, 12345):
            if stranger not in owned:
                assert _locate(owned, starts, shift, np.concatenate([ids[:3], [stranger]]), out) == min(3, len(ids))
