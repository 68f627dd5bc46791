"""The last hop's sampling fused with its mean (issue 36 item 3): GraphSAGE steps on the CPU, unfused against fused.

    python benchmarks/fused_last_hop.py                          # 300K nodes / 15M edges (~50 a node), under a minute
    python benchmarks/fused_last_hop.py --nodes 2400000 --edges 124000000   # products scale (~40 s to build)
    python benchmarks/fused_last_hop.py --device cuda                       # everything on the GPU (not yet run)

Both sides run the same batches (same seeds, same keys, same sampler seed) through the same model and optimizer:

- unfused: ``NeighborSampler`` draws every hop (dedupe and relabel included), ``TensorFeatures.gather`` fetches the
  rows of every input node, GraphSAGE runs forward + backward + Adam over all blocks (the first layer aggregates with
  a sparse matmul over the gathered rows);
- fused: ``NeighborSampler(fuse_last_hop=True)`` draws every hop but the outermost, the gather fetches the first
  layer's dst nodes only, ``last_hop.mean(table)`` draws the outermost hop's edges (the same draws) and averages
  their sources' rows in one pass, and GraphSAGE runs with ``neighbor_mean=``.

Per batch ms of each phase (median over rounds, rounds alternating unfused / fused), the ratio of the totals, and the
rows each side reads. The synthetic graph (``sparsetrain synth``'s power-law graph, 100-wide features) is built once
into benchmarks/out/. Writes benchmarks/out/fused_last_hop.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import sparsetrain as st
from sparsetrain.nn.models import GraphSAGE
from sparsetrain.sampling import NeighborSampler, SamplerInput
from sparsetrain.storage import TensorFeatures

OUT = Path(__file__).resolve().parent / "out"
PHASES = ("sample", "gather", "mean", "step")


def dataset(nodes: int, edges: int, width: int):
    path = OUT / f"fused_synth_{nodes}_{edges}_{width}"
    if not (path / "meta.json").exists():
        st.datasets.synthesize(path, nodes, edges, feature_dim=width, num_classes=47, quiet=True)
    return st.datasets.load(path)


def step_runner(graph, table: torch.Tensor, labels: torch.Tensor, fanouts, hidden: int, fused: bool, seed: int = 0):
    """One batch of one side: ``run(seeds, key) -> {phase: seconds}``; on the device of ``graph`` and ``table`` (a GPU:
    every phase waited for before its clock stops)."""
    features = TensorFeatures(table)
    sampler = NeighborSampler(graph, fanouts, seed=seed, fuse_last_hop=fused)
    torch.manual_seed(seed)
    model = GraphSAGE(table.shape[1], hidden, int(labels.max()) + 1, num_layers=len(fanouts), dropout=0.0)
    model = model.to(table.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    on_gpu = table.device.type == "cuda"

    def clock() -> float:
        if on_gpu:
            torch.cuda.synchronize(table.device)
        return time.perf_counter()

    def run(seeds: torch.Tensor, key: int) -> dict[str, float]:
        seeds = seeds.to(table.device)
        t0 = clock()
        mb = sampler.sample(SamplerInput(seeds, key=key))
        t1 = clock()
        x = features.gather(mb.input_nodes)
        t2 = clock()
        mean = mb.last_hop.mean(table) if fused else None
        t3 = clock()
        out = model(x, mb.to_pyg(), neighbor_mean=mean)
        loss = torch.nn.functional.cross_entropy(out, labels[seeds].clamp(min=0))
        opt.zero_grad()
        loss.backward()
        opt.step()
        t4 = clock()
        return {"sample": t1 - t0, "gather": t2 - t1, "mean": t3 - t2, "step": t4 - t3, "rows": x.shape[0],
                "loss": loss.item()}

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=300_000)
    p.add_argument("--edges", type=int, default=15_000_000)
    p.add_argument("--width", type=int, default=100, help="feature width")
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batches", type=int, default=3, help="batches a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch and Numba threads")
    p.add_argument("--device", default="cpu", help="cpu, or cuda: graph, features, labels and model on the GPU "
                                                    "(sampled there; not yet run on one)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    fanouts = [int(f) for f in args.fanout.split(",")]
    ds = dataset(args.nodes, args.edges, args.width)
    rng = np.random.default_rng(0)
    batches = [torch.from_numpy(rng.choice(ds.num_nodes, args.batch_size, replace=False)) for _ in range(args.batches)]
    graph = ds.graph.in_memory().to(args.device)
    table = ds.features.gather(torch.arange(ds.num_nodes)).to(args.device)  # the whole table in (device) memory
    sides = {name: step_runner(graph, table, ds.labels.to(args.device), fanouts, args.hidden, fused)
             for name, fused in (("unfused", False), ("fused", True))}
    for run in sides.values():  # JIT and first-touch pages out of the timings
        run(batches[0], 0)
    per_round = {name: [] for name in sides}
    losses = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, run in sides.items():
            results = [run(seeds, key) for key, seeds in enumerate(batches)]
            per_round[name].append({ph: 1e3 * sum(r[ph] for r in results) / len(results) for ph in PHASES})
            per_round[name][-1]["rows"] = sum(r["rows"] for r in results) / len(results)
            losses[name].append([r["loss"] for r in results])
    summary = {}
    for name, rounds in per_round.items():
        totals = [sum(r[ph] for ph in PHASES) for r in rounds]
        best = rounds[totals.index(statistics.median_low(totals))]
        summary[name] = {**best, "total": sum(best[ph] for ph in PHASES), "round_totals": totals}
    ratio = summary["unfused"]["total"] / summary["fused"]["total"]
    print(f"{args.device}: graph {ds.num_nodes:,} nodes / {ds.graph.num_edges:,} edges, features {args.width}, "
          f"fanouts {fanouts}, batch {args.batch_size}, hidden {args.hidden}, {args.threads} threads, {args.batches} "
          f"batches x {args.rounds} rounds")
    print("| side | sample ms | gather ms | fused mean ms | step ms | total ms | rows gathered |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, s in summary.items():
        print(f"| {name} | {s['sample']:.1f} | {s['gather']:.1f} | {s['mean']:.1f} | {s['step']:.1f} | "
              f"{s['total']:.1f} | {s['rows']:,.0f} |")
    print(f"unfused / fused total: {ratio:.2f}x")
    first_loss = {name: losses[name][0][0] for name in sides}
    print(f"first batch loss: unfused {first_loss['unfused']:.6f}, fused {first_loss['fused']:.6f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "fused_last_hop.json").write_text(json.dumps({"args": vars(args), "summary": summary, "ratio": ratio,
                                                         "losses": losses}, indent=1))


if __name__ == "__main__":
    main()
