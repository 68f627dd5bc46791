"""MoE benchmark.

1. Single process: forward+backward tokens/s of a ``transformers`` Mixtral MoE block swapped for
   sparsetrain's (``replace_moe_blocks``; grouped matmul: the backend the layer measures and picks by itself, and
   each backend forced: bucketed ``bmm``, per-expert ``mm`` loop, ``torch._grouped_mm``) against, on the same
   weights in the same run: the per-expert loop with in-place ``index_add_``, and transformers' own experts
   implementations (``eager``: its per-expert loop; ``grouped_mm``: sorted tokens and
   ``torch.nn.functional.grouped_mm``). CPU fp32; bf16 with ``--device cuda``. Each is first checked against a
   float64 reference of the same weights (:func:`accuracy`): comparing two bf16 outputs cannot say which one is
   wrong.
2. World size 4 on gloo (spawned): bytes communicated per training step (forward, backward, Adam step,
   replica refresh) by FSSDP (plain, re-materialized, load-aware with replicas) and by ExpertParallel,
   under uniform and Zipf-skewed routing; step time; peak memory per rank.

    python benchmarks/moe.py                # both parts, default sizes
    python benchmarks/moe.py --quick        # small sizes, a few seconds
Prints tables and writes benchmarks/out/moe.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sparsetrain.collective import CollectiveStats  # noqa: E402
from sparsetrain.moe import FSSDP, ExpertParallel, MoE, finish_step, grouped, sync_dense_grads  # noqa: E402

# --------------------------------------------------------------------------- part 1: throughput
HF_IMPLEMENTATIONS = ("eager", "grouped_mm")  # transformers' own experts implementations timed as peers


def hf_block(d: int, h: int, experts: int, top_k: int, device: str, dtype: torch.dtype):
    """A ``transformers`` Mixtral MoE block with random weights (the HF peer's block)."""
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    cfg = MixtralConfig(hidden_size=d, intermediate_size=h, num_local_experts=experts, num_experts_per_tok=top_k)
    block = MixtralSparseMoeBlock(cfg)
    with torch.no_grad():
        block.gate.weight.normal_(0.0, d**-0.5)
        block.experts.gate_up_proj.normal_(0.0, d**-0.5)
        block.experts.down_proj.normal_(0.0, h**-0.5)
    return block.to(device, dtype)


def hf_with(block, implementation: str):
    """A copy of the HF block whose experts run ``implementation`` (``config._experts_implementation``)."""
    twin = copy.deepcopy(block)
    twin.experts.config = copy.deepcopy(block.experts.config)
    twin.experts.config._experts_implementation = implementation
    return twin


def naive_moe(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The loop peer: per-expert Python loop over the same router and weights, accumulating in place."""
    lead = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])
    r = moe.router(x)
    y = torch.zeros_like(x)
    w_in, w_out = moe.experts.w_in, moe.experts.w_out
    for e in range(moe.num_experts):
        tok, slot = (r.experts == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gate, up = (x[tok] @ w_in[e].to(x.dtype)).chunk(2, dim=-1)
        out = (F.silu(gate) * up) @ w_out[e].to(x.dtype)
        y.index_add_(0, tok, (out * r.weights[tok, slot].unsqueeze(1)).to(y.dtype))
    return y.reshape(*lead, -1)


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the distance from 1 to the next number: the largest relative error of one rounding (bf16 2**-8)."""
    return torch.finfo(dtype).eps / 2


def tolerance(dtype: torch.dtype, d: int, h: int, top_k: int, sigmas: float = 3.0) -> float:
    """Allowed ``||out - ref|| / ||ref||`` of a Mixtral MoE block computed in ``dtype`` against the float64 reference
    on the same weights and input, over tokens whose routing is unambiguous in ``dtype``.

    Each result rounded to ``dtype`` adds an independent relative error of rms ``u / sqrt(3)`` (``u``: the unit
    roundoff): the gate/up projection, the SiLU, its product with up, the down projection, the routing weight, the
    weighted output (6), and the ``top_k`` additions of expert outputs (which may accumulate in ``dtype``). The matmuls
    accumulate in float32 over reductions of lengths ``d`` and ``h``: rms ``2**-24 sqrt(d + h) / sqrt(3)``. ``sigmas``
    times the rms of the sum. An accumulation in bf16 over ``d`` (rms ~``u sqrt(d / 3)``) fails it.
    """
    u, acc = unit_roundoff(dtype), unit_roundoff(torch.float32)
    return sigmas * math.sqrt(((6 + top_k) * u**2 + (d + h) * acc**2) / 3)


def reference_moe(block, x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The Mixtral block's definition in float64 from its own weights: ``([T, d] output, [T] ambiguous)``.

    A token is *ambiguous* when its ``top_k``-th and next router logits are closer than the rounding of the two
    logits to ``dtype`` can move them (``u (|a| + |b|)``): an implementation computing its logits in ``dtype`` may
    then pick either expert, both correct to that precision. HF rounds its logits to bf16; sparsetrain keeps float32.
    """
    x = x.detach().reshape(-1, x.shape[-1]).double()
    gate = block.gate.weight.detach().double()
    gate_up, down = block.experts.gate_up_proj.detach().double(), block.experts.down_proj.detach().double()
    k = block.top_k
    logits = x @ gate.T
    top, chosen = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
    weights = top / top.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for slot in range(k):
        g, up = torch.einsum("td,tfd->tf", x, gate_up[chosen[:, slot]]).chunk(2, dim=-1)
        out += weights[:, slot, None] * torch.einsum("tf,tdf->td", F.silu(g) * up, down[chosen[:, slot]])
    if k == logits.shape[1]:  # every expert chosen: nothing to pick wrong
        return out, torch.zeros(len(x), dtype=torch.bool)
    ordered = logits.topk(k + 1, dim=-1).values
    a, b = ordered[:, k - 1], ordered[:, k]
    return out, (a - b) <= unit_roundoff(dtype) * (a.abs() + b.abs())


def accuracy(fns: dict, block, x: torch.Tensor) -> dict[str, dict]:
    """Per implementation (``fn(x)``, same weights as ``block``): its relative error against :func:`reference_moe` on
    the unambiguously routed tokens, the :func:`tolerance`, whether it is within, and how many tokens were left out."""
    d, h = block.experts.hidden_dim, block.experts.intermediate_dim
    want, ambiguous = reference_moe(block, x, x.dtype)
    clear = ~ambiguous
    allowed = tolerance(x.dtype, d, h, block.top_k)
    checked = {}
    with torch.no_grad():
        for name, fn in fns.items():
            got = fn(x).reshape(want.shape).double()
            rel = float((got - want)[clear].norm() / want[clear].norm())
            checked[name] = {"rel_error_vs_fp64": rel, "tolerance": allowed, "within_tolerance": rel <= allowed,
                             "ambiguous_tokens": int(ambiguous.sum())}
    return checked


def time_alternating(fns: dict, x: torch.Tensor, reps: int) -> dict[str, float]:
    """Median forward+backward seconds of every function, timed in turn within each rep (shared, noisy machine)."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    for fn in fns.values():
        fn(x).float().sum().backward()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn(x).float().sum().backward()
            sync()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def with_backend(fn, backend: str):
    def run(v):
        grouped.set_backend(backend)
        try:
            return fn(v)
        finally:
            grouped.set_backend(None)

    return run


def matmul_peak_tflops(n: int, d: int, h: int, device: str, dtype: torch.dtype, reps: int = 5) -> float:
    """Measured dense matmul rate ``[n, d] @ [d, 2h]`` on this device and dtype (the roofline to compare with)."""
    a, b = torch.randn(n, d, device=device, dtype=dtype), torch.randn(d, 2 * h, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n * d * 2 * h * reps / (time.perf_counter() - t0) / 1e12


def throughput(tokens: int, d: int, h: int, experts: int, top_k: int, reps: int, device: str = "cpu") -> list[dict]:
    """One Mixtral block, same weights: sparsetrain's replacement (each grouped-matmul backend) against the
    per-expert loop with in-place ``index_add_`` and transformers' own experts implementations."""
    from sparsetrain.moe.hf import replace_moe_blocks

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    block = hf_block(d, h, experts, top_k, device, dtype)
    holder = torch.nn.ModuleDict({"mlp": copy.deepcopy(block)})
    ours = replace_moe_blocks(holder)["mlp"]
    x = torch.randn(1, tokens, d, device=device, dtype=dtype)
    backends = ["bucketed", "loop"] + (["native"] if grouped.native_available(device, dtype) else [])
    fns = {"sparsetrain (auto: measured)": ours}  # what a user gets: the layer's own measured choice
    fns.update({f"sparsetrain ({b})": with_backend(ours, b) for b in backends})
    fns["loop, in-place index_add_"] = lambda v: naive_moe(ours.moe, v)
    fns.update({f"HF {impl}": hf_with(block, impl) for impl in HF_IMPLEMENTATIONS})
    checked = accuracy(fns, block, x)
    wrong = {name: c for name, c in checked.items() if name.startswith("sparsetrain") and not c["within_tolerance"]}
    if wrong:  # a peer outside tolerance is reported in its row; sparsetrain's own is not timed
        name, c = next(iter(wrong.items()))
        raise AssertionError(f"{name}: relative error {c['rel_error_vs_fp64']:.2e} against the float64 reference on "
                             f"the tokens routed unambiguously (allowed {c['tolerance']:.2e})")
    seconds = time_alternating(fns, x, reps)
    flops = 3 * 2 * tokens * top_k * (d * 2 * h + h * d)  # expert matmuls, forward + backward (x3)
    peak = matmul_peak_tflops(tokens * top_k, d, h, device, dtype) * 1e3
    best_ours = seconds["sparsetrain (auto: measured)"]
    return [{"device": device, "dtype": str(dtype).replace("torch.", ""), "tokens": tokens, "d_model": d, "d_hidden": h,
             "experts": experts, "top_k": top_k, "implementation": name, "tok_s": tokens / sec,
             "sparsetrain auto x faster": sec / best_ours, "expert_GFLOP_s": flops / sec / 1e9,
             "matmul_peak_GFLOP_s": peak,
             **checked[name]}
            for name, sec in seconds.items()]  # fmt: skip


# --------------------------------------------------------------------------- part 2: communication
def routed_inputs(rank: int, tokens: int, d: int, experts: int, skew: float, step: int) -> torch.Tensor:
    """Tokens drawn from ``experts`` clusters (cluster e ~ p_e ∝ 1/(e+1)^skew; skew 0 is uniform)."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    p = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** skew
    cluster = torch.multinomial(p / p.sum(), tokens, replacement=True, generator=g)
    centers = torch.eye(experts, d) * 4.0
    return centers[cluster] + 0.5 * torch.randn(tokens, d, generator=g)


def steer_router(moe: MoE, d: int) -> None:
    with torch.no_grad():
        moe.router.weight.copy_(torch.eye(moe.num_experts, d) + 0.05 * torch.randn(moe.num_experts, d))


MODES = ("fssdp", "fssdp_remat", "fssdp_load_aware", "expert_parallel")


def make_sharding(mode: str, stats: CollectiveStats, cfg: dict):
    row_bytes = (cfg["d"] * 2 * cfg["h"] + cfg["h"] * cfg["d"]) * 4
    if mode == "fssdp":
        return FSSDP(stats=stats)
    if mode == "fssdp_remat":
        return FSSDP(rematerialize=True, stats=stats)
    if mode == "fssdp_load_aware":
        return FSSDP(
            stats=stats, replica_memory_bytes=cfg["replica_rows"] * row_bytes, window=cfg["warmup"], hot_factor=1.25
        )
    return ExpertParallel(stats=stats)


def proc_status_kib(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last reset) of this process, KiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (``echo 5 > /proc/self/clear_refs``), so the peak is the steps' own."""
    Path("/proc/self/clear_refs").write_text("5")


def comm_worker(
    rank: int, world: int, port: int, cfg: dict, mode: str, skew: float, tokens: int, out_path: str
) -> None:
    """One (mode, routing, tokens) measurement in fresh processes, so peak RSS is this mode's own."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    d, h, experts = cfg["d"], cfg["h"], cfg["experts"]
    stats = CollectiveStats()
    torch.manual_seed(0)
    moe = MoE(d, h, experts, cfg["top_k"], sharding=make_sharding(mode, stats, cfg))
    steer_router(moe, d)
    opt = torch.optim.Adam(moe.parameters(), lr=1e-4)
    rss0 = proc_status_kib("VmRSS")
    reset_peak_rss()
    for step in range(cfg["warmup"] + cfg["steps"]):
        if step == cfg["warmup"]:
            if mode == "fssdp_load_aware":
                moe.experts.rebalance(opt)
            stats.reset()
            dist.barrier()
            t0 = time.perf_counter()
        x = routed_inputs(rank, tokens, d, experts, skew, step)
        y, aux = moe(x)
        (y.square().mean() + aux.loss).backward()
        sync_dense_grads(moe)
        opt.step()
        opt.zero_grad()
        finish_step(moe, opt)
    dist.barrier()
    seconds = (time.perf_counter() - t0) / cfg["steps"]
    shard = moe.experts.shard
    peak = proc_status_kib("VmHWM")
    mine = {
        "bytes_sent": stats.bytes_sent / cfg["steps"],
        "bytes_received": stats.bytes_received / cfg["steps"],
        "meta_bytes": stats.total("meta_bytes") / cfg["steps"],
        "seconds": seconds,
        "expert_state_bytes": shard.numel() * shard.element_size() * 3,  # params + Adam exp_avg + exp_avg_sq
        "local_rows": shard.shape[0],
        "replicas": len(getattr(moe.experts, "placement").replicas),
        "rss_before_steps_mib": rss0 / 1024,
        "peak_rss_growth_mib": (peak - rss0) / 1024,
        "peak_rss_mib": peak / 1024,
    }
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        Path(out_path).write_text(json.dumps(everyone))
    dist.destroy_process_group()


def communication(cfg: dict) -> list[dict]:
    out = HERE / "out" / "moe_comm_rank_records.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for tokens in cfg["tokens"]:
        for skew in cfg["skews"]:
            for mode in MODES:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                args = (cfg["world"], port, cfg, mode, skew, tokens, str(out))
                mp.start_processes(comm_worker, args=args, nprocs=cfg["world"], start_method="spawn")
                ranks = json.loads(out.read_text())
                rows.append({
                    "tokens/rank": tokens,
                    "routing": "uniform" if skew == 0 else f"zipf(s={skew})",
                    "mode": mode,
                    "MiB sent/step/rank (mean)": (
                        sum(x["bytes_sent"] + x["meta_bytes"] for x in ranks) / len(ranks) / 2**20
                    ),
                    "MiB received/step (max rank)": max(x["bytes_received"] for x in ranks) / 2**20,
                    "step s (slowest rank)": max(x["seconds"] for x in ranks),
                    "expert rows/rank (max)": max(x["local_rows"] for x in ranks),
                    "replicated experts": ranks[0]["replicas"],
                    "expert state MiB/rank (max)": max(x["expert_state_bytes"] for x in ranks) / 2**20,
                    "RSS before steps MiB (max rank)": max(x["rss_before_steps_mib"] for x in ranks),
                    "peak RSS in steps MiB (max rank)": max(x["peak_rss_mib"] for x in ranks),
                    "peak growth over pre-step RSS MiB (max)": max(x["peak_rss_growth_mib"] for x in ranks),
                })  # fmt: skip
                print(rows[-1], flush=True)
    return rows


def table(rows: list[dict]) -> str:
    keys = list(rows[0])
    fmt = lambda v: (f"{v:,.2f}" if v == 0 or abs(v) >= 0.01 else f"{v:.2e}") if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description="MoE throughput and FSSDP vs expert-parallel communication")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--skip-comm", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--device", default="cpu", help="device of the throughput part (cuda: bf16, with GFLOP/s vs matmul peak)"
    )
    p.add_argument("--skip-throughput", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
        tp = [dict(tokens=512, d=64, h=128, experts=8, top_k=2, reps=3)]
        comm = dict(
            world=4, d=32, h=64, experts=8, top_k=2, tokens=[256], steps=2, warmup=2, replica_rows=2, skews=[0.0, 1.2]
        )
    else:
        tp = [dict(tokens=2048, d=256, h=512, experts=8, top_k=2, reps=3),
              dict(tokens=2048, d=256, h=512, experts=64, top_k=2, reps=3),
              dict(tokens=2048, d=256, h=512, experts=64, top_k=8, reps=3)]  # fmt: skip
        comm = dict(
            world=4,
            d=128,
            h=256,
            experts=16,
            top_k=2,
            tokens=[2048, 8192],
            steps=3,
            warmup=2,
            replica_rows=4,
            skews=[0.0, 1.2],
        )
    if args.device.startswith("cuda") and not args.quick:  # GPU-sized blocks, bf16
        tp = [
            dict(tokens=t, d=1024, h=2048, experts=e, top_k=k, reps=10)
            for t in (8192, 32768)
            for e, k in ((8, 2), (64, 8))
        ]
    report = {
        "torch": torch.__version__,
        "threads": args.threads,
        "throughput": [],
        "communication": [],
        "comm_config": comm,
    }
    out = HERE / "out" / "moe.json"
    earlier = json.loads(out.read_text()) if out.exists() else {}
    if args.skip_throughput:  # keep the throughput part of an earlier run
        report["throughput"] = earlier.get("throughput", [])
    for cfg in [] if args.skip_throughput else tp:
        rows = throughput(cfg["tokens"], cfg["d"], cfg["h"], cfg["experts"], cfg["top_k"], cfg["reps"], args.device)
        report["throughput"] += rows
        print(table(rows), flush=True)
    if report["throughput"]:
        print(f"forward+backward on {args.device}, tokens/s\n" + table(report["throughput"]))
    if not args.skip_comm:
        report["communication"] = communication(comm)
        print(f"\nworld size {comm['world']} gloo, per training step ({comm})\n" + table(report["communication"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.skip_comm:  # keep the communication part of an earlier full run
        report["communication"] = earlier.get("communication", [])
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
