"""Graph transformer: peak memory and time per training step vs sequence length, sparse kernels vs dense attention, SDPA
and PyG.

One step = forward + backward of ``GraphTransformer.forward_sequence`` (2 sparse + 2 cluster
layers, hidden 64, 4 heads, clusters of 128 nodes) over a whole node sequence of N nodes on
a synthetic clustered graph (8 in-edges per node: 6 inside its cluster, 2 anywhere).

- ``sparse``: ours — per-edge scores with a segment softmax, cluster attention on packed tiles.
- ``dense``: the same model with the usual dense formulation — an explicit N x N score matrix per
  head, masked by the adjacency (sparse layers) or by a block-diagonal mask built by comparing the
  cluster ids of all N² pairs (cluster layers).
- ``sdpa``: the same model with every attention one ``torch.nn.functional.scaled_dot_product_attention``
  call over all N nodes with a boolean N x N mask: the edges plus self loops (sparse layers) and the
  cluster blocks (cluster layers). Both masks are built once before the steps (not per step) and count
  in the peak, since holding them is this method's cost; it stops past ``--dense-cap-gib`` of predicted
  memory. Its loss equals ``dense``'s; ``sparse`` differs in the 4th digit because the few duplicate
  random edges count once in a mask and once per copy in the edge kernel.
- Edge attention alone (no cluster layers), against PyG: ``sparse-edge`` is ours with
  ``cluster_layers=False``; ``pyg`` is the same pre-norm residual stack (embed, then per layer
  ``h + out(TransformerConv(LN(h), edges))``, then LN + head) with PyG's ``TransformerConv``
  (hidden 64 = 4 heads x 16, concatenated, no root weight) on the same edges with self loops.

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


def masked_sdpa(mask):
    """Attention of all queries over all keys through PyTorch's SDPA,
    restricted by a fixed boolean ``mask`` [Nq, Nk]."""
    import torch.nn.functional as F

    def attend(q, k, v, *_, **__):  # [N, heads, dim] -> [heads, N, dim] and back
        return F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
        ).transpose(0, 1)

    return attend


def sdpa_masks(edge_index, ptr, n: int):
    """The two boolean N x N masks equivalent to the sparse model: edges with self loops (dst, src) and cluster
    blocks."""
    import torch

    from sparsetrain.nn.attention import add_self_loops

    edges = add_self_loops(edge_index, n)
    edge_mask = torch.zeros(n, n, dtype=torch.bool, device=edge_index.device)
    edge_mask[edges[1], edges[0]] = True
    cluster = torch.repeat_interleave(torch.arange(len(ptr) - 1, device=ptr.device), ptr[1:] - ptr[:-1])
    return edge_mask, cluster[:, None] == cluster[None, :]


def pyg_edge_transformer(layers: int = 2):
    """Our sparse-layer stack (pre-norm, residual, output projection) with PyG's ``TransformerConv`` as the
    attention."""
    import torch
    from torch_geometric.nn import TransformerConv

    class PygEdgeTransformer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(IN_DIM, HIDDEN)
            self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(HIDDEN) for _ in range(layers))
            self.convs = torch.nn.ModuleList(
                TransformerConv(HIDDEN, HIDDEN // HEADS, heads=HEADS, root_weight=False) for _ in range(layers)
            )
            self.outs = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(layers))
            self.head_norm = torch.nn.LayerNorm(HIDDEN)
            self.head = torch.nn.Linear(HIDDEN, CLASSES)

        def forward(self, x, edges):
            h = self.embed(x)
            for norm, conv, out in zip(self.norms, self.convs, self.outs):
                h = h + out(conv(norm(h), edges))
            return self.head(self.head_norm(h))

    return PygEdgeTransformer()


def child(method: str, n: int, steps: int, threads: int, device: str = "cpu") -> dict:
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    from sparsetrain.nn import graph_transformer as gt
    from sparsetrain.nn.attention import add_self_loops

    if method == "dense":
        gt.edge_attention = dense_edge_attention
        gt.cluster_attention = dense_cluster_attention
    x, y, edge_index, ptr = (t.to(device) for t in make_problem(n))
    if method == "pyg":
        model = pyg_edge_transformer().to(device)
    else:
        model = gt.GraphTransformer(IN_DIM, HIDDEN, CLASSES, num_layers=2, heads=HEADS, dropout=0.0,
                                    cluster_layers=method != "sparse-edge").to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cuda = device.startswith("cuda")
    if cuda:  # on a GPU: peak allocated by the steps above what inputs and weights hold
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if method == "sdpa":  # built once, outside the timed steps; their memory counts in the peak
        edge_mask, cluster_mask = sdpa_masks(edge_index, ptr, n)
        gt.edge_attention = masked_sdpa(edge_mask)
        gt.cluster_attention = masked_sdpa(cluster_mask)
    if method == "pyg":
        edges = add_self_loops(edge_index, n)
        forward = lambda: model(x, edges)  # noqa: E731
    else:
        forward = lambda: model.forward_sequence(x, edge_index, ptr)  # noqa: E731
    times = []
    for step in range(steps + 1):  # the first step warms up and is not timed
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(forward(), y)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if step:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "method": method,
        "nodes": n,
        "edges": int(edge_index.shape[1]),
        "step_ms": 1000 * sorted(times)[len(times) // 2],
        "peak_bytes": peak - base,
        "loss": float(loss),
        "device": device,
    }


def dense_predicted_bytes(n: int) -> float:
    """The dense baseline's peak: about six [heads, N, N] float32 tensors alive at once (scores, masked
    scores, softmax kept for backward, their gradients) and two N x N bool masks (within 15% of the
    measured peak at 2K and 4K nodes)."""
    return 6 * HEADS * n * n * 4 + 2 * n * n


def sdpa_predicted_bytes(n: int, device: str) -> float:
    """The SDPA peer's peak: its two boolean N x N masks, plus on CPU (where a boolean mask takes the math
    path) about five [heads, N, N] float32 tensors (within 10% of the measured peak at 2K and 4K nodes); on
    CUDA's memory-efficient kernel, one float copy of a mask (not yet measured)."""
    return 2 * n * n + (5 * HEADS * n * n * 4 if device == "cpu" else 4 * n * n)


PREDICTED = {"dense": lambda n, device: dense_predicted_bytes(n), "sdpa": sdpa_predicted_bytes}
METHODS = ("sparse", "dense", "sdpa", "sparse-edge", "pyg")


def run_one(method: str, n: int, steps: int, threads: int, device: str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", method, str(n), str(steps), str(threads), device],
        capture_output=True,
        text=True,
    )
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
    return {
        "nodes": int(longest),
        "fit": f"peak_bytes = {a:.3g} + {b:.3g} * N^{power}",
        "fitted_on": [int(v) for v in n],
    }


def print_table(rows: list[dict], ours: str, peers: list[str]) -> None:
    """One markdown row per N: ms/step and peak MiB of ``ours`` and each peer, and the peer's time and memory over
    ours."""
    present = {r["method"] for r in rows}
    peers = [p for p in peers if p in present]
    if ours not in present or not peers:
        return
    head = f"| nodes | edges | {ours} ms/step | {ours} peak MiB |" + "".join(
        f" {p} ms/step | {p} peak MiB | {p} / {ours} time | {p} / {ours} memory |" for p in peers)
    print("\n" + head)
    print("|" + " ---: |" * (head.count("|") - 1))

    def cell(r, key, fmt):
        return fmt(r[key]) if key in r else ("stopped" if "stopped" in r else "failed")

    def ratio(a, b, key):
        return f"{a[key] / b[key]:.1f}x" if key in a and key in b and b[key] > 0 else "-"

    for n in sorted({r["nodes"] for r in rows}):
        by = {r["method"]: r for r in rows if r["nodes"] == n}
        s = by[ours]
        line = (
            f"| {n} | {s.get('edges', '-')} | {cell(s, 'step_ms', lambda v: f'{v:.0f}')} | "
            f"{cell(s, 'peak_bytes', lambda v: f'{v / 2**20:.0f}')} |"
        )
        for p in peers:
            d = by[p]
            line += (
                f" {cell(d, 'step_ms', lambda v: f'{v:.0f}')} | {cell(d, 'peak_bytes', lambda v: f'{v / 2**20:.0f}')} |"
                f" {ratio(d, s, 'step_ms')} | {ratio(d, s, 'peak_bytes')} |"
            )
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--sizes", default="2048,4096,8192,16384,32768,65536,131072")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument(
        "--dense-cap-gib", type=float, default=4.0, help="stop the dense and SDPA baselines past this predicted memory"
    )
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    ap.add_argument("--budget-gib", type=float, default=16.0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1: the 2 cores are shared)")
    ap.add_argument(
        "--device", default="cpu", help="cpu (default) or cuda: on a GPU the peak is torch.cuda.max_memory_allocated"
    )
    ap.add_argument("--out", default="graph_transformer.json", help="file name under benchmarks/out/")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        method, n, steps, threads, device = args.child
        print(json.dumps(child(method, int(n), int(steps), int(threads), device)))
        return

    methods = [m for m in args.methods.split(",") if m]
    unknown = set(methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown method(s) {', '.join(sorted(unknown))}; choose from {', '.join(METHODS)}")
    rows = []
    stopped = {}
    for n in [int(s) for s in args.sizes.split(",")]:
        for method in methods:
            if method in stopped:
                rows.append({"method": method, "nodes": n, "stopped": stopped[method]})
                continue
            predicted = PREDICTED[method](n, args.device) if method in PREDICTED else 0
            if predicted > args.dense_cap_gib * GIB:
                stopped[method] = f"predicted {predicted / GIB:.1f} GiB > cap {args.dense_cap_gib} GiB"
                rows.append({"method": method, "nodes": n, "stopped": stopped[method]})
                continue
            row = run_one(method, n, args.steps, args.threads, args.device)
            if "error" in row:
                stopped[method] = f"failed at {n}: {row['error']}"
            rows.append(row)
            print(json.dumps(row), flush=True)

    longest = {
        "sparse": fit_longest(
            [r for r in rows if r["method"] == "sparse" and r["nodes"] >= 8192], 1, args.budget_gib * GIB
        ),
        "dense": fit_longest([r for r in rows if r["method"] == "dense"], 2, args.budget_gib * GIB),
        "sdpa": fit_longest([r for r in rows if r["method"] == "sdpa"], 2, args.budget_gib * GIB),
    }
    print_table(rows, "sparse", ["dense", "sdpa"])
    print_table(rows, "sparse-edge", ["pyg"])
    for method, est in longest.items():
        if est:
            print(
                f"longest sequence in {args.budget_gib:g} GiB ({method}, EXTRAPOLATED from {est['fit']} "
                f"fitted on N={est['fitted_on']}): ~{est['nodes']:,} nodes"
            )
    for method in ("dense", "sdpa"):
        if method in stopped:
            print(f"{method} baseline stopped: {stopped[method]}")
    OUT.mkdir(exist_ok=True)
    config = {
        "hidden": HIDDEN,
        "heads": HEADS,
        "in_dim": IN_DIM,
        "cluster": CLUSTER,
        "in_edges_per_node": 8,
        "layers": "2 sparse + 2 cluster",
        "steps": args.steps,
        "methods": methods,
        "dense_cap_gib": args.dense_cap_gib,
        "torch_threads": args.threads,
        "cpus": os.cpu_count(),
        "device": args.device,
    }
    (OUT / args.out).write_text(json.dumps({"config": config, "rows": rows, "longest_in_budget": longest,
                                                            "budget_gib": args.budget_gib}, indent=2) + "\n")
    print(f"wrote {OUT / args.out}")


if __name__ == "__main__":
    main()
