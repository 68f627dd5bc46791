"""PyG's NeighborLoader (torch-sparse) vs ``sparsetrain.pyg.NeighborLoader`` on the same ``Data``: loader and training
step.

    python benchmarks/pyg_loader.py                          # products scale: 2.4M nodes, 62M edges (made once)
    python benchmarks/pyg_loader.py --nodes 200000 --edges 10000000 --batches 10

The graph is a synthetic products-scale dataset (``sparsetrain.datasets.synthesize`` into
``--data``, made if missing), turned into one PyG ``Data`` (features in memory, edges in a random
order as a user's edge list would be). Both loaders get the same ``Data``, the same seed batches
(``input_nodes`` = a fixed permutation of the training split, ``shuffle=False``), fanouts
[15, 10, 5], batch 1024. Timed in the same run, rounds alternating:

- loader only: batches/s of iterating each loader (sampling + PyG's ``filter_data``: x, y, n_id, e_id);
  PyG with ``num_workers=0`` and ``2`` (its sampler is single-threaded per batch; the better counts),
  sparsetrain with ``num_workers=0`` (its sampler uses Numba's threads);
- training step: ms per step (next batch + forward + backward + Adam) of PyG's
  ``torch_geometric.nn.models.GraphSAGE`` (3 layers, hidden 256): with ``trim_to_layer`` on
  sparsetrain's batches; plain on PyG's, whose torch-sparse batches carry no per-hop counts
  (``trim_to_layer`` needs pyg-lib, which has no wheel for this torch).
Writes benchmarks/out/pyg_loader.json.

    python benchmarks/pyg_loader.py --workers 0 2 4 --nodes 1000000 --edges 25000000 --batches 8

measures ``num_workers`` instead: seeds/s of one pass over ``--batches`` batches (from ``iter()``, so worker
start-up counts) and the seconds to the first batch, for PyG's loader (torch-sparse, forked workers) and
``sparsetrain.pyg.NeighborLoader`` (sampling threads), rounds alternating; then the same in a subprocess on
Numba's fork-safe ``workqueue`` threading layer, where sparsetrain's workers are forked processes (each with
PyG's loader as its peer again). Writes benchmarks/out/pyg_loader_workers.json.

    python benchmarks/pyg_loader.py --temporal --nodes 300000 --edges 6000000 --fanouts 10 5 --batches 10

measures PyG's temporal and disjoint sampling instead (random node times in [0, 1000), each seed at its own
time; disjoint: one subgraph per seed, no time). PyG's own ``NeighborSampler`` samples neither without pyg-lib
(which has no wheel for this torch), so the peer is torch-sparse's ``hetero_temporal_neighbor_sample`` (what PyG
ran for temporal sampling before pyg-lib: node time, one subgraph per seed; the graph as its one-type case; all
times 0 for disjoint), called directly on 1 thread and on 2 threads side by side (the better counts). It draws
with rejection (a drawn neighbor later than the seed is dropped), so it may return fewer edges than the fanout
allows; sampled edges/s is reported with seeds/s. sparsetrain: ``sparsetrain.pyg.PyGNeighborSampler(time_attr=)`` /
``(disjoint=True)``'s ``sample_from_nodes`` (PyG's ``SamplerOutput``, with ``batch``), rounds alternating.
Writes benchmarks/out/pyg_loader_temporal.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from peers import pyg_sampler_missing, say_missing

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def make_data(folder: Path, num_nodes: int, num_edges: int, seed: int):
    """The dataset at ``folder`` (synthesized if missing) as a PyG ``Data`` with shuffled edges, and its training
    split."""
    from torch_geometric.data import Data

    from sparsetrain.datasets import load, synthesize

    if not (folder / "meta.json").is_file():
        print(f"making {folder} ({num_nodes:,} nodes, {num_edges:,} edges)...", flush=True)
        synthesize(folder, num_nodes, num_edges, feature_dim=100, num_classes=47, seed=seed, overwrite=True, quiet=True)
    ds = load(folder)
    edge_index = ds.graph.to_edge_index()
    edge_index = edge_index[:, torch.from_numpy(np.random.default_rng(seed).permutation(edge_index.shape[1]))]
    # x stays on the mapped file (page cache, not process memory): the same table for both loaders, 2 GB less to hold
    data = Data(x=ds.features.tensor(), y=ds.labels.clone(), edge_index=edge_index.contiguous(), num_nodes=ds.num_nodes)
    return data, ds.split["train"], ds.num_classes


def loaders(data, seeds, args, workers: int, peer: bool = True):
    """PyG's loader (None without ``peer``) and sparsetrain's over the same seed batches."""
    from torch_geometric.loader import NeighborLoader as PygLoader

    from sparsetrain.pyg import NeighborLoader

    common = dict(num_neighbors=args.fanouts, input_nodes=seeds, batch_size=args.batch_size, shuffle=False)
    pyg = None
    if peer:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG: sampling without pyg-lib is deprecated
            pyg = PygLoader(data, **common, num_workers=workers)
    return pyg, NeighborLoader(data, **common, seed=0)


def time_loader(loader, count: int) -> float:
    """Batches per second over ``count`` batches (after the iterator's start)."""
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    for _ in itertools.islice(it, count):
        pass
    return count / (time.perf_counter() - start)


def time_steps(loader, model, count: int, trim: bool) -> float:
    """Median ms per training step (next batch + forward + backward + update) over ``count`` steps after one warm-up."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    model.train()
    times = []
    it = iter(loader)
    for _ in range(count + 1):
        start = time.perf_counter()
        batch = next(it)
        kw = (
            dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes, num_sampled_edges_per_hop=batch.num_sampled_edges)
            if trim
            else {}
        )
        out = model(batch.x, batch.edge_index, **kw)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[1:])


def time_pass(loader, count: int) -> tuple[float, float]:
    """(seconds to the first batch, seconds for ``count`` batches), both from ``iter()``."""
    start = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - start
    for _ in itertools.islice(it, count - 1):
        pass
    return first, time.perf_counter() - start


def worker_loaders(data, seeds, args) -> dict:
    """``{(library, num_workers): loader}``: PyG's and sparsetrain's (threads, or forked on a fork-safe Numba layer)."""
    import numba
    from torch_geometric.loader import NeighborLoader as PygLoader
    from torch_geometric.sampler import NeighborSampler as PygSampler

    from sparsetrain.pyg import NeighborLoader, PyGNeighborSampler

    forked = args.fork_child is not None
    common = dict(num_neighbors=args.fanouts, input_nodes=seeds, batch_size=args.batch_size, shuffle=False)
    peer = getattr(args, "pyg_missing", None) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sampling without pyg-lib is deprecated
        # one CSC per library, shared by its loaders
        samplers = {"pyg": PygSampler(data, args.fanouts) if peer else None,
                    "ours": PyGNeighborSampler(data, args.fanouts, seed=0)}

    out = {}
    for w in args.workers:
        def share_numba_threads(_worker: int, w=w) -> None:  # as the sampling threads: an equal share of the cores
            numba.set_num_threads(max(1, numba.config.NUMBA_NUM_THREADS // w))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # more workers than cores
            if peer:
                out["pyg", w] = PygLoader(data, **common, num_workers=w, neighbor_sampler=samplers["pyg"])
            extra = dict(multiprocessing_context="fork", worker_init_fn=share_numba_threads) if forked and w else {}
            out["sparsetrain_forked" if forked else "sparsetrain_threads", w] = NeighborLoader(
                data, **common, num_workers=w, neighbor_sampler=samplers["ours"], **extra)
    return out


def worker_rounds(data, seeds, args) -> dict:
    """Seeds/s and first-batch seconds of each loader of :func:`worker_loaders`, median over rounds (alternating)."""
    import numba

    loaders = worker_loaders(data, seeds, args)
    passes = {f"{lib}_{w}": [] for lib, w in loaders}
    for r in range(args.rounds):
        for (lib, w), loader in loaders.items():
            first, total = time_pass(loader, args.batches)
            passes[f"{lib}_{w}"].append({"first_batch_s": first, "seeds_per_s": args.batches * args.batch_size / total})
            print(f"round {r}: {lib} num_workers={w}: {passes[f'{lib}_{w}'][-1]['seeds_per_s']:,.0f} seeds/s, "
                  f"first batch {first:.2f} s", flush=True)
    median = {name: {k: statistics.median(p[k] for p in runs) for k in ("first_batch_s", "seeds_per_s")}
              for name, runs in passes.items()}
    return {"numba_threading_layer": numba.threading_layer(), "median": median, "rounds": passes}


def workers_main(args) -> None:
    """``--workers``: this process's rounds, then (unless it is that subprocess) the workqueue-layer subprocess's."""
    data, train, _ = make_data(Path(args.data), args.nodes, args.edges, args.seed)
    order = np.random.default_rng(args.seed).permutation(len(train))
    seeds = train[torch.from_numpy(order[: args.batch_size * args.batches])]
    result = worker_rounds(data, seeds, args)
    if args.fork_child is not None:
        Path(args.fork_child).write_text(json.dumps(result))
        return
    OUT.mkdir(exist_ok=True)
    child_out = OUT / "pyg_loader_workers_forked.json"
    cmd = [sys.executable, __file__, *sys.argv[1:], "--fork-child", str(child_out)]
    done = subprocess.run(cmd, env=dict(os.environ, NUMBA_THREADING_LAYER="workqueue"))
    runs = {"threads": result, "forked_workqueue": json.loads(child_out.read_text()) if done.returncode == 0 else
            {"error": f"exit {done.returncode}"}}
    print("\n| run (Numba layer) | loader | num_workers | seeds/s | vs PyG best of the run | first batch s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for run, res in runs.items():
        if "median" not in res:
            print(f"| {run} | failed: {res['error']} | | | | |")
            continue
        pyg_best = max((v["seeds_per_s"] for k, v in res["median"].items() if k.startswith("pyg_")), default=None)
        for name, v in res["median"].items():
            lib, w = name.rsplit("_", 1)
            ratio = "n/a" if pyg_best is None else f"{v['seeds_per_s'] / pyg_best:.2f}x"
            print(f"| {run} ({res['numba_threading_layer']}) | {lib} | {w} | {v['seeds_per_s']:,.0f} | "
                  f"{ratio} | {v['first_batch_s']:.2f} |")
    runs["graph"] = {"nodes": data.num_nodes, "edges": data.num_edges, "fanouts": args.fanouts,
                     "batch_size": args.batch_size, "batches": args.batches, "rounds": args.rounds,
                     "cores": os.cpu_count()}
    (OUT / "pyg_loader_workers.json").write_text(json.dumps(runs, indent=2))
    print(f"\nwrote {OUT / 'pyg_loader_workers.json'}")


def temporal_peer(data, fanouts, node_time: torch.Tensor, threads: int):
    """torch-sparse's temporal sampler over ``data`` as a one-type graph: a function of the seed batches -> edges."""
    from concurrent.futures import ThreadPoolExecutor

    import torch_sparse  # noqa: F401  (registers torch.ops.torch_sparse)

    from sparsetrain.sampling import CSCGraph

    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
    rel = "n__to__n"
    colptr, row = {rel: graph.indptr}, {rel: graph.indices.to(torch.int64)}

    def one(seeds: torch.Tensor) -> int:
        out = torch.ops.torch_sparse.hetero_temporal_neighbor_sample(
            ["n"], [("n", "to", "n")], colptr, row, {"n": seeds}, {rel: fanouts}, {"n": node_time}, len(fanouts),
            False, True)
        return int(out[1][rel].numel())

    if threads == 1:
        return lambda batches: sum(one(b) for b in batches)
    pool = ThreadPoolExecutor(threads)  # whole batches side by side, like loader workers (the op releases the GIL)
    return lambda batches: sum(pool.map(one, batches))


def temporal_main(args) -> None:
    """``--temporal``: temporal and disjoint sampling, sparsetrain vs torch-sparse (see the module docstring)."""
    from torch_geometric.sampler import NodeSamplerInput

    from sparsetrain.pyg import PyGNeighborSampler

    data, train, _ = make_data(Path(args.data), args.nodes, args.edges, args.seed)
    rng = np.random.default_rng(args.seed)
    data.time = torch.from_numpy(rng.integers(0, 1000, data.num_nodes))
    order = torch.from_numpy(rng.permutation(len(train))[: args.batch_size * args.batches])
    batches = list(train[order].split(args.batch_size))
    results = {}
    for mode, options, node_time in (("temporal", {"time_attr": "time"}, data.time),
                                     ("disjoint", {"disjoint": True}, torch.zeros(data.num_nodes, dtype=torch.int64))):
        ours = PyGNeighborSampler(data, args.fanouts, seed=0, **options)

        def run_ours(batches, ours=ours) -> int:
            return sum(ours.sample_from_nodes(NodeSamplerInput(None, b)).row.numel() for b in batches)

        runners = {"sparsetrain": run_ours, "torch_sparse_1thread": temporal_peer(data, args.fanouts, node_time, 1),
                   "torch_sparse_2threads": temporal_peer(data, args.fanouts, node_time, 2)}
        for run in runners.values():  # warm-up: compile, first touches
            run(batches[:1])
        rounds = {name: [] for name in runners}
        for r in range(args.rounds):
            for name, run in runners.items():
                start = time.perf_counter()
                edges = run(batches)
                seconds = time.perf_counter() - start
                seeds_per_s = len(batches) * args.batch_size / seconds
                rounds[name].append({"seeds_per_s": seeds_per_s, "edges_per_s": edges / seconds})
                print(f"{mode} round {r}: {name} {rounds[name][-1]['seeds_per_s']:,.0f} seeds/s, "
                      f"{rounds[name][-1]['edges_per_s']:,.0f} edges/s", flush=True)
        median = {name: {k: statistics.median(x[k] for x in v) for k in ("seeds_per_s", "edges_per_s")}
                  for name, v in rounds.items()}
        peer = max(median["torch_sparse_1thread"]["seeds_per_s"], median["torch_sparse_2threads"]["seeds_per_s"])
        results[mode] = {"median": median, "rounds": rounds,
                         "seeds_ratio_vs_torch_sparse": median["sparsetrain"]["seeds_per_s"] / peer}
    print("\n| mode | sampler | seeds/s | sampled edges/s | sparsetrain / best torch-sparse (seeds/s) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for mode, res in results.items():
        for name, v in res["median"].items():
            ratio = f"{res['seeds_ratio_vs_torch_sparse']:.2f}x" if name == "sparsetrain" else ""
            print(f"| {mode} | {name} | {v['seeds_per_s']:,.0f} | {v['edges_per_s']:,.0f} | {ratio} |")
    results["graph"] = {"nodes": data.num_nodes, "edges": data.num_edges, "fanouts": args.fanouts,
                        "batch_size": args.batch_size, "batches": args.batches, "rounds": args.rounds,
                        "cores": os.cpu_count()}
    OUT.mkdir(exist_ok=True)
    (OUT / "pyg_loader_temporal.json").write_text(json.dumps(results, indent=2))
    print(f"\nwrote {OUT / 'pyg_loader_temporal.json'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument(
        "--data", default=str(OUT / "products-pyg"), help="dataset folder (synthesized there if missing)"
    )
    parser.add_argument("--nodes", type=int, default=2_400_000)
    parser.add_argument(
        "--edges", type=int, default=62_000_000, help="directed edges (even: the synthetic graph is undirected)"
    )
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=20, help="batches per loader round")
    parser.add_argument("--rounds", type=int, default=3, help="loader rounds per library (alternating)")
    parser.add_argument("--steps", type=int, default=8, help="timed training steps per library")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, nargs="+", help="measure these num_workers instead (see the docstring)")
    parser.add_argument("--fork-child", help=argparse.SUPPRESS)  # where the workqueue-layer run of --workers writes
    parser.add_argument("--temporal", action="store_true",
                        help="measure temporal and disjoint sampling instead (see above)")
    args = parser.parse_args()
    if args.temporal and (why := pyg_sampler_missing("torch_sparse")) is not None:
        say_missing("torch-sparse's temporal sampler", why)  # the only peer of this mode, called directly
        print("(--temporal times sparsetrain against it; the default and --workers modes measure sparsetrain alone)")
        return
    if args.workers:
        args.pyg_missing = pyg_sampler_missing()
        if args.pyg_missing is not None:
            say_missing("PyG's NeighborLoader", args.pyg_missing)
        workers_main(args)
        return
    if args.temporal:
        temporal_main(args)
        return
    from torch_geometric.nn.models import GraphSAGE

    start = time.perf_counter()
    data, train, num_classes = make_data(Path(args.data), args.nodes, args.edges, args.seed)
    print(
        (
            f"{data.num_nodes:,} nodes, {data.num_edges:,} edges, x {list(data.x.shape)} "
            f"({time.perf_counter() - start:.0f} s to load)"
        ),
        flush=True,
    )
    need = args.batch_size * (args.batches + 1) * 2
    seeds = train[torch.from_numpy(np.random.default_rng(args.seed).permutation(len(train))[:need])]

    why = pyg_sampler_missing()
    peer = why is None
    if not peer:
        say_missing("PyG's NeighborLoader", why)
    start = time.perf_counter()
    pyg0, ours = loaders(data, seeds, args, workers=0, peer=peer)
    pyg2 = loaders(data, seeds, args, workers=2)[0] if peer else None
    print(f"loaders built in {time.perf_counter() - start:.0f} s", flush=True)
    timed = [("sparsetrain", ours)] + ([("pyg_0_workers", pyg0), ("pyg_2_workers", pyg2)] if peer else [])
    rates = {name: [] for name, _ in timed}
    for r in range(args.rounds):
        for name, loader in timed:
            rates[name].append(time_loader(loader, args.batches))
            print(f"round {r}: {name} {rates[name][-1]:.2f} batches/s", flush=True)
    loader_rate = {k: statistics.median(v) for k, v in rates.items()}
    pyg_best = max(loader_rate["pyg_0_workers"], loader_rate["pyg_2_workers"]) if peer else None

    def model():
        torch.manual_seed(args.seed)
        return GraphSAGE(data.num_features, args.hidden, num_layers=len(args.fanouts), out_channels=num_classes)

    step_ms = {"sparsetrain_trim": time_steps(ours, model(), args.steps, trim=True)}
    if peer:
        step_ms.update(pyg_0_workers=time_steps(pyg0, model(), args.steps, trim=False),
                       pyg_2_workers=time_steps(pyg2, model(), args.steps, trim=False))
    pyg_step = min(step_ms["pyg_0_workers"], step_ms["pyg_2_workers"]) if peer else None
    result = {
        "graph": {"nodes": data.num_nodes, "edges": data.num_edges, "feature_dim": data.num_features},
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "batches_per_round": args.batches,
        "rounds": args.rounds,
        "torch_threads": torch.get_num_threads(),
        "loader_batches_per_s": loader_rate,
        "loader_rounds": rates,
        "step_ms": step_ms,
        "loader_ratio": loader_rate["sparsetrain"] / pyg_best if peer else None,
        "step_ratio": pyg_step / step_ms["sparsetrain_trim"] if peer else None,
        **({} if peer else {"pyg": {"error": why}}),
    }
    print()
    print("| loader | batches/s | vs best PyG |\n| --- | ---: | ---: |")
    for name, rate in loader_rate.items():
        print(f"| {name} | {rate:.2f} | {f'{rate / pyg_best:.2f}x' if peer else 'n/a'} |")
    print(f"\n| training step (GraphSAGE, hidden {args.hidden}) | ms | PyG best / this |\n| --- | ---: | ---: |")
    for name, ms in step_ms.items():
        print(f"| {name} | {ms:.0f} | {f'{pyg_step / ms:.2f}x' if peer else 'n/a'} |")
    OUT.mkdir(exist_ok=True)
    (OUT / "pyg_loader.json").write_text(json.dumps(result, indent=2))
    ratios = (f"loader ratio {result['loader_ratio']:.2f}x, step ratio {result['step_ratio']:.2f}x" if peer
              else "no ratio (PyG's sampler is not installed)")
    print(f"\n{ratios}; wrote {OUT / 'pyg_loader.json'}")


if __name__ == "__main__":
    main()
