"""Typed neighbor sampling at ogbn-mag scale: sparsetrain vs DGL's heterograph NeighborSampler vs PyG's hetero sampler.

    python benchmarks/hetero_sampling.py                # ogbn-mag-shaped synthetic graph at benchmarks/out/mag
                                                        # (made if missing)
    python benchmarks/hetero_sampling.py --scale 0.05   # smaller (its own folder)

The graph is ``sparsetrain synth --typed`` at ``--scale`` (1.0: 1.94M nodes, 21.1M edges plus the
reverse relations, 42.2M stored edges, 8 edge types). Batches of ``--batch-size`` random paper seeds
from the train split, identical for every library; fanouts per hop (seeds outwards) for every edge type.

Semantics differ, so each peer is compared with sparsetrain run the same way:
- DGL (``dgl.dataloading.NeighborSampler`` on a ``dgl.heterograph``, in the DGL environment: a subprocess
  of this run, ``--peer dgl``, on 2 and 1 OpenMP threads, the better counts) builds message-flow graphs:
  every hop samples for all nodes found so far; sparsetrain ``hop_nodes="all"`` does the same.
- PyG (``torch_sparse.hetero_neighbor_sample``, what PyG's NeighborLoader runs on HeteroData without
  pyg-lib; one call is single-threaded, so it also runs 2 batches side by side on 2 threads like 2 loader
  workers, the better counts) samples at each hop only the nodes new at the previous hop; sparsetrain
  ``hop_nodes="new"`` does the same.
Every library runs on 2 and on 1 thread (sparsetrain: Numba threads), the better counts: on a loaded
2-core machine one thread often wins. Rounds alternate (in-process libraries, DGL, in-process again);
each configuration's median round is reported.

``--step`` also times one R-GCN training step (sample, gather per-type inputs, forward, backward, Adam) on
the same batches: sparsetrain's RGCN (PyG HeteroConv of per-relation mean SAGEConv + per-type root) vs the
same model in DGL (HeteroGraphConv of per-relation mean SAGEConv + per-type root) on DGL's blocks.
Featureless node types read a fixed random table (64 wide) in both. Writes benchmarks/out/hetero_sampling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from dgl_peer import add_peer_flag, peer_threads, run_in_dgl_env
from peers import pyg_sampler_missing, say_missing

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
FEATURELESS_DIM = 64


def seed_batches(pool: np.ndarray, batch_size: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    perm = pool[rng.permutation(len(pool))]
    return [
        torch.from_numpy(perm[i : i + batch_size].astype(np.int64)) for i in range(0, batch_size * count, batch_size)
    ]


def timed_rounds(run_all, batches, rounds: int, warmup: int = 2) -> list[dict]:
    run_all(batches[:warmup])
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        edges = run_all(batches)
        elapsed = time.perf_counter() - start
        out.append(
            {
                "seconds": elapsed,
                "seeds_per_s": sum(len(b) for b in batches) / elapsed,
                "edges_per_s": edges / elapsed,
                "edges_per_seed": edges / sum(len(b) for b in batches),
            }
        )
    return out


def median(rounds: list[dict]) -> dict:
    key = statistics.median_low([r["seeds_per_s"] for r in rounds])
    return next(r for r in rounds if r["seeds_per_s"] == key)


def dataset(scale: float) -> Path:
    from sparsetrain.datasets import synthesize

    path = OUT / ("mag" if scale == 1.0 else f"mag-{scale:g}")
    if not (path / "meta.json").is_file():
        print(f"making {path} (synth --typed --scale {scale:g})...", flush=True)
        synthesize(path, typed=True, scale=scale, num_classes=349, seed=0, overwrite=True, quiet=True)
    return path


def featureless_tables(ds) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {t: torch.randn(n, FEATURELESS_DIM, generator=g) for t, n in ds.num_nodes.items() if t not in ds.features}


# ---------------- sparsetrain and PyG (this environment) ----------------
def on_threads(run, threads: int):
    """``run`` with Numba and torch on ``threads`` threads (on a loaded machine one thread can beat two, as for the
    peers)."""
    import numba

    def wrapped(batches):
        before = numba.get_num_threads(), torch.get_num_threads()
        numba.set_num_threads(threads)
        torch.set_num_threads(threads)
        try:
            return run(batches)
        finally:
            numba.set_num_threads(before[0])
            torch.set_num_threads(before[1])

    return wrapped


def ours_runner(graph, fanouts, hops):
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    sampler = NeighborSampler(graph, fanouts, seed_type="paper", hop_nodes={"dgl": "all", "pyg": "new"}[hops], seed=0)
    return lambda batches: sum(sampler.sample(SamplerInput(s)).num_sampled_edges for s in batches)


def pyg_runner(graph, fanouts, threads: int):
    import torch_sparse  # noqa: F401  (registers torch.ops.torch_sparse)

    key = lambda et: "__".join(et)  # noqa: E731  (torch-sparse's edge type keys)
    node_types = list(graph.num_nodes)
    edge_types = list(graph.edges)
    colptr = {key(et): csc.indptr for et, csc in graph.edges.items()}
    row = {key(et): csc.indices.to(torch.int64) for et, csc in graph.edges.items()}
    num_neighbors = {key(et): list(fanouts) for et in graph.edges}

    def one(seeds):
        node, row_, col, edge = torch.ops.torch_sparse.hetero_neighbor_sample(
            node_types, edge_types, colptr, row, {"paper": seeds}, num_neighbors, len(fanouts), False, True)
        return sum(r.numel() for r in row_.values())

    if threads == 1:
        return lambda batches: sum(map(one, batches))
    pool = ThreadPoolExecutor(threads)
    return lambda batches: sum(pool.map(one, batches))


def ours_step(ds, fanouts, hidden: int):
    from sparsetrain.engine.stages import FetchFeatures
    from sparsetrain.nn import RGCN
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    sampler = NeighborSampler(ds.graph, fanouts, seed_type="paper", seed=0)
    tables = featureless_tables(ds)
    fetch = FetchFeatures({**{t: f.tensor() for t, f in ds.features.items()}, **tables}, ds.labels["paper"])
    in_ch = {t: (ds.num_features[t] if t in ds.features else FEATURELESS_DIM) for t in ds.node_types}
    model = RGCN(ds.node_types, ds.edge_types, in_ch, hidden, ds.num_classes, len(fanouts), "paper", dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def run(batches):
        edges = 0
        for seeds in batches:
            mb = fetch(sampler.sample(SamplerInput(seeds)))
            loss = torch.nn.functional.cross_entropy(model(mb.x, mb.to_pyg()), mb.y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            edges += mb.num_sampled_edges
        return edges

    return run


# ---------------- DGL (the DGL environment) ----------------
def dgl_rounds(args, dataset_path: Path, threads: int) -> dict:
    flags = [
        "--dataset", dataset_path, "--batches", args.batches, "--rounds", args.rounds, "--batch-size", args.batch_size,
        "--hidden", args.hidden, "--fanouts", *args.fanouts,
    ]
    if args.step:
        flags.append("--step")
    return run_in_dgl_env(__file__, flags, threads)


def dgl_peer(args) -> None:
    import dgl
    import dgl.nn as dglnn

    from sparsetrain.datasets import load

    torch.set_num_threads(peer_threads())
    ds = load(args.dataset)
    data = {}
    for et, csc in ds.graph.edges.items():
        dst = torch.repeat_interleave(torch.arange(csc.num_nodes), csc.in_degrees())
        data[et] = (csc.indices.to(torch.int64), dst)
    g = dgl.heterograph(data, num_nodes_dict=ds.num_nodes)
    g = g.formats("csc")
    sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanouts)))  # DGL lists fanouts outermost first
    batches = seed_batches(ds.split["train"].numpy(), args.batch_size, args.batches)
    result = {"dgl": dgl.__version__, "torch": torch.__version__}

    def run(batches):
        return sum(sum(b.num_edges() for b in sampler.sample_blocks(g, {"paper": s})[2]) for s in batches)

    result["rounds"] = timed_rounds(run, batches, args.rounds)
    if args.step:
        tables = {t: f.tensor() for t, f in ds.features.items()} | featureless_tables(ds)
        labels = ds.labels["paper"]

        class DglRGCN(torch.nn.Module):
            def __init__(self):
                super().__init__()
                # layer l computes only what layer l + 1 reads, as sparsetrain's RGCN
                needed, relations = [{"paper"}], []
                for _ in args.fanouts:
                    ets = [et for et in ds.edge_types if et[2] in needed[0]]
                    relations.insert(0, ets)
                    needed.insert(0, needed[0] | {et[0] for et in ets})
                self.project = torch.nn.ModuleDict(
                    {t: torch.nn.Linear(tables[t].shape[1], args.hidden) for t in sorted(needed[0])}
                )
                self.convs = torch.nn.ModuleList()
                self.roots = torch.nn.ModuleList()
                for layer in range(len(args.fanouts)):
                    out = ds.num_classes if layer == len(args.fanouts) - 1 else args.hidden
                    self.convs.append(
                        dglnn.HeteroGraphConv(
                            {et: dglnn.SAGEConv(args.hidden, out, "mean", bias=False) for et in relations[layer]},
                            aggregate="sum",
                        )
                    )
                    self.roots.append(
                        torch.nn.ModuleDict({t: torch.nn.Linear(args.hidden, out) for t in sorted(needed[layer + 1])})
                    )

            def forward(self, blocks, x):
                h = {t: self.project[t](x[t]) for t in self.project}
                for layer, (conv, roots, block) in enumerate(zip(self.convs, self.roots, blocks)):
                    dst = {t: h[t][: block.num_dst_nodes(t)] for t in roots}
                    out = conv(block, (h, dst))
                    h = {t: roots[t](v) + out[t] if t in out else roots[t](v) for t, v in dst.items()}
                    if layer < len(blocks) - 1:
                        h = {t: v.relu() for t, v in h.items()}
                return h["paper"]

        model = DglRGCN()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)

        def step(batches):
            edges = 0
            for s in batches:
                inputs, _, blocks = sampler.sample_blocks(g, {"paper": s})
                x = {t: tables[t][ids] for t, ids in inputs.items()}
                loss = torch.nn.functional.cross_entropy(model(blocks, x), labels[s])
                opt.zero_grad()
                loss.backward()
                opt.step()
                edges += sum(b.num_edges() for b in blocks)
            return edges

        result["step_rounds"] = timed_rounds(step, batches, args.rounds, warmup=1)
    print(json.dumps(result))


# ---------------- the comparison ----------------
def best(named: dict[str, list[dict]], names) -> tuple[str, dict]:
    meds = {n: median(named[n]) for n in names if named.get(n)}
    name = max(meds, key=lambda n: meds[n]["seeds_per_s"])
    return name, meds[name]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="graph size relative to ogbn-mag (default 1.0)")
    p.add_argument(
        "--fanouts",
        type=int,
        nargs="+",
        default=[15, 10],
        help="per hop from the seeds, every edge type (default 15 10)",
    )
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=8, help="batches per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--step", action="store_true", help="also time an R-GCN training step against DGL")
    p.add_argument("--skip-dgl", action="store_true")
    add_peer_flag(p)
    p.add_argument("--dataset", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.peer == "dgl":
        return dgl_peer(args)

    from sparsetrain.datasets import load

    path = dataset(args.scale)
    ds = load(path)
    graph = ds.graph
    batches = seed_batches(ds.split["train"].numpy(), args.batch_size, args.batches)
    runners = {}
    for hops in ("dgl", "pyg"):
        run = ours_runner(graph, args.fanouts, hops)
        runners.update({f"sparsetrain_{hops}_hops_{t}thread": on_threads(run, t) for t in (2, 1)})
    why = pyg_sampler_missing("torch_sparse")
    if why is None:
        runners.update(pyg_1thread=pyg_runner(graph, args.fanouts, 1), pyg_2threads=pyg_runner(graph, args.fanouts, 2))
    else:
        say_missing("PyG (torch-sparse)", why)
    if args.step:
        step = ours_step(ds, args.fanouts, args.hidden)
        runners.update({f"sparsetrain_rgcn_step_{t}thread": on_threads(step, t) for t in (2, 1)})
    rounds: dict[str, list[dict]] = {k: [] for k in runners}
    load_avg = [os.getloadavg()[0]]

    def in_process():
        for name, run in runners.items():
            rounds[name] += timed_rounds(run, batches, args.rounds, warmup=1 if "step" in name else 2)
        load_avg.append(os.getloadavg()[0])

    in_process()
    dgl = {}
    for threads in (2, 1):
        dgl[threads] = dgl_rounds(args, path, threads) if not args.skip_dgl else {"error": "skipped (--skip-dgl)"}
        load_avg.append(os.getloadavg()[0])
    in_process()
    for threads, r in dgl.items():
        if "rounds" in r:
            rounds[f"dgl_{threads}thread"] = r["rounds"]
            if "step_rounds" in r:
                rounds[f"dgl_rgcn_step_{threads}thread"] = r["step_rounds"]

    summary = {name: median(r) for name, r in rounds.items() if r}
    comparisons = {}

    def compare(label: str, ours: str, peer: str) -> None:
        ours_name, mine = best(rounds, [f"{ours}_2thread", f"{ours}_1thread"])
        peer_names = [f"{peer}_2thread", f"{peer}_1thread"] if peer != "pyg" else ["pyg_1thread", "pyg_2threads"]
        if not any(rounds.get(n) for n in peer_names):
            return
        peer_name, theirs = best(rounds, peer_names)
        comparisons[label] = {
            "ours": ours_name,
            "peer": peer_name,
            "ratio": mine["seeds_per_s"] / theirs["seeds_per_s"],
        }

    compare("vs_pyg (pyg hops)", "sparsetrain_pyg_hops", "pyg")
    compare("vs_dgl (dgl hops)", "sparsetrain_dgl_hops", "dgl")
    if args.step:
        compare("rgcn_step_vs_dgl", "sparsetrain_rgcn_step", "dgl_rgcn_step")
    sampling = [c["ratio"] for k, c in comparisons.items() if k.startswith("vs_")]
    result = {
        "graph": str(path),
        "num_nodes": sum(ds.num_nodes.values()),
        "num_edges": graph.num_edges,
        "edge_types": len(graph.edges),
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "batches": len(batches),
        "load_average_1min": load_avg,
        "median": summary,
        "comparisons": comparisons,
        "speedup_vs_faster_peer": min(sampling) if sampling else None,
        "dgl_errors": {t: r["error"] for t, r in dgl.items() if "error" in r},
        "rounds": rounds,
    }
    print(
        f"\n{path.name}: {result['num_nodes']:,} nodes, {result['num_edges']:,} edges in "
        f"{result['edge_types']} edge types, "
        f"fanouts {args.fanouts}, {len(batches)} x {args.batch_size} paper seeds/round, load average "
        f"{', '.join(f'{x:.1f}' for x in load_avg)}"
    )
    print(f"{'run':<28}{'seeds/s':>12}{'M edges/s':>12}{'edges/seed':>12}")
    for name, r in summary.items():
        print(f"{name:<28}{r['seeds_per_s']:>12,.0f}{r['edges_per_s'] / 1e6:>12.2f}{r['edges_per_seed']:>12.1f}")
    for name, c in comparisons.items():
        print(f"sparsetrain {name}: {c['ratio']:.2f}x ({c['ours']} vs {c['peer']})")
    for t, e in result["dgl_errors"].items():
        print(f"DGL on {t} thread(s) failed: {e}", file=sys.stderr)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hetero_sampling.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
