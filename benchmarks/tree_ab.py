"""Two checkouts of sparsetrain side by side, same run: the CPU sampler and the PyG drop-in (does a change keep speed?).

Two persistent worker processes, one importing each tree (``PYTHONPATH``), time the same work in alternating rounds
(the order flips every round), so both see the same machine load: ``NeighborSampler`` [15, 10, 5] over 30 batches of
1024 seeds (edges per second of wall time, and of the process's CPU time, steadier on a shared machine) and
``sparsetrain.pyg.NeighborLoader`` over the same 30 batches with a host ``Data`` (batches/s).

    git worktree add /tmp/before <rev>
    python benchmarks/tree_ab.py --before /tmp/before            # --after defaults to this checkout
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from two_trees import alternate

HERE = Path(__file__).resolve().parent
BATCHES, BATCH, FANOUTS = 30, 1024, [15, 10, 5]

WORKER = f"""
import json, sys, time
import numpy as np, torch
from torch_geometric.data import Data
import sparsetrain.pyg as stp
from sparsetrain.datasets import load
from sparsetrain.sampling import NeighborSampler, SamplerInput

torch.set_num_threads(int(sys.argv[2]))
ds = load(sys.argv[1])
rng = np.random.default_rng(0)
seeds = [torch.from_numpy(rng.choice(ds.num_nodes, {BATCH}, replace=False)) for _ in range({BATCHES})]
sampler = NeighborSampler(ds.graph, {FANOUTS}, seed=0)
data = Data(x=ds.features.gather(torch.arange(ds.num_nodes)), y=ds.labels, edge_index=ds.graph.to_edge_index(),
            num_nodes=ds.num_nodes)
loader = stp.NeighborLoader(data, num_neighbors={FANOUTS}, batch_size={BATCH}, input_nodes=torch.cat(seeds), seed=0)
for b in seeds[:3]:  # compile and warm
    sampler.sample(SamplerInput(b))
next(iter(loader))
for _ in sys.stdin:
    start, cpu = time.perf_counter(), time.process_time()
    edges = sum(sampler.sample(SamplerInput(b)).num_sampled_edges for b in seeds)
    sampled, sampled_cpu = time.perf_counter() - start, time.process_time() - cpu
    start = time.perf_counter()
    batches = sum(1 for _ in loader)
    loaded = time.perf_counter() - start
    print(json.dumps({{"sampler_edges_per_s": edges / sampled, "sampler_edges_per_cpu_s": edges / sampled_cpu,
                      "dropin_batches_per_s": batches / loaded}}), flush=True)
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the checkout to compare against (e.g. a git worktree)")
    p.add_argument("--after", type=Path, default=HERE.parent, help="the checkout under test (default: this one)")
    p.add_argument("--data", type=Path, default=HERE / "out" / "ab-500k",
                   help="a dataset folder (a 500K-node / 12M-edge synthetic graph is made there if missing)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--nodes", type=int, default=500_000, help="nodes of the synthetic graph made if --data is missing")
    p.add_argument("--edges", type=int, default=12_000_000, help="its edges")
    args = p.parse_args(argv)
    if not (args.data / "meta.json").is_file():
        from sparsetrain.datasets import synthesize

        synthesize(args.data, args.nodes, args.edges, feature_dim=100, num_classes=47, seed=0, overwrite=True,
                   quiet=True)
    rounds = alternate(WORKER, [str(args.data), str(args.threads)],
                       {"before": args.before, "after": args.after}, args.rounds)
    for key in ("sampler_edges_per_s", "sampler_edges_per_cpu_s", "dropin_batches_per_s"):
        before = statistics.median(r[key] for r in rounds["before"])
        after = statistics.median(r[key] for r in rounds["after"])
        best = max(r[key] for r in rounds["after"]) / max(r[key] for r in rounds["before"])
        per_round = [round(a[key] / b[key], 3) for a, b in zip(rounds["after"], rounds["before"])]
        print(f"{key}: before {before:,.1f}  after {after:,.1f}  after/before {after / before:.3f}  best/best "
              f"{best:.3f}  rounds {per_round}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
