"""Sparse collectives benchmark: bytes moved and time of ``sparse_all_gather`` vs a dense all-gather.

World of 4 gloo ranks on this machine (spawned here, or run under ``torchrun --nproc-per-node 4``).
Every rank owns a contiguous quarter of a float32 table. Per request fraction f (1 %, 10 %, 50 %),
every rank asks for ``f * rows`` uniformly random ids (duplicates included) and reads them with
``sparse_all_gather``; the peer, timed in the same run, is ``torch.distributed.all_gather`` of the
whole table followed by indexing. A second peer prices the sparse collective's extra rounds: one bare
``dist.all_to_all_single`` that moves only the distinct rows each rank needs from their owners, with
the ids and split sizes exchanged before timing (no metadata round, no id round). The mirror, ``sparse_reduce_scatter``
of row gradients, is timed against an ``all_reduce`` of a table-sized gradient. Then ``ShardedFeatures`` serves a skewed
(power-law) stream of minibatches with and without a static cache of the hottest remote rows.
Bytes are payload per rank (ids + rows sent to / received from other ranks), mean over ranks;
times are the median over repeats of the slowest rank. Prints a table and writes JSON.

    python benchmarks/collectives.py                           # 250k rows x 100 float32, world 4
    python benchmarks/collectives.py --rows 20000 --repeats 2  # a quick run
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sparsetrain.collective import (
    CollectiveStats,
    RowPlacement,
    ShardedFeatures,
    sparse_all_gather,
    sparse_reduce_scatter,
)

HERE = Path(__file__).resolve().parent
FRACTIONS = (0.01, 0.10, 0.50)


def _slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _timed(fn, times: list[float]):
    """Run ``fn`` with every rank starting together; append the slowest rank's seconds to ``times``."""
    dist.barrier()
    start = time.perf_counter()
    result = fn()
    times.append(_slowest(time.perf_counter() - start))
    return result


def _mean(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t) / dist.get_world_size()


def dense_all_gather(local: torch.Tensor, ids: torch.Tensor, world: int) -> torch.Tensor:
    """The peer: all-gather every shard (equal sizes here), then index."""
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    return torch.cat(parts)[ids]


def bare_exchange_plan(ids: torch.Tensor, placement: RowPlacement, rank: int, world: int):
    """Set-up of the bare peer, not timed: what each owner sends to whom, and every split size."""
    uniq, slot = torch.unique(ids, return_inverse=True)
    owner = placement.owner(uniq)
    order = torch.argsort(owner, stable=True)  # rows arrive grouped by source rank
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel())
    uniq, slot = uniq[order], position[slot]
    recv_splits = torch.bincount(owner, minlength=world)
    send_splits = torch.empty_like(recv_splits)
    dist.all_to_all_single(send_splits, recv_splits)
    asked = torch.empty(int(send_splits.sum()), dtype=torch.int64)
    dist.all_to_all_single(asked, uniq, send_splits.tolist(), recv_splits.tolist())
    return placement.local_index_on(rank, asked), send_splits.tolist(), recv_splits.tolist(), slot


def bare_all_to_all(local: torch.Tensor, plan) -> torch.Tensor:
    """The peer with no metadata round: owners send the needed rows in one all_to_all_single, then index."""
    served_idx, send_splits, recv_splits, slot = plan
    recv = local.new_empty((sum(recv_splits), local.shape[1]))
    dist.all_to_all_single(recv, local.index_select(0, served_idx), recv_splits, send_splits)
    return recv[slot]


def bench_gather(rank: int, world: int, args) -> list[dict]:
    placement = RowPlacement.contiguous(args.rows, world)
    g = torch.Generator().manual_seed(0)
    table = torch.randn(args.rows, args.dim, generator=g)
    local = placement.shard(table, rank)
    shard_bytes = local.numel() * local.element_size()
    out = []
    for frac in FRACTIONS:
        ids = torch.randint(0, args.rows, (int(frac * args.rows),), generator=torch.Generator().manual_seed(10 + rank))
        sparse_t, dense_t, bare_t = [], [], []
        stats = CollectiveStats()
        plan = bare_exchange_plan(ids, placement, rank, world)
        for rep in range(args.repeats + 1):  # the first round warms up
            got = _timed(lambda: sparse_all_gather(local, ids, placement=placement, stats=stats), sparse_t)
            ref = _timed(lambda: dense_all_gather(local, ids, world), dense_t)
            bare = _timed(lambda: bare_all_to_all(local, plan), bare_t)
            if rep == 0 and not (torch.equal(got, ref) and torch.equal(bare, ref)):
                raise SystemExit(
                    "sparse_all_gather or the bare all_to_all_single rows differ from the dense all-gather"
                )
        rec = stats.records[-1]
        row_bytes = args.dim * 4
        out.append({
            "fraction": frac,
            "ids_per_rank": ids.numel(),
            "distinct_per_rank": _mean(rec.rows_unique),
            "remote_distinct_per_rank": _mean(rec.rows_remote),
            "sparse_bytes_received": _mean(rec.bytes_received),
            "sparse_bytes_sent": _mean(rec.bytes_sent),
            "expected_bytes": _mean(rec.rows_remote * (row_bytes + 8)),
            "dense_bytes_received": (world - 1) * shard_bytes,
            "sparse_seconds": statistics.median(sparse_t[1:]),
            "dense_seconds": statistics.median(dense_t[1:]),
            "bare_all_to_all_seconds": statistics.median(bare_t[1:]),
        })  # fmt: skip
    return out


def dense_reduce(grads, ids, args, lo: int, count: int) -> torch.Tensor:
    """The peer: a table-sized gradient all-reduced, then this rank's rows [lo, lo + count)."""
    full = torch.zeros(args.rows, args.dim).index_add_(0, ids, grads)
    dist.all_reduce(full)
    return full[lo : lo + count]


def bench_reduce_scatter(rank: int, world: int, args) -> list[dict]:
    """Row gradients back to their owners: sparse_reduce_scatter vs all_reduce of a table-sized gradient."""
    placement = RowPlacement.contiguous(args.rows, world)
    table_bytes = args.rows * args.dim * 4
    lo = int(placement.owned_ids(rank)[0]) if placement.num_owned(rank) else 0
    out = []
    for frac in FRACTIONS:
        ids = torch.randint(0, args.rows, (int(frac * args.rows),), generator=torch.Generator().manual_seed(20 + rank))
        grads = torch.randn(ids.numel(), args.dim, generator=torch.Generator().manual_seed(30 + rank))
        sparse_t, dense_t = [], []
        stats = CollectiveStats()
        for rep in range(args.repeats + 1):
            got = _timed(lambda: sparse_reduce_scatter(grads, ids, placement=placement, stats=stats), sparse_t)
            ref = _timed(lambda: dense_reduce(grads, ids, args, lo, placement.num_owned(rank)), dense_t)
            if rep == 0 and not torch.allclose(got, ref, rtol=1e-4, atol=1e-4):
                raise SystemExit("sparse_reduce_scatter sums differ from the dense all-reduce")
        rec = stats.records[-1]
        out.append({
            "fraction": frac,
            "remote_distinct_per_rank": _mean(rec.rows_remote),
            "sparse_bytes_received": _mean(rec.bytes_received),
            "dense_bytes_received": 2 * (world - 1) / world * table_bytes,  # ring all-reduce volume
            "sparse_seconds": statistics.median(sparse_t[1:]),
            "dense_seconds": statistics.median(dense_t[1:]),
        })  # fmt: skip
    return out


def bench_sharded(rank: int, world: int, args) -> list[dict]:
    g = torch.Generator().manual_seed(1)
    table = torch.randn(args.rows, args.dim, generator=g)
    # popularity: power law over a fixed random order of the rows (same on every rank)
    order = torch.randperm(args.rows, generator=g)
    weight = 1.0 / torch.arange(1, args.rows + 1, dtype=torch.float64) ** args.skew
    hot = order[: int(args.cache_fraction * args.rows)]
    batches = [
        order[
            torch.multinomial(
                weight, args.batch, replacement=True, generator=torch.Generator().manual_seed(100 * rank + b)
            )
        ]
        for b in range(args.steps)
    ]
    stores = {
        "no cache": ShardedFeatures.from_table(table),
        f"static cache {args.cache_fraction:.0%} hottest": ShardedFeatures.from_table(table, cache_ids=hot),
    }
    seconds: dict[str, list[float]] = {name: [] for name in stores}
    for store in stores.values():
        store.gather(batches[0])  # warm-up
        store.stats.reset()
    for ids in batches:  # the two stores take turns, so drifting machine load hits both alike
        for name, store in stores.items():
            _timed(lambda: store.gather(ids), seconds[name])
    results = [
        {
            "store": name,
            "steps": args.steps,
            "batch": args.batch,
            "cache_bytes_per_rank": _mean(store.cache_bytes),
            "hit_rate": _mean(store.stats.hit_rate),
            "bytes_moved_per_step": _mean(store.stats.bytes_moved / args.steps),
            "seconds_per_step": statistics.median(seconds[name]),
            "collective_seconds_per_step": statistics.median(
                r.seconds for r in list(store.collective_stats.records)[-args.steps :]
            ),
        }
        for name, store in stores.items()
    ]
    for name, store in stores.items():  # checked after the timed loop, so its allocations stay out of it
        if not torch.equal(store.gather(batches[-1]), table[batches[-1]]):
            raise SystemExit(f"ShardedFeatures ({name}) rows differ from the table")
    return results


def worker(rank: int, world: int, port: int | None, args, result_path: str | None) -> None:
    torch.set_num_threads(1)
    if port is not None:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))  # fmt: skip
    else:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    sharded = bench_sharded(rank, world, args)  # first, before the dense all-gathers fragment the heap
    results = {
        "gather": bench_gather(rank, world, args),
        "reduce_scatter": bench_reduce_scatter(rank, world, args),
        "sharded_features": sharded,
    }
    if rank == 0 and result_path:
        Path(result_path).write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def report(results: dict, args, world: int) -> None:
    mib = 2**20
    print(f"\nsparse_all_gather vs dense all-gather, world {world} (gloo), table {args.rows} x {args.dim} float32")
    print(
        "(MiB received per rank; 'model' = remote distinct rows x (row + 8-byte id), what the design says should move)"
    )
    print(f"{'fraction':>8} {'ids/rank':>9} {'distinct':>9} {'remote':>8} {'model MiB':>9} {'sparse MiB':>10} "
          f"{'dense MiB':>9} {'bytes ratio':>11} {'sparse ms':>9} {'dense ms':>9} {'speedup':>7}")  # fmt: skip
    for r in results["gather"]:
        print(f"{r['fraction']:>8.0%} {r['ids_per_rank']:>9} {r['distinct_per_rank']:>9.0f} "
              f"{r['remote_distinct_per_rank']:>8.0f} {r['expected_bytes'] / mib:>9.2f} "
              f"{r['sparse_bytes_received'] / mib:>10.2f} {r['dense_bytes_received'] / mib:>9.2f} "
              f"{r['sparse_bytes_received'] / r['dense_bytes_received']:>11.3f} {r['sparse_seconds'] * 1e3:>9.1f} "
              f"{r['dense_seconds'] * 1e3:>9.1f} {r['dense_seconds'] / r['sparse_seconds']:>7.2f}x")  # fmt: skip
    print("\nthe same gathers against one bare all_to_all_single of the needed rows (ids and splits known in advance):")
    print("the price of the sparse collective's metadata and id rounds and its dedupe bookkeeping")
    print(f"{'fraction':>8} {'sparse ms':>9} {'bare a2a ms':>11} {'sparse/bare':>11}")
    for r in results["gather"]:
        print(f"{r['fraction']:>8.0%} {r['sparse_seconds'] * 1e3:>9.1f} {r['bare_all_to_all_seconds'] * 1e3:>11.1f} "
              f"{r['sparse_seconds'] / r['bare_all_to_all_seconds']:>10.2f}x")  # fmt: skip
    print("\nsparse_reduce_scatter (row gradients to owners) vs all_reduce of a table-sized gradient (ring volume)")
    print(
        f"{'fraction':>8} {'remote':>8} {'sparse MiB':>10} {'dense MiB':>9} {'bytes ratio':>11} "
        f"{'sparse ms':>9} {'dense ms':>9} {'speedup':>7}"
    )
    for r in results["reduce_scatter"]:
        print(f"{r['fraction']:>8.0%} {r['remote_distinct_per_rank']:>8.0f} {r['sparse_bytes_received'] / mib:>10.2f} "
              f"{r['dense_bytes_received'] / mib:>9.2f} "
              f"{r['sparse_bytes_received'] / r['dense_bytes_received']:>11.3f} "
              f"{r['sparse_seconds'] * 1e3:>9.1f} {r['dense_seconds'] * 1e3:>9.1f} "
              f"{r['dense_seconds'] / r['sparse_seconds']:>7.2f}x")  # fmt: skip
    print(f"\nShardedFeatures, {args.steps} steps x {args.batch} ids per rank, power-law access (exponent {args.skew})")
    print(
        f"{'store':<28} {'cache MiB':>9} {'hit rate':>8} {'MiB moved/step':>14} {'median ms/step':>14} "
        f"{'of it collective':>16}"
    )
    for r in results["sharded_features"]:
        print(f"{r['store']:<28} {r['cache_bytes_per_rank'] / mib:>9.2f} {r['hit_rate']:>8.1%} "
              f"{r['bytes_moved_per_step'] / mib:>14.2f} {r['seconds_per_step'] * 1e3:>14.1f} "
              f"{r['collective_seconds_per_step'] * 1e3:>16.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--cache-fraction", type=float, default=0.05)
    parser.add_argument("--out", type=Path, default=HERE / "out" / "collectives.json")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if "RANK" in os.environ:  # under torchrun
        world = int(os.environ["WORLD_SIZE"])
        worker(int(os.environ["RANK"]), world, None, args, str(args.out))
        if int(os.environ["RANK"]) != 0:
            return
    else:
        world = args.world
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(worker, args=(world, port, args, str(args.out)), nprocs=world, start_method="spawn")
    results = json.loads(args.out.read_text())
    results["config"] = {**{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "world": world,
                         "backend": "gloo", "torch": torch.__version__}  # fmt: skip
    args.out.write_text(json.dumps(results, indent=1))
    report(results, args, world)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
