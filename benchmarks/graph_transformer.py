"""Graph transformer: peak memory and time per training step vs sequence length, sparse kernels vs dense attention.

One step = forward + backward of ``GraphTransformer.forward_sequence`` (2 sparse + 2 cluster
layers, hidden 64, 4 heads, clusters of 128 nodes) over a whole node sequence of N nodes on
a synthetic clustered graph (8 in-edges per node: 6 inside its cluster, 2 anywhere).

- ``sparse``: ours — per-edge scores with a segment softmax, cluster attention on packed tiles.
- ``dense``: the same model with the usual dense formulation — an explicit N x N score matrix per
  head, masked by the adjacency (sparse layers) or by a block-diagonal mask built by comparing the
  cluster ids of all N² pairs (cluster layers).

Each (method, N) runs in a fresh subprocess; its peak memory is the growth of the process's
peak RSS during the steps (inputs, weights and the interpreter excluded). The dense baseline is
stopped at the first N whose predicted score memory passes ``--dense-cap-gib``, and any run that
fails (out of memory) stops its method. The longest sequence fitting 16 GiB is extrapolated from
a fit of the measured peaks (linear for sparse, quadratic for dense) and labelled as such.

    python benchmarks/graph_transformer.py            # 2K..128K nodes, table + benchmarks/out/graph_transformer.json
    python benchmarks/graph_transformer.py --device cuda --sizes 65536,131072,262144,524288,1048576 \
        --dense-cap-gib 40 --budget-gib 78 --out graph_transformer_gpu.json    # on a lent GPU (not run yet)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
HIDDEN, HEADS, IN_DIM, CLASSES, CLUSTER = 64, 4, 64, 8, 128
GIB = 2**30


def make_problem(n: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    dst = torch.arange(n).repeat_interleave(8)
    local = (dst // CLUSTER) * CLUSTER + torch.randint(0, CLUSTER, (n * 8,), generator=g)
    anywhere = torch.randint(0, n, (n * 8,), generator=g)
    inside = (torch.arange(n * 8) % 8) < 6
    src = torch.where(inside, local.clamp_max(n - 1), anywhere)
    ptr = torch.arange(0, n + CLUSTER, CLUSTER).clamp_max(n).unique()
    x = torch.randn(n, IN_DIM, generator=g)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    return x, y, torch.stack([src, dst]), ptr


def dense_edge_attention(q, k, v, edge_index, **_):
    import torch

    mask = torch.zeros(q.shape[0], k.shape[0], dtype=torch.bool, device=q.device)
    mask[edge_index[1], edge_index[0]] = True
    scores = torch.einsum("ihd,jhd->hij", q, k) * q.shape[-1] ** -0.5
    p = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.einsum("hij,jhd->ihd", p, v)


def dense_cluster_attention(q, k, v, packing, **_):
    import torch

    groups = torch.empty(packing.num_nodes, dtype=torch.int64, device=q.device)
    first = 0
    for index, valid in packing.tiles:
        ids = torch.arange(first, first + index.shape[0], device=q.device)[:, None].expand_as(index)
        groups[index[valid]] = ids[valid]
        first += index.shape[0]
    mask = groups[:, None] == groups[None, :]  # all N² pairs
    scores = torch.einsum("ihd,jhd->hij", q, k) * q.shape[-1] ** -0.5
    return torch.einsum("hij,jhd->ihd", torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1), v)


def child(method: str, n: int, steps: int, threads: int, device: str = "cpu") -> dict:
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    from sparsetrain.nn import graph_transformer as gt

    if method == "dense":
        gt.edge_attention = dense_edge_attention
        gt.cluster_attention = dense_cluster_attention
    x, y, edge_index, ptr = (t.to(device) for t in make_problem(n))
    model = gt.GraphTransformer(IN_DIM, HIDDEN, CLASSES, num_layers=2, heads=HEADS, dropout=0.0).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cuda = device.startswith("cuda")
    if cuda:  # on a GPU: peak allocated by the steps above what inputs and weights hold
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for step in range(steps + 1):  # the first step warms up and is not timed
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model.forward_sequence(x, edge_index, ptr), y)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if step:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"method": method, "nodes": n, "edges": int(edge_index.shape[1]), "step_ms": 1000 * sorted(times)[len(times) // 2],
            "peak_bytes": peak - base, "loss": float(loss), "device": device}


def dense_predicted_bytes(n: int) -> float:
    """The dense baseline's peak: about six [heads, N, N] float32 tensors alive at once (scores, masked
    scores, softmax kept for backward, their gradients) and two N x N bool masks (within 15% of the
    measured peak at 2K and 4K nodes)."""
    return 6 * HEADS * n * n * 4 + 2 * n * n


def run_one(method: str, n: int, steps: int, threads: int, device: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", method, str(n), str(steps), str(threads), device], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"method": method, "nodes": n, "error": (proc.stderr.strip().splitlines() or ["killed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fit_longest(rows: list[dict], power: int, budget: float) -> dict | None:
    """Least-squares ``peak = a + b * N**power`` over measured rows; the N where it reaches ``budget``."""
    import numpy as np

    pts = [(r["nodes"], r["peak_bytes"]) for r in rows if "peak_bytes" in r]
    if len(pts) < 2:
        return None
    n, m = np.array(pts, dtype=float).T
    b, a = np.polyfit(n**power, m, 1)
    if b <= 0:
        return None
    longest = ((budget - a) / b) ** (1 / power)
    return {"nodes": int(longest), "fit": f"peak_bytes = {a:.3g} + {b:.3g} * N^{power}", "fitted_on": [int(v) for v in n]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2048,4096,8192,16384,32768,65536,131072")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dense-cap-gib", type=float, default=4.0, help="stop the dense baseline past this predicted memory")
    ap.add_argument("--budget-gib", type=float, default=16.0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1: the 2 cores are shared)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: on a GPU the peak is torch.cuda.max_memory_allocated")
    ap.add_argument("--out", default="graph_transformer.json", help="file name under benchmarks/out/")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        method, n, steps, threads, device = args.child
        print(json.dumps(child(method, int(n), int(steps), int(threads), device)))
        return

    rows = []
    stopped = {}
    for n in [int(s) for s in args.sizes.split(",")]:
        for method in ("sparse", "dense"):
            if method in stopped:
                rows.append({"method": method, "nodes": n, "stopped": stopped[method]})
                continue
            if method == "dense" and dense_predicted_bytes(n) > args.dense_cap_gib * GIB:
                stopped[method] = f"predicted {dense_predicted_bytes(n) / GIB:.1f} GiB > cap {args.dense_cap_gib} GiB"
                rows.append({"method": method, "nodes": n, "stopped": stopped[method]})
                continue
            row = run_one(method, n, args.steps, args.threads, args.device)
            if "error" in row:
                stopped[method] = f"failed at {n}: {row['error']}"
            rows.append(row)
            print(json.dumps(row), flush=True)

    longest = {
        "sparse": fit_longest([r for r in rows if r["method"] == "sparse" and r["nodes"] >= 8192], 1, args.budget_gib * GIB),
        "dense": fit_longest([r for r in rows if r["method"] == "dense"], 2, args.budget_gib * GIB),
    }
    print("\n| nodes | edges | sparse ms/step | sparse peak MiB | dense ms/step | dense peak MiB | dense / sparse time |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in sorted({r["nodes"] for r in rows}):
        s = next(r for r in rows if r["nodes"] == n and r["method"] == "sparse")
        d = next(r for r in rows if r["nodes"] == n and r["method"] == "dense")
        cell = lambda r, k, f: f(r[k]) if k in r else ("stopped" if "stopped" in r else "failed")  # noqa: E731
        ratio = f"{d['step_ms'] / s['step_ms']:.1f}x" if "step_ms" in d and "step_ms" in s else "-"
        print(f"| {n} | {s.get('edges', '-')} | {cell(s, 'step_ms', lambda v: f'{v:.0f}')} | {cell(s, 'peak_bytes', lambda v: f'{v / 2**20:.0f}')} "
              f"| {cell(d, 'step_ms', lambda v: f'{v:.0f}')} | {cell(d, 'peak_bytes', lambda v: f'{v / 2**20:.0f}')} | {ratio} |")
    for method, est in longest.items():
        if est:
            print(f"longest sequence in {args.budget_gib:g} GiB ({method}, EXTRAPOLATED from {est['fit']} fitted on N={est['fitted_on']}): ~{est['nodes']:,} nodes")
    if "dense" in stopped:
        print(f"dense baseline stopped: {stopped['dense']}")
    OUT.mkdir(exist_ok=True)
    config = {"hidden": HIDDEN, "heads": HEADS, "in_dim": IN_DIM, "cluster": CLUSTER, "in_edges_per_node": 8, "layers": "2 sparse + 2 cluster",
              "steps": args.steps, "dense_cap_gib": args.dense_cap_gib, "torch_threads": args.threads, "cpus": os.cpu_count(), "device": args.device}
    (OUT / args.out).write_text(json.dumps({"config": config, "rows": rows, "longest_in_budget": longest,
                                                            "budget_gib": args.budget_gib}, indent=2) + "\n")
    print(f"wrote {OUT / args.out}")


if __name__ == "__main__":
    main()
