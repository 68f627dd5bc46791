"""sparse_all_gather / sparse_reduce_scatter / sync_replicas / ShardedFeatures on real gloo worlds of 1, 2 and 4 ranks.

Each world runs many checks in one spawn (the machine is small); every check compares
against a dense reference: the whole table all-gathered with plain torch.distributed,
then indexed, and its gradient taken by torch autograd and summed over ranks.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from sparsetrain.collective import (
    CollectiveStats,
    RowPlacement,
    ShardedFeatures,
    sparse_all_gather,
    sparse_reduce_scatter,
    sync_replicas,
)
from sparsetrain.errors import CollectiveError, InputError
from tests.collective_harness import spawn, values

pytestmark = pytest.mark.distributed

NUM_ROWS = 37


# ---------------------------------------------------------------- reference helpers (run inside the ranks)
def dense_table(local_rows: torch.Tensor, placement: RowPlacement) -> torch.Tensor:
    """The whole table, rebuilt by all-gathering every rank's (padded) local rows."""
    world = dist.get_world_size()
    most = max(placement.local_count(r) for r in range(world))
    padded = torch.zeros((most, *local_rows.shape[1:]), dtype=local_rows.dtype)
    padded[: local_rows.shape[0]] = local_rows.detach()
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    full = torch.full((placement.num_rows, *local_rows.shape[1:]), float("nan"), dtype=local_rows.dtype)
    for r in range(world):
        full[placement.local_ids(r)] = parts[r][: placement.local_count(r)]
    return full


def dense_grad(full: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, placement: RowPlacement, rank: int):
    """Expected local gradient of sum(weights * gather(ids)) summed over ranks: autograd on the dense table."""
    leaf = full.clone().requires_grad_(True)
    (leaf[ids] * weights).sum().backward()
    total = leaf.grad.clone()
    dist.all_reduce(total)
    expected = torch.zeros((placement.local_count(rank), *full.shape[1:]), dtype=full.dtype)
    owned = placement.num_owned(rank)
    expected[:owned] = total[placement.owned_ids(rank)]  # replica slots stay zero: copies' gradients go to the owner
    return expected


def make_table(shape, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((NUM_ROWS, *shape), generator=g, dtype=torch.float64)


def placements(world: int) -> dict[str, RowPlacement]:
    g = torch.Generator().manual_seed(7)
    owner = torch.randint(0, max(world - 1, 1), (NUM_ROWS,), generator=g)  # the last rank owns nothing when world > 1
    replicated = torch.randperm(NUM_ROWS, generator=g)[: NUM_ROWS // 3].tolist()
    reps = {row: torch.randint(0, world, (2,), generator=g).tolist() for row in replicated}
    return {
        "contiguous": RowPlacement.contiguous(NUM_ROWS, world),
        "owner_array": RowPlacement.from_owner(owner, world),
        "replicas": RowPlacement.from_owner(owner, world).with_replicas(reps),
        "contiguous_replicas": RowPlacement.contiguous(NUM_ROWS, world).with_replicas(
            {0: list(range(world)), 5: [world - 1]}
        ),
    }


def request(kind: str, rank: int, world: int, placement: RowPlacement, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + rank)
    n = placement.num_rows
    if kind == "random":
        return torch.randint(0, n, (int(torch.randint(1, 3 * n, (1,), generator=g)),), generator=g)
    if kind == "empty_some":
        if rank % 2 == 0:
            return torch.zeros(0, dtype=torch.int64)
        return torch.randint(0, n, (n,), generator=g)
    if kind == "skew":  # every rank asks only for rows owned by rank 0
        owned = placement.owned_ids(0)
        return owned[torch.randint(0, owned.numel(), (2 * n,), generator=g)]
    raise ValueError(kind)


def max_error(got: torch.Tensor | None, want: torch.Tensor) -> str:
    if got is None or got.shape != want.shape:
        return f"shape {None if got is None else tuple(got.shape)} vs {tuple(want.shape)}"
    return f"{(got - want).abs().max().item():.3g}" if want.numel() else "0"


def record(checks: dict, name: str, failed: bool, why: str) -> None:
    """Note one check: None when it passed, else why it failed."""
    checks[name] = why if failed else None


def expect_error(fn, exc_type, *needles) -> str | None:
    """None if ``fn()`` raises ``exc_type`` with every needle in its message, else a description of what happened."""
    try:
        fn()
    except exc_type as exc:
        missing = [n for n in needles if n not in str(exc)]
        return f"message lacks {missing}: {exc}" if missing else None
    except Exception as exc:  # the wrong kind of error is a failure too
        return f"raised {type(exc).__name__}: {exc}"
    return "did not raise"


# ---------------------------------------------------------------- checks run on every rank of a world
def _correctness(rank: int, world: int) -> dict[str, str | None]:
    failures: dict[str, str | None] = {}
    for pname, placement in placements(world).items():
        for shape in ((5,), (2, 3)):
            table = make_table(shape, seed=len(shape))
            local = placement.shard(table, rank)
            full = dense_table(local, placement)
            record(
                failures,
                f"{pname}{shape} dense reference",
                (not torch.equal(full, table)),
                "all-gathered table differs from the source table",
            )
            for seed, kind in enumerate(("random", "empty_some", "skew")):
                key = f"{pname}{shape}/{kind}"
                ids = request(kind, rank, world, placement, seed)
                stats = CollectiveStats()
                leaf = local.clone().requires_grad_(True)
                out = sparse_all_gather(leaf, ids, placement=placement, stats=stats)
                record(
                    failures,
                    key + " values",
                    (out.shape != (ids.numel(), *shape) or not torch.equal(out.detach(), full[ids])),
                    f"gathered rows differ from the dense reference (shape {tuple(out.shape)})",
                )
                rec = stats.records[-1]
                uniq = torch.unique(ids)
                held = placement.local_index_on(rank, uniq) >= 0
                row_bytes = table[0].numel() * 8
                record(
                    failures,
                    key + " dedupe/nearest copy",
                    (
                        (rec.rows_unique, rec.rows_local, rec.rows_remote)
                        != (uniq.numel(), int(held.sum()), int((~held).sum()))
                    ),
                    f"record {rec}, expected {uniq.numel()} distinct, {int(held.sum())} local",
                )
                expect_bytes = (
                    rec.rows_remote * 8 + rec.rows_served * row_bytes,
                    rec.rows_served * 8 + rec.rows_remote * row_bytes,
                )
                record(
                    failures,
                    key + " bytes",
                    (rec.bytes_sent, rec.bytes_received) != expect_bytes,
                    f"{rec}: expected (sent, received) {expect_bytes}",
                )
                sent_recv = torch.tensor([rec.bytes_sent, rec.bytes_received], dtype=torch.int64)
                dist.all_reduce(sent_recv)
                record(
                    failures,
                    key + " byte balance",
                    (sent_recv[0] != sent_recv[1]),
                    f"bytes sent over all ranks {sent_recv.tolist()} != received",
                )
                g = torch.Generator().manual_seed(99 + rank + seed)
                weights = torch.randn(out.shape, generator=g, dtype=torch.float64)
                (out * weights).sum().backward()
                expected = dense_grad(full, ids, weights, placement, rank)
                record(
                    failures,
                    key + " gradient",
                    (not torch.allclose(leaf.grad, expected, atol=1e-12, rtol=1e-12)),
                    f"max error {max_error(leaf.grad, expected)}",
                )
                direct = sparse_reduce_scatter(weights, ids, placement=placement)
                record(
                    failures,
                    key + " reduce_scatter",
                    (not torch.allclose(direct, expected, atol=1e-12, rtol=1e-12)),
                    f"max error {max_error(direct, expected)}",
                )
        for dtype in (torch.float32, torch.bfloat16, torch.float16):  # small integers: sums are exact in every dtype
            key = f"{pname}/{dtype}"
            table = torch.randint(-4, 5, (NUM_ROWS, 3), generator=torch.Generator().manual_seed(4)).to(dtype)
            ids = request("random", rank, world, placement, seed=5)
            leaf = placement.shard(table, rank).requires_grad_(True)
            out = sparse_all_gather(leaf, ids, placement=placement)
            record(
                failures,
                key + " values",
                out.dtype != dtype or not torch.equal(out.detach(), table[ids]),
                "rows differ",
            )
            weights = torch.randint(-2, 3, out.shape, generator=torch.Generator().manual_seed(rank)).to(dtype)
            (out * weights).sum().backward()
            expected = dense_grad(table.double(), ids, weights.double(), placement, rank).to(dtype)
            record(
                failures,
                key + " gradient",
                not torch.equal(leaf.grad, expected),
                f"max error {max_error(leaf.grad.double(), expected.double())}",
            )
            direct = sparse_reduce_scatter(weights, ids, placement=placement)
            record(failures, key + " reduce_scatter", not torch.equal(direct, expected), "sums differ")
        if placement.has_replicas:
            stale = placement.shard(make_table((5,), seed=1), rank)
            owned = placement.num_owned(rank)
            stale[owned:] = -1.0  # replica slots out of date
            updated = placement.shard(make_table((5,), seed=1), rank)
            sync_replicas(stale, placement=placement)
            record(
                failures,
                f"{pname} sync_replicas",
                (not torch.equal(stale, updated)),
                "replica slots differ from the owners' rows after sync",
            )
    return failures


def _bad_input(rank: int, world: int) -> dict[str, str | None]:
    placement = RowPlacement.contiguous(NUM_ROWS, world)
    table = make_table((5,))
    local = placement.shard(table, rank)
    last = world - 1
    ok_ids = torch.tensor([0, NUM_ROWS - 1, 3, 3])
    checks: dict[str, str | None] = {}

    def gather(rows, ids, **kw):
        return lambda: sparse_all_gather(rows, ids, placement=placement, timeout=20, **kw)

    ids = torch.tensor([0, NUM_ROWS + 5]) if rank == last else ok_ids
    checks["id out of range"] = expect_error(
        gather(local, ids), InputError, f"rank {last}", f"row id {NUM_ROWS + 5}", "outside"
    )
    ids = torch.tensor([-2]) if rank == 0 else ok_ids
    checks["negative id"] = expect_error(gather(local, ids), InputError, "rank 0", "row id -2")
    ids = torch.tensor([0.0, 1.0]) if rank == last else ok_ids
    checks["float ids"] = expect_error(gather(local, ids), InputError, f"rank {last}", "integer")
    rows = local[:-1] if rank == 0 else local
    checks["wrong shard size"] = expect_error(gather(rows, ok_ids), InputError, "rank 0", "placement.shard")
    wrong_world = RowPlacement.contiguous(NUM_ROWS, world + 1)
    checks["placement for another world"] = expect_error(
        lambda: sparse_all_gather(local, ok_ids, placement=wrong_world), InputError, f"for {world + 1} ranks"
    )
    ids = torch.tensor([NUM_ROWS]) if rank == last else ok_ids
    checks["reduce_scatter id out of range"] = expect_error(
        lambda: sparse_reduce_scatter(torch.ones(ids.numel(), 5, dtype=torch.float64), ids, placement=placement),
        InputError, f"rank {last}", "outside",
    )  # fmt: skip
    grads = torch.ones(1 if rank == 0 else 4, 5, dtype=torch.float64)
    checks["reduce_scatter grad rows"] = expect_error(
        lambda: sparse_reduce_scatter(grads, ok_ids, placement=placement),
        InputError,
        "rank 0",
        "grad_rows has 1 rows",
    )
    if world > 1:
        rows = local.float() if rank == 0 else local
        checks["dtype mismatch"] = expect_error(
            gather(rows, ok_ids), InputError, "dtypes differ", "rank 0: float32", "float64"
        )
        rows = local[:, :4] if rank == last else local
        checks["width mismatch"] = expect_error(
            gather(rows, ok_ids), InputError, "row shapes", f"rank {last}: (4,)", "(5,)"
        )
        rows = local.clone().requires_grad_(rank == 0)
        checks["grad flag mismatch"] = expect_error(gather(rows, ok_ids), InputError, "need", "gradient")
        other = RowPlacement.from_owner(torch.arange(NUM_ROWS) % world, world)
        mixed = other if rank == 0 else placement
        checks["different placements"] = expect_error(
            lambda: sparse_all_gather(mixed.shard(table, rank), ok_ids, placement=mixed),
            InputError,
            "different placements",
        )
    # the group is still usable after every reported error
    after = sparse_all_gather(local, ok_ids, placement=placement)
    checks["usable after errors"] = None if torch.equal(after, table[ok_ids]) else "rows differ after the errors"
    return checks


def _sharded_features(rank: int, world: int) -> dict[str, str | None]:
    checks: dict[str, str | None] = {}
    table = make_table((6,), seed=3)
    g = torch.Generator().manual_seed(5 + rank)
    ids = torch.randint(0, NUM_ROWS, (50,), generator=g)
    owner = torch.arange(NUM_ROWS) % world
    cache_ids = torch.randint(0, NUM_ROWS, (10,), generator=g)
    stores = {
        "range": ShardedFeatures.from_table(table),
        "owner array": ShardedFeatures.from_table(table.numpy(), partition=owner),
        "range+cache": ShardedFeatures.from_table(table, cache_ids=cache_ids),
    }
    for name, store in stores.items():
        got = store.gather(ids)
        checks[f"{name} gather"] = None if torch.equal(got, table[ids]) else "rows differ from the table"
        out = torch.empty(ids.numel(), 6, dtype=torch.float64)
        store.gather(ids.flip(0), out=out)
        checks[f"{name} gather(out=)"] = None if torch.equal(out, table[ids.flip(0)]) else "out= rows differ"
        empty = store.gather(torch.zeros(0, dtype=torch.int64) if rank == 0 else ids[:3])
        checks[f"{name} empty"] = (
            None if empty.shape == ((0, 6) if rank == 0 else (3, 6)) else f"shape {tuple(empty.shape)}"
        )
        if (store.shape, store.dtype, store.device) != (torch.Size([NUM_ROWS, 6]), torch.float64, torch.device("cpu")):
            checks[f"{name} attributes"] = f"{store.shape} {store.dtype} {store.device}"
    cached, plain = stores["range+cache"], stores["range"]
    remote_cached = cached.placement.local_index_on(rank, torch.unique(cache_ids)) < 0
    expect_hits = torch.isin(torch.unique(ids), torch.unique(cache_ids)[remote_cached]).sum().item()
    fresh = ShardedFeatures.from_table(table, cache_ids=cache_ids)
    fill = (fresh.stats.bytes_moved, fresh.stats.misses, fresh.cached_ids.numel())
    expect_fill = (int(remote_cached.sum()) * 6 * 8, 0, int(remote_cached.sum()))
    record(
        checks,
        "cache fill accounting",
        fill != expect_fill,
        f"(bytes_moved, misses, cached rows) {fill}, expected {expect_fill}",
    )
    first_hits = cached.stats.hits
    cached.stats.reset()
    plain.stats.reset()
    cached.gather(ids)
    plain.gather(ids)
    record(
        checks,
        "cache hits",
        cached.stats.hits != expect_hits,
        f"{cached.stats.hits} hits, expected {expect_hits} (first round {first_hits})",
    )
    saved = plain.stats.bytes_moved - cached.stats.bytes_moved
    record(
        checks,
        "cache saves bytes",
        saved != expect_hits * 6 * 8,
        f"cached {cached.stats.bytes_moved} B vs plain {plain.stats.bytes_moved} B, {expect_hits} hits",
    )
    for size in (5, 400, 60):  # the staging buffer behind the cache grows and is reused
        more = torch.randint(0, NUM_ROWS, (size,), generator=g)
        record(checks, f"cache gather of {size}", not torch.equal(cached.gather(more), table[more]), "rows differ")
    bad = torch.tensor([NUM_ROWS + 1]) if rank == world - 1 else ids
    checks["store id out of range"] = expect_error(
        lambda: cached.gather(bad), InputError, f"rank {world - 1}", "outside"
    )
    wrong_out = torch.empty(1 if rank == 0 else ids.numel(), 6, dtype=torch.float64)
    if rank == 0:
        checks["store bad out= on one rank"] = expect_error(
            lambda: plain.gather(ids, out=wrong_out), InputError, "expected a contiguous"
        )
    else:  # the other ranks are not held up by rank 0's mistake
        record(
            checks,
            "store bad out= on one rank",
            not torch.equal(plain.gather(ids, out=wrong_out), table[ids]),
            "rows differ",
        )
    return checks


def check_world(rank: int, world: int) -> dict[str, str | None]:
    torch.manual_seed(0)
    return {**_correctness(rank, world), **_bad_input(rank, world), **_sharded_features(rank, world)}


@pytest.mark.parametrize("world", [1, 2, pytest.param(4, marks=pytest.mark.slow)])  # (4 ranks on 2 cores: slow)
def test_collectives_against_dense_reference(world):
    per_rank = values(spawn(check_world, world, timeout_s=300))
    failed = {f"rank {r}: {name}": why for r, checks in enumerate(per_rank) for name, why in checks.items() if why}
    assert not failed, "\n".join(f"{k}: {v}" for k, v in failed.items())
    assert len(per_rank[0]) >= 60  # every scenario ran


# ---------------------------------------------------------------- a rank that dies or never arrives
def _dead_or_hung_peer(rank: int, world: int, mode: str) -> tuple[str, float]:
    placement = RowPlacement.contiguous(NUM_ROWS, world)
    local = placement.shard(make_table((4,)), rank)
    sparse_all_gather(local, torch.arange(NUM_ROWS), placement=placement)  # one healthy call first
    if rank == world - 1:
        if mode == "dies":
            os._exit(17)
        time.sleep(4)  # alive, but never joins the next collective
        return "absent", 0.0
    start = time.monotonic()
    try:
        sparse_all_gather(local, torch.arange(NUM_ROWS), placement=placement, timeout=2)
    except CollectiveError as exc:
        return str(exc), time.monotonic() - start
    return "no error", time.monotonic() - start


@pytest.mark.parametrize("mode", ["dies", "hangs"])
def test_dead_or_absent_rank_raises_on_the_others(mode):
    results = spawn(_dead_or_hung_peer, 3, mode, timeout_s=120, teardown=False)
    for rank in range(2):
        status, (message, seconds) = results[rank]
        assert status == "ok", message
        assert "sparse_all_gather" in message and f"rank {rank} of 3" in message and "peer rank died" in message, (
            message
        )
        assert seconds < 10, f"rank {rank} waited {seconds:.1f} s"
    assert results[2][0] == ("died" if mode == "dies" else "ok")
