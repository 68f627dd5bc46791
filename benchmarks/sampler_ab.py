"""Two checkouts' CPU ``NeighborSampler`` side by side: each batch's least CPU time over many alternating rounds.

The steadier twin of ``tree_ab.py`` for a shared machine: two persistent worker processes (one importing each tree,
``PYTHONPATH``), one Numba and torch thread each, sample the same 10 batches a round on the same random in-memory graph,
timing each ``sample()`` by the process's CPU time; rounds alternate which tree goes first. The result: per batch the
minimum over rounds (and the median), summed over the batches, after / before.

    git worktree add /tmp/before <rev>
    python benchmarks/sampler_ab.py --before /tmp/before          # --after defaults to this checkout
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from two_trees import alternate

HERE = Path(__file__).resolve().parent

WORKER = r"""
import json, sys, time
import numba, numpy as np, torch
numba.set_num_threads(1)
torch.set_num_threads(1)
from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput
nodes, edges, fanouts, batch = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
graph = CSCGraph.from_edge_index(torch.from_numpy(rng.integers(0, nodes, (2, edges))), nodes)
sampler = NeighborSampler(graph, fanouts, seed=0)
seeds = [torch.from_numpy(rng.choice(nodes, batch, replace=False)) for _ in range(10)]
for b in seeds[:3]:  # compile and warm
    sampler.sample(SamplerInput(b))
for _ in sys.stdin:
    times = []
    for b in seeds:
        start = time.process_time()
        sampler.sample(SamplerInput(b))
        times.append(time.process_time() - start)
    print(json.dumps(times), flush=True)
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the checkout to compare against (e.g. a git worktree)")
    p.add_argument("--after", type=Path, default=HERE.parent, help="the checkout under test (default: this one)")
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--edges", type=int, default=4_000_000)
    p.add_argument("--fanouts", default="[15, 10, 5]", help="a JSON list")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=24)
    args = p.parse_args(argv)
    rounds = alternate(WORKER, [str(args.nodes), str(args.edges), args.fanouts, str(args.batch)],
                       {"before": args.before, "after": args.after}, args.rounds)
    least = {k: sum(min(r[i] for r in v) for i in range(len(v[0]))) for k, v in rounds.items()}
    median = {k: sum(statistics.median(r[i] for r in v) for i in range(len(v[0]))) for k, v in rounds.items()}
    print(f"{args.nodes} nodes, {args.edges} edges, fanouts {args.fanouts}, batch {args.batch}, {args.rounds} rounds: "
          f"10 batches' least CPU ms before {least['before'] * 1e3:.1f} after {least['after'] * 1e3:.1f} "
          f"after/before {least['after'] / least['before']:.3f}; medians after/before "
          f"{median['after'] / median['before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
