"""Neighbor sampling throughput: sparsetrain vs PyG (torch-sparse) vs DGL, and batch ordering.

    python benchmarks/sampling.py                      # Cora + the products-scale graph at benchmarks/out/products
    python benchmarks/sampling.py --small              # a 200K-node synthetic graph instead (made if missing)

Fanouts [15, 10, 5] from the seeds outwards, batches of 1024 random seeds (the
same batches for every library: a NumPy permutation of the training split; on
Cora, of all nodes). Every library runs on this machine's cores in the same run:
sparsetrain and PyG here (PyG's ``torch_sparse.neighbor_sample``, the sampler
behind PyG's NeighborLoader without pyg-lib, single-threaded per call, so it is
also run with 2 batches side by side on 2 threads, like 2 loader workers; the
better counts), DGL's ``dgl.dataloading.NeighborSampler`` in the DGL environment
(a subprocess of this run, ``--peer dgl``, on 2 and on 1 OpenMP threads; the
better counts). Rounds alternate: sparsetrain/PyG, then DGL, then
sparsetrain/PyG again; each library's median round is reported.

Edges counted are each library's own sampled edges: sparsetrain and DGL build
message-flow graphs (every hop samples for all of its dst nodes), PyG samples
only for nodes new at each hop, so it draws fewer edges per seed.
Writes benchmarks/out/sampling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from dgl_peer import add_peer_flag, peer_threads, run_in_dgl_env
from peers import pyg_sampler_missing, say_missing

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def seed_batches(pool: np.ndarray, batch_size: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """``count`` batches of distinct random seeds from ``pool`` (identical in every environment)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        perm = pool[rng.permutation(len(pool))]
        out.extend(
            torch.from_numpy(perm[i : i + batch_size].astype(np.int64))
            for i in range(0, len(perm) - batch_size + 1, batch_size)
        )
    return out[:count]


def timed_rounds(run_all, batches, rounds: int, warmup: int = 2) -> list[dict]:
    """Each round samples every batch once (``run_all(batches)`` returns the edge count): seeds/s and sampled
    edges/s."""
    run_all(batches[:warmup])
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        edges = run_all(batches)
        elapsed = time.perf_counter() - start
        results.append(
            {"seconds": elapsed, "seeds_per_s": sum(len(b) for b in batches) / elapsed, "edges_per_s": edges / elapsed}
        )
    return results


def median(rounds: list[dict]) -> dict:
    key = statistics.median_low([r["seeds_per_s"] for r in rounds])
    return next(r for r in rounds if r["seeds_per_s"] == key)


# ---------------- libraries ----------------
def ours_runner(graph, fanouts):
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    sampler = NeighborSampler(graph, fanouts, seed=0)
    return lambda batches: sum(sampler.sample(SamplerInput(seeds)).num_sampled_edges for seeds in batches)


def pyg_runner(graph, fanouts, threads: int):
    import torch_sparse  # noqa: F401  (registers torch.ops.torch_sparse)

    colptr = graph.indptr.contiguous()
    row = graph.indices.to(torch.int64)  # torch-sparse wants int64 indices

    def one(seeds):
        node, row_, col, edge = torch.ops.torch_sparse.neighbor_sample(colptr, row, seeds, fanouts, False, True)
        return row_.numel()

    if threads == 1:
        return lambda batches: sum(map(one, batches))
    pool = ThreadPoolExecutor(threads)  # like DataLoader workers: whole batches side by side (the op releases the GIL)
    return lambda batches: sum(pool.map(one, batches))


def dgl_rounds(dataset: str, args, pool_name: str, threads: int) -> dict:
    """Run the DGL peer in the DGL environment on ``threads`` OpenMP threads; returns its JSON."""
    return run_in_dgl_env(
        __file__,
        [
            "--dataset", dataset, "--pool", pool_name, "--batches", args.batches, "--rounds", args.rounds,
            "--batch-size", args.batch_size, "--fanouts", *args.fanouts,
        ],
        threads,
    )


def dgl_peer(args) -> None:
    """``--peer dgl``: time DGL's NeighborSampler on the dataset (runs in the DGL environment)."""
    import dgl

    from sparsetrain.datasets import load

    torch.set_num_threads(peer_threads())
    ds = load(args.dataset)
    indptr, indices = ds.graph.indptr.to(torch.int64), ds.graph.indices.to(torch.int64)
    g = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int64))), num_nodes=ds.num_nodes)
    sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanouts)))  # DGL lists fanouts outermost first

    def run(batches):
        return sum(sum(b.num_edges() for b in sampler.sample_blocks(g, seeds)[2]) for seeds in batches)

    batches = seed_batches(pool_of(ds, args.pool), args.batch_size, args.batches)
    rounds = timed_rounds(run, batches, args.rounds)
    print(json.dumps({"rounds": rounds, "dgl": dgl.__version__, "torch": torch.__version__}))


# ---------------- datasets ----------------
def pool_of(ds, name: str) -> np.ndarray:
    return np.arange(ds.num_nodes) if name == "all" else ds.split[name].numpy()


def cora_dataset() -> Path:
    """Cora as a sparsetrain dataset under benchmarks/out (made once from the Planetoid files shipped in the
    package)."""
    from sparsetrain.datasets import from_pyg
    from sparsetrain.datasets.builtin import planetoid_data

    folder = OUT / "cora"
    if not (folder / "meta.json").is_file():
        from_pyg(planetoid_data("cora"), folder, overwrite=True, quiet=True)
    return folder


def synthetic_dataset(path: Path, num_nodes: int, num_edges: int) -> Path:
    from sparsetrain.datasets import synthesize

    if not (path / "meta.json").is_file():
        print(f"making {path} ({num_nodes:,} nodes, {num_edges:,} edges)...", flush=True)
        synthesize(path, num_nodes, num_edges, feature_dim=100, num_classes=47, seed=0, overwrite=True, quiet=True)
    return path


# ---------------- the comparison ----------------
def compare(name: str, dataset: Path, pool_name: str, args) -> dict:
    from sparsetrain.datasets import load

    ds = load(dataset)
    graph = ds.graph
    batches = seed_batches(pool_of(ds, pool_name), args.batch_size, args.batches)
    runners = {"sparsetrain": ours_runner(graph, args.fanouts)}
    why = pyg_sampler_missing("torch_sparse")
    if why is None:
        runners.update(pyg_1thread=pyg_runner(graph, args.fanouts, 1), pyg_2threads=pyg_runner(graph, args.fanouts, 2))
    else:
        say_missing("PyG (torch-sparse)", why)
    rounds = {lib: [] for lib in runners}
    load_avg = [os.getloadavg()[0]]

    def in_process():
        for lib, runner in runners.items():
            rounds[lib] += timed_rounds(runner, batches, args.rounds)
        load_avg.append(os.getloadavg()[0])

    in_process()
    dgl_result = {}
    for threads in (2, 1):
        dgl_result[f"dgl_{threads}thread{'s' if threads > 1 else ''}"] = (
            dgl_rounds(str(dataset), args, pool_name, threads)
            if not args.skip_dgl
            else {"error": "skipped (--skip-dgl)"}
        )
        load_avg.append(os.getloadavg()[0])
    in_process()
    result = {"graph": name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges, "batches": len(batches),
              "load_average_1min": load_avg, "rounds": rounds, "dgl": dgl_result}
    summary = {lib: median(r) for lib, r in rounds.items()}
    if "pyg_1thread" in summary:
        pyg_best = max(("pyg_1thread", "pyg_2threads"), key=lambda k: summary[k]["seeds_per_s"])
        summary["pyg"] = dict(summary[pyg_best], config=pyg_best)
    dgl_ok = {k: median(v["rounds"]) for k, v in dgl_result.items() if "rounds" in v}
    if dgl_ok:
        dgl_best = max(dgl_ok, key=lambda k: dgl_ok[k]["seeds_per_s"])
        summary["dgl"] = dict(dgl_ok[dgl_best], config=dgl_best)
        result["dgl_configs"] = dgl_ok
    result["median"] = summary
    peers = [p for p in ("pyg", "dgl") if p in summary]
    ours_rate = summary["sparsetrain"]["seeds_per_s"]
    result["speedup_seeds_per_s"] = {p: ours_rate / summary[p]["seeds_per_s"] for p in peers}
    result["speedup_vs_faster_peer"] = ours_rate / max(summary[p]["seeds_per_s"] for p in peers) if peers else None
    return result


def print_table(result: dict) -> None:
    print(
        f"\n{result['graph']}: {result['num_nodes']:,} nodes, {result['num_edges']:,} edges, "
        f"{result['batches']} batches/round, "
        f"load average {', '.join(f'{x:.1f}' for x in result['load_average_1min'])}"
    )
    print(f"{'library':<28}{'seeds/s':>12}{'M edges/s':>12}{'edges/seed':>12}{'ours is':>10}")
    ours = result["median"]["sparsetrain"]["seeds_per_s"]
    for lib, r in result["median"].items():
        if lib in ("pyg_1thread", "pyg_2threads"):
            continue
        label = f"{lib} ({r['config']})" if "config" in r else lib
        ratio = "" if lib == "sparsetrain" else f"{ours / r['seeds_per_s']:.2f}x"
        print(
            f"{label:<28}{r['seeds_per_s']:>12,.0f}{r['edges_per_s'] / 1e6:>12.1f}"
            f"{r['edges_per_s'] / r['seeds_per_s']:>12.0f}{ratio:>10}"
        )
    for config, r in result["dgl"].items():
        if "error" in r:
            print(f"{config}: {r['error']}")
    if result["speedup_vs_faster_peer"] is not None:
        print(f"speedup vs the faster peer (seeds/s): {result['speedup_vs_faster_peer']:.2f}x")


def gpu_compare(name: str, dataset: Path, pool_name: str, args) -> dict:
    """``--gpu``: sampled edges/s of the CUDA kernels, graph in device memory and pinned in host memory."""
    from sparsetrain.datasets import load
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    ds = load(dataset)
    batches = [b.cuda() for b in seed_batches(pool_of(ds, pool_name), args.batch_size, args.batches)]
    out = {"graph": name, "device": torch.cuda.get_device_name()}
    # the same run's reference: the CPU kernels on this host's cores
    cpu = NeighborSampler(ds.graph, args.fanouts, seed=0)
    cpu_batches = [b.cpu() for b in batches]
    out["cpu"] = median(
        timed_rounds(
            lambda bs: sum(cpu.sample(SamplerInput(seeds)).num_sampled_edges for seeds in bs), cpu_batches, args.rounds
        )
    )
    print(
        f"CPU {name} ({os.cpu_count()} cores): {out['cpu']['seeds_per_s']:,.0f} seeds/s, "
        f"{out['cpu']['edges_per_s'] / 1e6:.1f} M edges/s"
    )
    for where, graph in (("device", ds.graph.to("cuda")), ("pinned", ds.graph.pin_memory())):
        sampler = NeighborSampler(graph, args.fanouts, seed=0)

        def run(bs):
            edges = sum(sampler.sample(SamplerInput(seeds)).num_sampled_edges for seeds in bs)
            torch.cuda.synchronize()
            return edges

        out[where] = median(timed_rounds(run, batches, args.rounds))
        print(
            f"GPU {name} graph {where}: {out[where]['seeds_per_s']:,.0f} seeds/s, "
            f"{out[where]['edges_per_s'] / 1e6:.1f} M edges/s, "
            f"{out[where]['seeds_per_s'] / out['cpu']['seeds_per_s']:.2f}x the CPU sampler"
        )
    return out


# ---------------- batch ordering ----------------
def ordering(name: str, dataset: Path, pool_name: str, batch_size: int, max_batches: int, window: int, fanouts) -> dict:
    """Rows re-fetched per epoch in random order vs Match-Reorder (fresh draws in both orders)."""
    from sparsetrain.datasets import load
    from sparsetrain.sampling import MatchReorder, NeighborSampler, SamplerInput, SeedBatches, reuse_stats

    ds = load(dataset)
    sampler = NeighborSampler(ds.graph, fanouts, seed=1)
    pool = torch.from_numpy(pool_of(ds, pool_name))
    reorder = MatchReorder(window)
    random_order = SeedBatches(pool, batch_size, seed=0, drop_last=True).batches(0)[:max_batches]
    start = time.perf_counter()
    reordered = reorder(random_order, sampler)
    seconds = time.perf_counter() - start
    fresh = {
        "random": reuse_stats([sampler.sample(SamplerInput(b)).input_nodes for b in random_order], ds.num_nodes),
        "reordered": reuse_stats([sampler.sample(SamplerInput(b)).input_nodes for b in reordered], ds.num_nodes),
    }
    out = {
        "graph": name,
        "batches": len(random_order),
        "batch_size": batch_size,
        "window": window,
        "reorder_seconds": seconds,
        "presampled": {"random": vars(reorder.before), "reordered": vars(reorder.after)},
        "fresh_draws": {k: vars(v) for k, v in fresh.items()},
    }
    for key, stats in (
        ("presampled", (reorder.before, reorder.after)),
        ("fresh_draws", (fresh["random"], fresh["reordered"])),
    ):
        before, after = stats
        out[key]["fraction_reused"] = {"random": before.fraction_reused, "reordered": after.fraction_reused}
        out[key]["rows_fetched_reduction"] = 1 - after.rows_fetched / before.rows_fetched
    return out


def print_ordering(o: dict) -> None:
    p, f = o["presampled"], o["fresh_draws"]
    print(
        f"\nordering {o['graph']}: {o['batches']} batches of {o['batch_size']}, window {o['window']}, "
        f"reorder took {o['reorder_seconds']:.1f} s"
    )
    print(
        f"  rows not re-fetched: random {p['fraction_reused']['random']:.1%} -> reordered "
        f"{p['fraction_reused']['reordered']:.1%} "
        f"(rows fetched -{p['rows_fetched_reduction']:.1%}); with fresh draws: {f['fraction_reused']['random']:.1%} -> "
        f"{f['fraction_reused']['reordered']:.1%} (-{f['rows_fetched_reduction']:.1%})"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--products",
        default=str(HERE / "out" / "products"),
        help="products-scale dataset folder (made with sparsetrain.datasets.synthesize if missing)",
    )
    parser.add_argument(
        "--small", action="store_true", help="use a 200K-node / 10M-edge synthetic graph instead of products scale"
    )
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=20, help="batches per timed round")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds per library per phase (two phases around the DGL run)"
    )
    parser.add_argument("--skip-dgl", action="store_true")
    parser.add_argument("--skip-ordering", action="store_true")
    parser.add_argument("--skip-compare", action="store_true", help="only the batch-ordering measurement")
    parser.add_argument(
        "--gpu", action="store_true", help="also time the CUDA kernels (graph in device memory and pinned)"
    )
    parser.add_argument("--windows", type=int, nargs="+", default=[16, 63], help="Match-Reorder windows to measure")
    parser.add_argument("--ordering-batches", type=int, default=128, help="batches of the synthetic epoch to order")
    add_peer_flag(parser)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--pool", default="train", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer == "dgl":
        return dgl_peer(args)

    OUT.mkdir(exist_ok=True)
    torch.set_num_threads(2)
    big = (
        synthetic_dataset(HERE / "out" / "sampling-small", 200_000, 10_000_000)
        if args.small
        else synthetic_dataset(Path(args.products), 2_400_000, 120_000_000)
    )
    graphs = [
        ("cora", cora_dataset(), "all"),
        ("small synthetic" if args.small else "products-scale synthetic", big, "train"),
    ]
    report = {
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "results": [],
        "ordering": [],
    }
    for name, path, pool in graphs if not args.skip_compare else []:
        result = compare(name, path, pool, args)
        print_table(result)
        report["results"].append(result)
    if args.gpu:
        report["gpu"] = (
            [gpu_compare(name, path, pool, args) for name, path, pool in graphs]
            if torch.cuda.is_available()
            else "no CUDA device"
        )
    if not args.skip_ordering:
        for name, path, pool, size, count in (
            ("cora", graphs[0][1], "all", 64, 10_000),
            (graphs[1][0], big, "train", args.batch_size, args.ordering_batches),
        ):
            for window in args.windows:
                o = ordering(name, path, pool, size, count, window, args.fanouts)
                print_ordering(o)
                report["ordering"].append(o)
    out = OUT / ("sampling_ordering.json" if args.skip_compare else "sampling.json")
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
