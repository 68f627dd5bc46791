"""Feature gather throughput: sparsetrain's storage tiers vs the plain PyTorch/NumPy way, same run.

    python benchmarks/feature_gather.py              # 256 MiB tables (the default)
    python benchmarks/feature_gather.py --mib 64     # smaller tables

For rows of 128 and 256 float32 (512 B, 1 KiB): a table of ``--mib`` MiB, a cache of a quarter of it,
and batches of random ids covering 10% of the rows (duplicates allowed). Every comparison times
sparsetrain and its peer in the same run, alternating, median of ``--reps`` repetitions:

1. disk tier: ``MmapFeatures.gather`` vs ``torch.from_numpy(np.load(path, mmap_mode="r"))[ids]``,
   with a cold page cache (``posix_fadvise(DONTNEED)`` on the file before each repetition) and warm;
2. CPU gather of an in-memory table (``TensorFeatures``, the kernel ``PinnedFeatures`` uses on the CPU)
   vs ``torch.index_select`` on 2 threads;
3. ``CachedFeatures`` (hybrid, 25% of the table) over ``MmapFeatures`` vs no cache, for uniform and
   Zipf(1.0) ids, page cache cold and warm, after one warm-up pass;
4. cache hit rates (cache = 10% of rows) of every policy and Belady's optimum on a Zipf(1.0) trace and on
   a trace of repeated neighbor sampling on a power-law graph;
5. GPU only (skipped without CUDA): zero-copy ``PinnedFeatures`` gather as a fraction of the pinned
   host-to-device memcpy bandwidth, and vs CPU gather + copy.

Prints a table, writes benchmarks/out/feature_gather.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE.parent))

from sparsetrain.storage import CachedFeatures, MmapFeatures, PinnedFeatures, TensorFeatures  # noqa: E402
from sparsetrain.storage.belady import belady_hit_rate  # noqa: E402
from sparsetrain.storage.policies import access_counts, make_policy, replay  # noqa: E402

THREADS = 2


def drop_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def median_time(fn, reps: int, before=None) -> float:
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def alternate(fns: dict, reps: int, before=None) -> dict:
    """Median seconds of each callable, repetitions interleaved so load changes hit all alike."""
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            if before is not None:
                before()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def row(
    results: list, section: str, name: str, seconds: float, rows: int, row_bytes: int, peer: str | None = None
) -> None:
    entry = {
        "section": section,
        "name": name,
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "GB_per_s": rows * row_bytes / seconds / 1e9,
    }
    if peer is not None:
        entry["vs"] = peer
    results.append(entry)


def bench_width(dim: int, mib: int, reps: int, folder: Path, results: list) -> None:
    rows = (mib << 20) // (dim * 4)
    row_bytes = dim * 4
    rng = np.random.default_rng(dim)
    table = rng.standard_normal((rows, dim), dtype=np.float32)
    path = folder / f"features_{dim}.npy"
    np.save(path, table)
    count = rows // 10
    ids = torch.from_numpy(rng.integers(0, rows, count))
    tag = f"{dim} floats ({row_bytes} B), {rows:,} rows, {count:,} ids"
    print(f"\n== {tag}")

    expected = table[ids.numpy()]
    open_stores = {}

    def reopen_cold():
        """Fresh stores (no pages mapped by this process) and the file dropped from the page cache."""
        for old in open_stores.values():
            old.close()
        drop_page_cache(path)
        open_stores.update(
            mmap=MmapFeatures(path), mmap_auto=MmapFeatures(path, advise="auto"), pread=MmapFeatures(path, mode="pread")
        )

    def peer_fresh():
        return torch.from_numpy(np.load(path, mmap_mode="r"))[ids]

    reopen_cold()
    for store in open_stores.values():
        assert np.array_equal(store.gather(ids).numpy(), expected)
    assert np.array_equal(peer_fresh().numpy(), expected)
    cold = alternate(
        {
            "mmap": lambda: open_stores["mmap"].gather(ids),
            "mmap_auto": lambda: open_stores["mmap_auto"].gather(ids),
            "pread": lambda: open_stores["pread"].gather(ids),
            "peer": peer_fresh,
        },
        reps,
        before=reopen_cold,
    )
    warm_page_cache(path)
    peer_map = torch.from_numpy(np.load(path, mmap_mode="r"))
    peer_map[ids]
    warm = alternate(
        {
            "mmap": lambda: open_stores["mmap"].gather(ids),
            "pread": lambda: open_stores["pread"].gather(ids),
            "peer": lambda: peer_map[ids],
        },
        reps,
    )
    labels = {"mmap": "MmapFeatures", "mmap_auto": "MmapFeatures(advise='auto')", "pread": "MmapFeatures(mode='pread')"}
    for label, got in (("cold", cold), ("warm", warm)):
        peer = f"np.load(mmap_mode='r')[ids] {label}"
        row(results, f"disk {tag}", peer, got["peer"], count, row_bytes)
        for key, name in labels.items():
            if key in got:
                row(results, f"disk {tag}", f"{name} {label}", got[key], count, row_bytes, peer)
    for store in open_stores.values():
        store.close()
    peer_map = None  # frees the mapping (a name the timed lambdas close over: `del` would leave them undefined)

    tensor = torch.from_numpy(table)
    memory = TensorFeatures(tensor)
    out = torch.empty(count, dim)
    peer_out = torch.empty(count, dim)
    assert torch.equal(memory.gather(ids, out=out), tensor[ids])
    mem = alternate(
        {"ours": lambda: memory.gather(ids, out=out), "peer": lambda: torch.index_select(tensor, 0, ids, out=peer_out)},
        reps * 3,
    )
    mem_new = alternate(
        {"ours": lambda: memory.gather(ids), "peer": lambda: torch.index_select(tensor, 0, ids)}, reps * 3
    )
    row(results, f"memory {tag}", "torch.index_select(out=)", mem["peer"], count, row_bytes)
    row(
        results,
        f"memory {tag}",
        "TensorFeatures.gather(out=)",
        mem["ours"],
        count,
        row_bytes,
        "torch.index_select(out=)",
    )
    row(results, f"memory {tag}", "torch.index_select", mem_new["peer"], count, row_bytes)
    row(results, f"memory {tag}", "TensorFeatures.gather", mem_new["ours"], count, row_bytes, "torch.index_select")

    # cache of a quarter of the table over the disk tier; ids uniform (as above) and Zipf(1.0)
    p = 1.0 / np.arange(1, rows + 1)
    p /= p.sum()
    shuffle = rng.permutation(rows)
    zipf_batches = [torch.from_numpy(shuffle[rng.choice(rows, count, p=p)]) for _ in range(2 * reps + 2)]
    uniform_batches = [torch.from_numpy(rng.integers(0, rows, count)) for _ in range(2 * reps + 2)]
    for label, batches in (("uniform", uniform_batches), ("zipf", zipf_batches)):
        hot = access_counts(batches[:1], rows)
        cache = CachedFeatures(MmapFeatures(path), capacity_bytes=(mib << 20) // 4, policy="hybrid", hotness=hot)
        plain = {"store": MmapFeatures(path)}
        for b in batches[:2]:
            cache.gather(b)
        cache.stats.reset()

        def reopen(cold: bool):
            """New backing stores so no page stays mapped; then drop the file from the page cache."""
            plain["store"].close()
            cache.backing.close()
            cache.backing = MmapFeatures(path)
            plain["store"] = MmapFeatures(path)
            if cold:
                drop_page_cache(path)

        for temp in ("cold", "warm"):
            if temp == "warm":
                reopen(False)
                warm_page_cache(path)
            cache.stats.reset()
            fresh = batches[2 : 2 + reps] if temp == "cold" else batches[2 + reps :]  # never a batch seen before
            it_cache, it_plain = iter(fresh), iter(fresh)
            got = alternate(
                {
                    "cache": lambda: cache.gather(next(it_cache)),
                    "nocache": lambda: plain["store"].gather(next(it_plain)),
                },
                reps,
                before=(lambda: reopen(True)) if temp == "cold" else None,
            )
            peer = f"MmapFeatures, no cache, {label} ids, {temp}"
            row(results, f"cache {tag}", peer, got["nocache"], count, row_bytes)
            row(
                results,
                f"cache {tag}",
                f"CachedFeatures(hybrid, 25%) {label} ids, {temp}",
                got["cache"],
                count,
                row_bytes,
                peer,
            )
            results[-1]["hit_rate"] = cache.stats.hit_rate
        plain["store"].close()
    table = tensor = None
    path.unlink()


def bench_hit_rates(results: list, folder: Path) -> list:
    """Hit rates (cache = 10% of rows) on a Zipf(1.0) trace and on a neighbor-sampling trace."""
    import sparsetrain as st

    rates = []
    n = 20_000
    rng = np.random.default_rng(1)
    p = 1.0 / np.arange(1, n + 1)
    p /= p.sum()
    perm = np.random.default_rng(1234).permutation(n)
    zipf = [perm[rng.choice(n, 1000, p=p)] for _ in range(300)]
    pre = [perm[rng.choice(n, 1000, p=p)] for _ in range(10)]
    traces = {"Zipf(1.0), 20K rows, 300 batches of 1000 draws": (zipf, access_counts(pre, n), n)}
    try:
        from sparsetrain.sampling import NeighborSampler, SamplerInput

        ds = st.datasets.synthesize(
            folder / "graph", 20_000, 200_000, feature_dim=4, num_classes=4, seed=0, overwrite=True, quiet=True
        )

        def sample(batches, seed):
            sampler = NeighborSampler(ds.graph, [10, 5], seed=seed)
            gen = torch.Generator().manual_seed(seed)
            train, out, pos = ds.split["train"], [], 0
            order = train[torch.randperm(train.numel(), generator=gen)]
            for _ in range(batches):
                if pos + 16 > order.numel():
                    order, pos = train[torch.randperm(train.numel(), generator=gen)], 0
                out.append(sampler.sample(SamplerInput(order[pos : pos + 16])).input_nodes.numpy())
                pos += 16
            return out

        trace = sample(600, 1)
        traces["neighbor sampling [10, 5], synth power-law 20K nodes / 200K edges, 600 batches of 16 seeds"] = (
            trace,
            access_counts(sample(20, 2), ds.num_nodes),
            ds.num_nodes,
        )
        traces["same sampling trace, hotness = in-degree"] = (trace, ds.graph.in_degrees().numpy(), ds.num_nodes)
    except ImportError:
        pass
    for name, (trace, hot, rows) in traces.items():
        entry = {"trace": name}
        for policy in ("static", "lru", "clock", "hybrid"):
            entry[policy] = replay(make_policy(policy, rows, rows // 10, hot), trace)
        entry["belady"] = belady_hit_rate(trace, rows // 10, rows)
        rates.append(entry)
    return rates


def bench_gpu(results: list, reps: int) -> None:
    if not torch.cuda.is_available():
        print("\n(no CUDA device: zero-copy GPU gather not measured)")
        return
    torch.cuda.synchronize()
    big = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(big, device="cuda")

    def timed_cuda(fn):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    memcpy = big.numel() / timed_cuda(lambda: dev.copy_(big, non_blocking=True)) / 1e9
    results.append({"section": "gpu", "name": "pinned host-to-device memcpy", "GB_per_s": memcpy})
    big = dev = None
    for width in (47, 64, 128, 256):  # 188 B, 256 B, 512 B, 1 KiB rows
        rows = (1 << 30) // (width * 4)
        table = torch.randn(rows, width)
        store = PinnedFeatures(table, device="cuda")
        cpu_store = PinnedFeatures(store.host, device="cpu")
        ids = torch.randint(0, rows, (rows // 10,)).cuda()
        ids_cpu = ids.cpu()
        assert torch.equal(store.gather(ids).cpu(), table[ids_cpu])
        zc = timed_cuda(lambda: store.gather(ids))
        cg = timed_cuda(lambda: cpu_store.gather(ids_cpu).to("cuda", non_blocking=True))
        gbs = ids.numel() * width * 4 / zc / 1e9
        results.append(
            {
                "section": "gpu",
                "name": f"zero-copy gather, {width * 4} B rows",
                "GB_per_s": gbs,
                "fraction_of_memcpy": gbs / memcpy,
                "vs_cpu_gather_plus_copy": cg / zc,
            }
        )
        store.close()
        table = store = cpu_store = None


def print_results(results: list, rates: list) -> None:
    by_name = {}
    section = None
    for r in results:
        if r["section"] != section:
            section = r["section"]
            print(f"\n{section}")
            last = "vs CPU gather+copy" if section == "gpu" else "hit"
            print(f"  {'':58} {'rows/s':>12} {'GB/s':>7} {'ratio':>7} {last:>6}")
        by_name[(section, r["name"])] = r
        ratio = hit = ""
        if "vs" in r:
            r["speedup"] = by_name[(section, r["vs"])]["seconds"] / r["seconds"]
            ratio = f"{r['speedup']:.2f}x"
        elif "fraction_of_memcpy" in r:
            # ratio: of pinned memcpy bandwidth; last column: speedup over CPU gather + copy
            ratio = f"{r['fraction_of_memcpy']:.0%}"
            hit = f"{r['vs_cpu_gather_plus_copy']:.2f}x"
        if "hit_rate" in r:
            hit = f"{r['hit_rate']:.0%}"
        rows_s = f"{r['rows_per_s']:,.0f}" if "rows_per_s" in r else ""
        print(f"  {r['name']:58} {rows_s:>12} {r['GB_per_s']:7.2f} {ratio:>7} {hit:>6}")
    print("\ncache hit rates, cache = 10% of rows")
    print(f"  {'trace':98} {'static':>7} {'lru':>7} {'clock':>7} {'hybrid':>7} {'belady':>7}")
    for e in rates:
        print(f"  {e['trace']:98} " + " ".join(f"{e[k]:7.3f}" for k in ("static", "lru", "clock", "hybrid", "belady")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="table size in MiB (default 256)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="folder for the temporary feature files (default: a temp dir)")
    parser.add_argument("--gpu-only", action="store_true", help="only the zero-copy GPU section")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    numba.set_num_threads(min(THREADS, numba.config.NUMBA_NUM_THREADS))
    results: list = []
    rates: list = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        for dim in () if args.gpu_only else (128, 256):
            bench_width(dim, args.mib, args.reps, folder, results)
        if not args.gpu_only:
            rates = bench_hit_rates(results, folder)
    bench_gpu(results, args.reps)
    print_results(results, rates)
    OUT.mkdir(exist_ok=True)
    report = {
        "threads": THREADS,
        "mib": args.mib,
        "reps": args.reps,
        "torch": torch.__version__,
        "numba": numba.__version__,
        "results": results,
        "hit_rates": rates,
    }
    (OUT / "feature_gather.json").write_text(json.dumps(report, indent=1))
    print(f"\nwrote {OUT / 'feature_gather.json'}")


if __name__ == "__main__":
    main()
