"""DGL's ``DataLoader`` + ``NeighborSampler`` vs ``sparsetrain.dgl``'s on the same ``DGLGraph``, in one process.

    /path/to/dgl-env/bin/python benchmarks/dgl_loader.py                  # 200K nodes, 4M edges
    /path/to/dgl-env/bin/python benchmarks/dgl_loader.py --nodes 1000000 --edges 20000000 --batches 20

Run with the DGL environment's python (torch 2.2.1 + dgl 2.1.0, as ``.ci/run`` builds it): both loaders yield DGL
blocks, so both need DGL. The graph is uniform random (``torch.randint`` edges, fixed seed), the seeds a fixed
permutation cut into ``--batches`` batches of ``--batch-size`` (``shuffle=False``), the fanouts DGL's list (input
layer first). Each round iterates each loader once over those seeds (loader made outside the timing, as a training
script makes it once; the conversion of the ``DGLGraph`` to sparsetrain's CSC is timed apart), rounds alternating;
the median batches/s of each and the ratio are printed and written to benchmarks/out/dgl_loader.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=4_000_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[10, 10, 10])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import dgl

    import sparsetrain.dgl as sd

    torch.manual_seed(0)
    g = dgl.graph((torch.randint(0, args.nodes, (args.edges,)), torch.randint(0, args.nodes, (args.edges,))),
                  num_nodes=args.nodes)
    seeds = torch.randperm(args.nodes)[: args.batches * args.batch_size]
    t0 = time.perf_counter()
    ours = sd.DataLoader(g, seeds, sd.DGLNeighborSampler(args.fanouts), batch_size=args.batch_size)
    convert_s = time.perf_counter() - t0
    theirs = dgl.dataloading.DataLoader(g, seeds, dgl.dataloading.NeighborSampler(args.fanouts),
                                        batch_size=args.batch_size)
    for loader in (ours, theirs):  # warm up: kernels compiled / loaded, DGL's formats built
        next(iter(loader))
    rates: dict[str, list[float]] = {"dgl": [], "sparsetrain.dgl": []}
    edges: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, loader in (("dgl", theirs), ("sparsetrain.dgl", ours)):
            t0 = time.perf_counter()
            sampled = sum(sum(b.num_edges() for b in blocks) for _, _, blocks in loader)
            rates[name].append(args.batches / (time.perf_counter() - t0))
            edges[name] = sampled
    result = {
        "nodes": args.nodes, "edges": args.edges, "batch_size": args.batch_size, "batches": args.batches,
        "fanouts_dgl_order": args.fanouts, "threads": torch.get_num_threads(),
        "batches_per_s": {k: round(statistics.median(v), 2) for k, v in rates.items()},
        "sampled_edges_per_pass": edges, "sparsetrain_graph_conversion_s": round(convert_s, 3),
    }
    result["ratio_sparsetrain_over_dgl"] = round(result["batches_per_s"]["sparsetrain.dgl"]
                                                 / result["batches_per_s"]["dgl"], 2)
    print(f"{'loader':<18}{'batches/s':>12}{'edges/pass':>14}")
    for name in rates:
        print(f"{name:<18}{result['batches_per_s'][name]:>12.2f}{edges[name]:>14,}")
    print(f"ratio sparsetrain.dgl / dgl: {result['ratio_sparsetrain_over_dgl']:.2f}x; converting the DGLGraph "
          f"once: {convert_s:.2f} s")
    out = HERE / "out" / "dgl_loader.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
