"""Batch ordering (Match-Reorder) against a pure-Python reference with sets."""

from __future__ import annotations

import pytest
import torch

from sparsetrain.errors import InputError
from sparsetrain.sampling import (
    CSCGraph,
    MatchReorder,
    NeighborSampler,
    SamplerInput,
    SeedBatches,
    match_reorder,
    reuse_stats,
)


def random_sets(count: int, num_nodes: int, size: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randperm(num_nodes, generator=g)[: int(torch.randint(1, size, (), generator=g))] for _ in range(count)
    ]


def greedy_reference(sets: list[set[int]], window: int) -> list[int]:
    order: list[int] = []
    for lo in range(0, len(sets), window):
        left = list(range(lo, min(lo + window, len(sets))))
        current = left[0] if not order else max(left, key=lambda c: (len(sets[order[-1]] & sets[c]), -c))
        while True:
            order.append(current)
            left.remove(current)
            if not left:
                break
            current = max(left, key=lambda c, cur=current: (len(sets[cur] & sets[c]), -c))
    return order


def test_reuse_stats_counts_rows_shared_with_the_previous_batch():
    batches = random_sets(12, 200, 80, seed=1)
    stats = reuse_stats(batches, 200)
    sets = [set(b.tolist()) for b in batches]
    assert stats.rows_needed == sum(len(s) for s in sets)
    assert stats.rows_reused == sum(len(a & b) for a, b in zip(sets, sets[1:]))
    assert stats.rows_fetched == stats.rows_needed - stats.rows_reused
    assert 0 < stats.fraction_reused < 1


@pytest.mark.parametrize("window", [1, 4, 16, 63])
def test_match_reorder_is_the_greedy_chain(window):
    batches = random_sets(130, 300, 120, seed=2)  # window 63: later windows compare 64 lists (the previous pick + 63)
    order = match_reorder(batches, 300, window)
    assert sorted(order) == list(range(130))
    assert order == greedy_reference([set(b.tolist()) for b in batches], window)
    if window == 1:
        assert order == list(range(130))


def test_match_reorder_rejects_bad_windows():
    with pytest.raises(InputError, match="window"):
        match_reorder([torch.tensor([1])], 5, 64)
    with pytest.raises(InputError, match="window"):
        MatchReorder(0)


def test_seed_batches_reordered_on_cora_share_more_rows(cora_data):
    graph = CSCGraph.from_edge_index(cora_data.edge_index, cora_data.num_nodes)
    sampler = NeighborSampler(graph, [10, 5], seed=0)
    reorder = MatchReorder(window=16)
    plain = SeedBatches(torch.arange(graph.num_nodes), 64, seed=3)
    ordered = SeedBatches(torch.arange(graph.num_nodes), 64, seed=3, order=reorder, sampler=sampler)
    before, after = plain.batches(), ordered.batches()
    assert len(after) == len(plain) == 43
    assert sorted(torch.cat(after).tolist()) == list(range(graph.num_nodes))  # every seed once
    assert sorted(b[0].item() for b in before) == sorted(b[0].item() for b in after)  # the same batches, reordered
    assert reorder.before == reuse_stats(
        [sampler.sample(SamplerInput(b, key=(1 << 48) + i)).input_nodes for i, b in enumerate(before)], graph.num_nodes
    )
    assert reorder.after.rows_needed == reorder.before.rows_needed
    assert reorder.after.fraction_reused > reorder.before.fraction_reused


def test_seed_batches_are_a_function_of_seed_and_epoch():
    seeds = torch.arange(100, 200)
    it = SeedBatches(seeds, 32, seed=1)
    assert len(it) == 4 and [len(b) for b in it] == [32, 32, 32, 4]
    assert all(torch.equal(a, b) for a, b in zip(it.batches(0), SeedBatches(seeds, 32, seed=1).batches(0)))
    it.set_epoch(1)
    assert not torch.equal(list(it)[0], it.batches(0)[0])
    assert [len(b) for b in SeedBatches(seeds, 32, drop_last=True, shuffle=False).batches()] == [32, 32, 32]
    with pytest.raises(InputError, match="sampler"):
        SeedBatches(seeds, 32, order=MatchReorder())


def test_seed_batches_share_one_shuffle_across_ranks_with_keys_unique_across_epochs_and_ranks():
    seeds = torch.arange(1000, 1100)
    keys = []
    for epoch in range(3):
        shuffled = seeds[torch.randperm(100, generator=torch.Generator().manual_seed(4 * 1_000_003 + epoch))]
        for rank in range(3):
            batches = SeedBatches(seeds, 8, seed=4, rank=rank, world_size=3)
            inputs = batches.inputs(epoch)
            assert len(batches) == len(inputs) == 5  # 33 seeds a rank, the last one left out
            assert torch.equal(torch.cat([inp.seeds for inp in inputs]), shuffled[33 * rank : 33 * (rank + 1)])
            assert all(torch.equal(inp.seeds, b) for inp, b in zip(inputs, batches.batches(epoch)))
            keys += [inp.key for inp in inputs]
    # sampling/batch_keys.py: (epoch * per_epoch + position) * world + rank, the partitioned run's and the drop-in's
    assert sorted(keys) == sorted({(e * 13 + i) * 3 + r for e in range(3) for r in range(3) for i in range(5)})
    with pytest.raises(InputError, match="rank=3"):
        SeedBatches(seeds, 8, rank=3, world_size=3)
