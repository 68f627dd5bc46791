"""The padded (static-shape) GraphSAGE step against the eager step, on the same sampled batches and weights.

Batches are sampled once ([15, 10, 5], batch 1024 by default, on the device when it is a GPU) from a random graph,
with features and labels attached, so only the model step is timed: forward, loss, backward and Adam. Rows: the
eager step on the batches as sampled, and the padded step (``StaticStep``: eager on a CPU; replayed as one CUDA graph
on a GPU), each with the model's scatter aggregation and with its CSR SpMM. Per row: ms a step (wall, and CUDA-event
GPU time on a GPU), and the largest relative difference of its losses from the eager step's (dropout 0, so both draw
nothing).

    python benchmarks/static_step.py --device cuda          # products-like sizes
    python benchmarks/static_step.py --quick                # small sizes on the CPU, seconds
Prints a table and writes benchmarks/out/static_step.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sparsetrain.engine.static.shapes import StepShapes  # noqa: E402
from sparsetrain.engine.static.step import StaticStep  # noqa: E402
from sparsetrain.nn.models import GraphSAGE  # noqa: E402
from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput  # noqa: E402


def sampled_batches(nodes: int, degree: int, features: int, classes: int, fanouts, batch: int, count: int,
                    device: torch.device) -> list:
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, nodes, (2, nodes * degree), generator=g)
    graph = CSCGraph.from_edge_index(edge_index, nodes).to(device)
    sampler = NeighborSampler(graph, fanouts, seed=1)
    x = torch.randn(nodes, features, generator=g).to(device)
    y = torch.randint(0, classes, (nodes,), generator=g).to(device)
    out = []
    for k in range(count):
        seeds = torch.randperm(nodes, generator=g)[:batch].to(device)
        mb = sampler.sample(SamplerInput(seeds, key=k))
        mb.x, mb.y = x[mb.input_nodes], y[mb.seeds]
        out.append(mb)
    return out


def eager_step(model, optimizer, mb) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(mb.x, mb.to_pyg()), mb.y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def timed(step, batches: list, device: torch.device, warmup: int) -> dict:
    """ms a step after ``warmup`` steps: wall (host) and, on a GPU, the GPU time between CUDA events."""
    losses = [step(mb) for mb in batches[:warmup]]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for mb in batches[warmup:]:
        losses.append(step(mb))
    if cuda:
        end.record()
        torch.cuda.synchronize(device)
    wall = (time.perf_counter() - t0) * 1e3 / (len(batches) - warmup)
    gpu = start.elapsed_time(end) / (len(batches) - warmup) if cuda else None
    return {"ms_per_step": wall, "gpu_ms_per_step": gpu, "losses": torch.stack(losses).float().cpu().tolist()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--nodes", type=int, default=2_400_000)
    p.add_argument("--degree", type=int, default=25)
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batches", type=int, default=30)
    args = p.parse_args()
    device = torch.device(args.device)
    fanouts, batch, classes = [15, 10, 5], 1024, 47
    if args.quick:
        args.nodes, args.degree, args.hidden, args.batches, fanouts, batch = 3000, 10, 32, 8, [5, 5], 64
    batches = sampled_batches(args.nodes, args.degree, args.features, classes, fanouts, batch, args.batches, device)
    shapes = StepShapes.bound(batch, fanouts, args.nodes)
    sampled = statistics.mean(mb.input_nodes.numel() for mb in batches)
    warmup = 4  # the padded step captures after 3 eager steps
    rows = []
    for spmm in (False, True):
        torch.manual_seed(0)
        base = GraphSAGE(args.features, args.hidden, classes, len(fanouts), dropout=0.0, spmm=spmm).to(device)
        eager_model = copy.deepcopy(base)
        eager_opt = torch.optim.Adam(eager_model.parameters(), lr=1e-3)
        eager = timed(lambda mb: eager_step(eager_model, eager_opt, mb), batches, device, warmup)
        static_model = copy.deepcopy(base)
        static_opt = torch.optim.Adam(static_model.parameters(), lr=1e-3, capturable=device.type == "cuda")
        aggregation = "CSR SpMM" if spmm else "scatter"
        try:
            step = StaticStep(static_model, static_opt, shapes, args.features, device=device,
                              mode="graph" if device.type == "cuda" else "eager")
            padded = timed(step.step, batches, device, warmup)
            padded["mode"] = step.mode
        except Exception as exc:  # a path that fails costs its row
            padded = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}
        for name, r in (("eager, as sampled", eager), (f"padded ({padded.get('mode', '?')})", padded)):
            row = {"step": name, "aggregation": aggregation, **{k: v for k, v in r.items() if k != "losses"}}
            if "losses" in r:
                want = torch.tensor(eager["losses"])
                row["max_rel_loss_diff"] = float(((torch.tensor(r["losses"]) - want).abs() / want.abs()).max())
            rows.append(row)
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "nodes": args.nodes, "edges": args.nodes * args.degree, "fanouts": fanouts,
              "batch": batch, "hidden": args.hidden, "padded_input_rows": shapes.nodes[-1],
              "mean_sampled_input_rows": sampled, "rows": rows}
    print(f"{report['device']}: padded input rows {shapes.nodes[-1]:,} vs {sampled:,.0f} sampled "
          f"({shapes.nodes[-1] / sampled:.2f}x)")
    print("| step | aggregation | ms/step (wall) | GPU ms/step | max rel loss diff | error |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        gpu = r.get("gpu_ms_per_step")
        print(f"| {r['step']} | {r['aggregation']} | {r.get('ms_per_step', float('nan')):.2f} | "
              f"{'-' if gpu is None else f'{gpu:.2f}'} | {r.get('max_rel_loss_diff', float('nan')):.1e} | "
              f"{r.get('error', '')} |")
    out = HERE / "out" / "static_step.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
