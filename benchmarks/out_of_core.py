"""Training from disk: features larger than memory, behind caches of 2, 4 and 8 GiB, against the peers in the same run.

    sparsetrain synth --preset papers100m --out /tmp/papers100m                 # 28 GiB of features, ~12 min
    python benchmarks/out_of_core.py --data /tmp/papers100m                      # the issue's run
    python benchmarks/out_of_core.py --data /tmp/small --caches 0.05,0.1 --batches 5 --warmup 2

Every row trains GraphSAGE [15,10,5] (batch 1024, hidden 128, Adam) with the overlapped ``Loader`` for
``--warmup`` batches, then times ``--batches`` more (the plain mmap peer: 1 and ``--mmap-batches``); each row runs in
its own process (its peak RSS is its own), and the feature file's pages are dropped from the page cache
(``posix_fadvise(DONTNEED)``) before each.

- ``mmap peer``: what a PyG user writes, ``torch.from_numpy(np.load(p, mmap_mode="r")[ids])``;
- ``mmap peer, MADV_RANDOM``: the same with the kernel's readahead turned off for the mapping (what a careful user
  adds: each page fault then reads one page, not a readahead window);
- ``disk + cache N GiB``: ``CachedFeatures(ds.feature_store(mode="direct"), N GiB, --policy)``;
- ``in-RAM reference``: features from an in-memory table of 1/8 of the rows, ids modulo its size (the same gather
  volume and compute, no disk).

Peak RSS is ``ru_maxrss``, split into its anonymous part (allocations: cache, bookkeeping, batches, model) and its
file-backed part (mapped pages of the graph and, for the peer, of the features). Disk bytes per batch come from
``/proc/self/io`` (``read_bytes``: what the process made the storage layer read, page faults and O_DIRECT alike).
``--trace-batches`` adds the hit-rate table: every policy and Belady's optimum on a trace of sampled input nodes of this
graph, cache sizes as above, counted over the trace's second half. Writes benchmarks/out/out_of_core.json.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sparsetrain.storage import FeatureSource, TensorFeatures  # noqa: E402
from sparsetrain.storage.base import torch_dtype_of  # noqa: E402

GIB = 2**30


class NumpyMmapPeer(FeatureSource):
    """The plain peer: ``torch.from_numpy(np.load(p, mmap_mode="r")[ids])``; with ``random_access``, the careful user's
    version, which also turns the kernel's readahead off for the mapping (``madvise(MADV_RANDOM)``)."""

    def __init__(self, path: Path, random_access: bool = False) -> None:
        self.array = np.load(path, mmap_mode="r")
        if random_access:
            self.array._mmap.madvise(mmap.MADV_RANDOM)
        super().__init__(self.array.shape, torch_dtype_of(self.array.dtype), "cpu")

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(torch.from_numpy(self.array[ids.numpy()]))


class ModuloTable(FeatureSource):
    """The in-RAM reference: rows of an in-memory table of 1/8 the rows, ids taken modulo its size."""

    def __init__(self, path: Path) -> None:
        full = np.load(path, mmap_mode="r")
        self.inner = TensorFeatures(torch.from_numpy(np.array(full[: max(1, full.shape[0] // 8)])))
        super().__init__(full.shape, self.inner.dtype, "cpu")

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        self.inner.gather(ids % self.inner.num_rows, out=out)


def drop_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


class PeakMemory:
    """Peak ``RssAnon`` (what the process allocated) and ``RssFile`` (mapped file pages: the graph's arrays, the mmap
    peer's features; page cache the kernel may take back) sampled every 50 ms on a thread."""

    def __init__(self) -> None:
        self.peak = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        for line in Path("/proc/self/status").read_text().splitlines():
            key = line.split(":")[0]
            if key in self.peak:
                self.peak[key] = max(self.peak[key], int(line.split()[1]) * 1024)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sample()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self.sample()
        return {f"peak_{k}_gib": v / GIB for k, v in self.peak.items()}


def one_row(args: argparse.Namespace) -> dict:
    """Train ``--warmup`` + ``--batches`` batches with the features of ``args.row``; runs in a child process."""
    import sparsetrain as st
    from sparsetrain.engine.run import _cache_hotness
    from sparsetrain.nn.models import build_model

    torch.set_num_threads(args.threads)
    memory = PeakMemory()
    ds = st.datasets.load(args.data)
    path = ds.path / "features.npy"
    started = time.perf_counter()
    if args.row in ("mmap", "mmap-random"):
        features = NumpyMmapPeer(path, random_access=args.row == "mmap-random")
    elif args.row == "ram":
        features = ModuloTable(path)
    else:
        hotness = _cache_hotness(ds.graph) if args.policy in ("static", "hybrid") else None
        features = st.CachedFeatures(
            ds.feature_store(mode="direct"), int(float(args.row) * GIB), policy=args.policy, hotness=hotness
        )
    setup_seconds = time.perf_counter() - started
    sampler = st.NeighborSampler(ds.graph, args.fanout, seed=0)
    # no batch timeout: with a file larger than the page cache, the plain peer takes minutes a batch
    loader = st.Loader(
        sampler, features, ds.labels, ds.split["train"], batch_size=args.batch_size, seed=0, timeout=None
    )
    warmup, batches = (1, args.mmap_batches) if args.row == "mmap" else (args.warmup, args.batches)
    model = build_model("sage", ds.num_features, args.hidden, ds.num_classes, len(args.fanout), 0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    times, rows = [], []
    io_start = t0 = None
    for i, mb in enumerate(loader.epoch(0)):
        if i == warmup:
            io_start, t0 = read_bytes(), time.perf_counter()
            stats_start = (features.stats.hits, features.stats.misses)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(mb.x.float(), mb.to_pyg()), mb.y)
        loss.backward()
        optimizer.step()
        if i >= warmup:
            times.append(time.perf_counter())
            rows.append(len(mb.input_nodes))
        if i + 1 == warmup + batches:
            break
    seconds = times[-1] - t0
    n = len(times)
    looked_up = features.stats.hits + features.stats.misses - sum(stats_start)
    return {
        "row": args.row,
        "ms_per_batch": 1e3 * seconds / n,
        "batches": n,
        "input_rows_per_batch": float(np.mean(rows)),
        "disk_mb_per_batch": (read_bytes() - io_start) / n / 1e6,
        "hit_rate": (features.stats.hits - stats_start[0]) / looked_up if looked_up else None,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
        **memory.stop(),
        "setup_seconds": setup_seconds,
    }


def hit_rate_table(args: argparse.Namespace) -> list[dict]:
    """Every policy and Belady on a trace of ``--trace-batches`` sampled batches (input nodes) of this graph."""
    import sparsetrain as st
    from sparsetrain.engine.run import _cache_hotness
    from sparsetrain.sampling import SamplerInput
    from sparsetrain.storage.belady import belady_hit_rate
    from sparsetrain.storage.policies import POLICIES, make_policy, replay

    ds = st.datasets.load(args.data)
    row_bytes = ds.features.row_bytes
    sampler = st.NeighborSampler(ds.graph, args.fanout, seed=0)
    seeds = ds.split["train"][torch.randperm(len(ds.split["train"]), generator=torch.Generator().manual_seed(0))]
    trace = [sampler.sample(SamplerInput(part, key=i)).input_nodes.numpy() for i, part in
             enumerate(torch.split(seeds, args.batch_size)[: args.trace_batches])]
    hotness = _cache_hotness(ds.graph)
    table = []
    for gib in args.caches:
        slots = min(ds.num_nodes, int(gib * GIB) // row_bytes)
        warmup = len(trace) // 2  # counted: the second half, once the empty caches (and Belady's) have filled
        rates = {name: replay(make_policy(name, ds.num_nodes, slots, hotness), trace, warmup) for name in POLICIES}
        rates["belady"] = belady_hit_rate(trace, slots, ds.num_nodes, warmup)
        table.append({"cache_gib": gib, "slots": slots, **rates})
        print(f"  cache {gib:g} GiB: " + "  ".join(f"{k} {v:.3f}" for k, v in rates.items()), flush=True)
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--data", type=Path, default=Path(os.environ.get("SPARSETRAIN_OOC_DATA", HERE / "out" / "papers100m"))
    )
    p.add_argument("--caches", default="2,4,8", help="cache sizes in GiB, comma-separated")
    p.add_argument("--policy", default="hybrid")
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--warmup", type=int, default=10, help="batches before timing (cache warm-up)")
    p.add_argument("--batches", type=int, default=20, help="timed batches per row")
    p.add_argument(
        "--mmap-batches",
        type=int,
        default=2,
        help=(
            "timed batches of the plain mmap peer, after 1 warm-up batch (minutes each once the file exceeds "
            "the page cache)"
        ),
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", default="mmap,mmap-random,ram,caches", help="which rows: mmap, mmap-random, ram, caches")
    p.add_argument("--trace-batches", type=int, default=0, help="batches of the hit-rate trace (0: no hit-rate table)")
    p.add_argument("--row", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.fanout = [int(v) for v in args.fanout.split(",")]
    args.caches = [float(v) for v in args.caches.split(",")]
    if args.row is not None:
        print(json.dumps(one_row(args)))
        return
    wanted = args.rows.split(",")
    rows = [r for r in ("mmap", "mmap-random", "ram") if r in wanted] + (
        [f"{g:g}" for g in args.caches] if "caches" in wanted else []
    )
    results = []
    for row in rows:
        drop_page_cache(args.data / "features.npy")
        command = [sys.executable, __file__, *sys.argv[1:], "--row", row]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"row {row} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    by = {r["row"]: r for r in results}
    print(
        f"\n{'features':<26}{'ms/batch':>10}{'vs mmap':>9}{'vs mmap-random':>15}{'vs RAM':>8}{'hit':>7}"
        f"{'disk MB/batch':>15}{'peak RSS GiB':>14}{'anon':>7}{'file':>7}"
    )
    for r in results:
        name = {"mmap": "mmap peer", "mmap-random": "mmap peer, MADV_RANDOM", "ram": "in-RAM reference (1/8)"}.get(
            r["row"], f"disk + cache {r['row']} GiB"
        )
        vs_mmap = by["mmap"]["ms_per_batch"] / r["ms_per_batch"] if "mmap" in by else float("nan")
        vs_random = by["mmap-random"]["ms_per_batch"] / r["ms_per_batch"] if "mmap-random" in by else float("nan")
        vs_ram = r["ms_per_batch"] / by["ram"]["ms_per_batch"] if "ram" in by else float("nan")
        hit = "" if r["hit_rate"] is None else f"{r['hit_rate']:.0%}"
        print(f"{name:<26}{r['ms_per_batch']:>10.0f}{vs_mmap:>8.2f}x{vs_random:>14.2f}x{vs_ram:>7.2f}x{hit:>7}{r['disk_mb_per_batch']:>15.1f}"
              f"{r['peak_rss_gib']:>14.2f}{r['peak_RssAnon_gib']:>7.2f}{r['peak_RssFile_gib']:>7.2f}")
    trace = hit_rate_table(args) if args.trace_batches else []
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "row"}
    (out / "out_of_core.json").write_text(
        json.dumps({"settings": settings, "rows": results, "hit_rates": trace}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
