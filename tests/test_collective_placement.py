"""RowPlacement, CollectiveStats and the single-process path of the collectives, against NumPy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsetrain.collective import (
    CollectiveStats,
    RowPlacement,
    ShardedFeatures,
    sparse_all_gather,
    sparse_reduce_scatter,
)
from sparsetrain.errors import InputError, SettingError
from sparsetrain.storage import FeatureSource


def reference_layout(owner: np.ndarray, world: int, replicas: dict[int, list[int]]) -> list[list[int]]:
    """Global ids of each rank's local rows: owned ascending, then replicas ascending (NumPy, independent)."""
    layout = []
    for r in range(world):
        owned = np.flatnonzero(owner == r).tolist()
        reps = sorted(row for row, ranks in replicas.items() if r in ranks and owner[row] != r)
        layout.append(owned + reps)
    return layout


@pytest.mark.parametrize("num_rows,world", [(10, 3), (7, 7), (5, 8), (0, 2), (1000, 4)])
def test_contiguous_matches_numpy_split(num_rows, world):
    p = RowPlacement.contiguous(num_rows, world)
    blocks = np.array_split(np.arange(num_rows), world)
    ids = torch.arange(num_rows)
    owner, local = p.locate(ids)
    expected_owner = np.concatenate([np.full(len(b), r) for r, b in enumerate(blocks)]).astype(np.int64)
    expected_local = np.concatenate([np.arange(len(b)) for b in blocks]).astype(np.int64)
    np.testing.assert_array_equal(owner.numpy(), expected_owner)
    np.testing.assert_array_equal(local.numpy(), expected_local)
    for r, b in enumerate(blocks):
        assert p.owned_ids(r).tolist() == b.tolist() and p.local_count(r) == len(b)


def test_owner_array_and_replicas_match_reference():
    rng = np.random.default_rng(3)
    world, n = 4, 200
    owner = rng.integers(0, world - 1, n)  # rank 3 owns nothing
    replicas = {int(row): rng.integers(0, world, 3).tolist() for row in rng.choice(n, 40, replace=False)}
    p = RowPlacement.from_owner(owner, world).with_replicas(replicas)
    layout = reference_layout(owner, world, replicas)
    ids = torch.arange(n)
    for r in range(world):
        assert p.local_ids(r).tolist() == layout[r]
        assert p.local_count(r) == len(layout[r])
        got = p.local_index_on(r, ids).tolist()
        want = [layout[r].index(i) if i in layout[r] else -1 for i in range(n)]
        assert got == want
        # nearest copy: self if held, else the first holder after r on the ring
        near = p.nearest_holder(ids, r).tolist()
        for i in range(n):
            holders = {int(owner[i]), *replicas.get(i, [])}
            assert near[i] == min(holders, key=lambda h: (h - r) % world)
    assert p.holders(next(iter(replicas)))[0] == owner[next(iter(replicas))]
    table = torch.arange(n * 2, dtype=torch.float64).reshape(n, 2)
    assert torch.equal(p.shard(table, 1), table[layout[1]])
    assert torch.equal(p.shard(table.numpy(), 2), table[layout[2]])


def test_placement_identity_and_errors():
    a = RowPlacement.from_owner([0, 1, 1, 0])
    assert a == RowPlacement.from_owner(torch.tensor([0, 1, 1, 0]), 2)
    assert a != RowPlacement.contiguous(4, 2)
    assert a != a.with_replicas({0: [1]})
    assert a.with_replicas({0: [0]}) == a  # the owner is not a replica of itself
    assert RowPlacement.from_offsets([0, 3, 3, 7]).owned_ids(2).tolist() == [3, 4, 5, 6]
    with pytest.raises(SettingError, match="outside"):
        a.with_replicas({9: [1]})
    with pytest.raises(SettingError, match="rank 5"):
        a.with_replicas({0: [5]})
    with pytest.raises(SettingError, match="owner ranks"):
        RowPlacement.from_owner([0, 3], world_size=2)
    with pytest.raises(SettingError, match="non-decreasing"):
        RowPlacement.from_offsets([0, 5, 2])
    with pytest.raises(ValueError):  # SettingError is a ValueError for callers who do not know it
        RowPlacement.contiguous(-1, 2)


def test_single_process_gather_and_gradient_match_indexing():
    """Without torch.distributed the calls run as one rank; compare with plain indexing and autograd."""
    g = torch.Generator().manual_seed(0)
    table = torch.randn(50, 3, 2, generator=g, dtype=torch.float64)
    p = RowPlacement.contiguous(50, 1)
    ids = torch.randint(0, 50, (120,), generator=g)
    stats = CollectiveStats()
    leaf = table.clone().requires_grad_(True)
    out = sparse_all_gather(leaf, ids, placement=p, stats=stats)
    assert torch.equal(out.detach(), table[ids])
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (out * w).sum().backward()
    ref = table.clone().requires_grad_(True)
    (ref[ids] * w).sum().backward()
    torch.testing.assert_close(leaf.grad, ref.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sparse_reduce_scatter(w, ids, placement=p), ref.grad, rtol=1e-12, atol=1e-12)
    rec = stats.records[0]
    assert (rec.rows_requested, rec.rows_unique, rec.rows_remote, rec.bytes_sent) == (120, len(set(ids.tolist())), 0, 0)
    assert stats.calls() == 2 and stats.calls("sparse_all_gather.backward") == 1
    assert sparse_all_gather(table, torch.zeros(0, dtype=torch.long), placement=p).shape == (0, 3, 2)
    with pytest.raises(InputError, match="row id 50 is outside"):
        sparse_all_gather(table, torch.tensor([1, 50]), placement=p)
    with pytest.raises(InputError, match="placement gives this rank 50"):
        sparse_all_gather(table[:10], ids, placement=p)
    with pytest.raises(InputError, match="for 2 ranks"):
        sparse_all_gather(table, ids, placement=RowPlacement.contiguous(50, 2))


def test_stats_totals():
    stats = CollectiveStats(keep=2)
    p = RowPlacement.contiguous(10, 1)
    t = torch.ones(10, 4)
    for _ in range(3):
        sparse_all_gather(t, torch.tensor([1, 2, 2]), placement=p, stats=stats)
    assert stats.calls() == 3 and len(stats.records) == 2
    assert stats.total("rows_requested", "sparse_all_gather") == 9
    assert stats.summary()["sparse_all_gather"]["rows_unique"] == 6
    stats.reset()
    assert stats.calls() == 0 and stats.bytes_sent == 0


def test_single_process_sharded_features_with_cache():
    table = torch.randn(30, 4)
    store = ShardedFeatures.from_table(table, cache_ids=torch.tensor([1, 2]))
    ids = torch.tensor([5, 1, 5, 29])
    assert torch.equal(store.gather(ids), table[ids]) and torch.equal(store[ids], table[ids])
    assert store.cached_ids.numel() == 0  # a single rank holds every row: nothing to cache
    assert (store.shape, store.dtype, len(store), store.row_bytes) == (torch.Size([30, 4]), torch.float32, 30, 16)
    with pytest.raises(InputError, match="expected a contiguous"):
        store.gather(ids, out=torch.empty(3, 4))
    with pytest.raises(InputError, match="row id 30 is outside"):
        store.gather(torch.tensor([30]))
    assert isinstance(store, FeatureSource) and store.gather(torch.zeros(0, dtype=torch.long)).shape == (0, 4)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_ids_and_rows_pack_into_one_byte_buffer(n, dtype):
    from sparsetrain.collective._exchange import pack_rows, unpack_rows

    ids = torch.arange(n) * 7 + 2**40
    rows = torch.randn(n, 3, 2).to(dtype)
    buf = pack_rows(ids, rows)
    assert buf.dtype == torch.uint8 and buf.shape == (n, 8 + 6 * rows.element_size())
    got_ids, got_rows = unpack_rows(buf, dtype, (3, 2))
    assert torch.equal(got_ids, ids) and torch.equal(got_rows, rows)
