"""Whole Hugging Face MoE models, HF's default experts implementation against the same model after
``replace_moe_blocks``: training step time (forward + backward + AdamW), same weights, same inputs.

Families: Mixtral, Qwen3-MoE, OLMoE and a DeepSeek-V3-style model (sigmoid router, groups, a shared expert), each
at a small width (d 256, E 8-16, top-2..4) and a realistic one (d 512, E 64, top-8); 2 layers, 2,048 tokens a step,
random weights (nothing downloaded). Rounds alternate HF and swapped (the order flips each round), after one
warm-up step each (the swapped model measures its grouped-matmul backends in its first step: that step is reported
apart, as ``first_step_ms``). Reported: median step ms, tokens/s, and the median of the per-round ratios
swapped / HF, in wall time and in this process's CPU time (``time.process_time``: on a machine shared with other
jobs, wall time mostly measures the other jobs; CPU time measures the work, and with ``--threads 1`` spins no
waiting threads). The first step's losses of the two models are checked equal (atol 1e-4).

    python benchmarks/moe_hf_swap.py                              # CPU fp32, every family and width
    python benchmarks/moe_hf_swap.py --families qwen3_moe --widths small --rounds 3
    python benchmarks/moe_hf_swap.py --device cuda --dtype bf16   # GPU check; prints MFU
    python benchmarks/moe_hf_swap.py --dist                       # + 2 gloo ranks: DDP vs FSSDP vs ExpertParallel

``--dist`` spawns 2 gloo processes per (family, width) and times a training step of the swapped model under plain
DDP (every expert replicated, gradients all-reduced), FSSDP and ExpertParallel (expert shards outside DDP, the
dense part under DDP), with the bytes each rank sends per step: DDP's all-reduce payload (counted by a comm hook)
times ``2 (W - 1) / W`` (what a ring all-reduce sends), plus the sparse collectives' counted bytes. Writes
``benchmarks/out/moe_hf_swap.json`` and, with ``--backend-table PATH``, the measured backend choices
(``sparsetrain.moe.autotune``; load them with ``SPARSETRAIN_MOE_BACKENDS=PATH``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sparsetrain.moe import autotune  # noqa: E402

WIDTHS = {  # d_model, expert hidden, experts, top-k (Mixtral: 8 experts top-2 at the small width)
    "small": dict(d=256, h=256, experts=16, top_k=4),
    "wide": dict(d=512, h=256, experts=64, top_k=8),
}
FAMILIES = ("mixtral", "qwen3_moe", "olmoe", "deepseek_v3")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
VOCAB = 2048


def build(family: str, width: str, seed: int = 0):
    """An HF causal LM of ``family`` at ``width`` with random weights (HF's initialization from ``seed``)."""
    import transformers as tf

    w = WIDTHS[width]
    d, h, e, k = w["d"], w["h"], w["experts"], w["top_k"]
    base = dict(vocab_size=VOCAB, hidden_size=d, num_hidden_layers=2, num_attention_heads=d // 64,
                num_key_value_heads=d // 128, max_position_embeddings=4096, eos_token_id=None, pad_token_id=None,
                bos_token_id=None)  # fmt: skip
    if family == "mixtral":
        if width == "small":
            e, k = 8, 2
        cls, cfg = tf.MixtralForCausalLM, tf.MixtralConfig(**base, intermediate_size=h, num_local_experts=e,
                                                            num_experts_per_tok=k)
    elif family == "qwen3_moe":
        cls, cfg = tf.Qwen3MoeForCausalLM, tf.Qwen3MoeConfig(**base, intermediate_size=4 * d, moe_intermediate_size=h,
                                                              num_experts=e, num_experts_per_tok=k, head_dim=64,
                                                              norm_topk_prob=True)  # fmt: skip
    elif family == "olmoe":
        cls, cfg = tf.OlmoeForCausalLM, tf.OlmoeConfig(**base, intermediate_size=h, num_experts=e,
                                                        num_experts_per_tok=k)
    elif family == "deepseek_v3":
        base["num_key_value_heads"] = base["num_attention_heads"]
        cls, cfg = tf.DeepseekV3ForCausalLM, tf.DeepseekV3Config(
            **base, intermediate_size=4 * d, moe_intermediate_size=h, n_routed_experts=e, num_experts_per_tok=k,
            n_shared_experts=1, n_group=4, topk_group=2, first_k_dense_replace=0, q_lora_rank=None,
            kv_lora_rank=d // 2, qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=64, routed_scaling_factor=2.5,
            norm_topk_prob=True)  # fmt: skip
    else:
        raise SystemExit(f"unknown family {family!r}; use one of {FAMILIES}")
    torch.manual_seed(seed)
    return cls(cfg)


def batch(tokens: int, seq: int, seed: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (tokens // seq, seq), generator=g).to(device)


def flops_per_step(model, tokens: int) -> float:
    """``6 * active parameters * tokens`` (expert tables count ``top_k / E`` of their size; embeddings excluded)."""
    from sparsetrain.moe.hf import HFMoEBlock

    active = 0.0
    for m in model.modules():
        if isinstance(m, HFMoEBlock):
            moe = m.moe
            active += (moe.experts.w_in.numel() + moe.experts.w_out.numel()) * moe.top_k / moe.num_experts
    expert_ids = {id(p) for m in model.modules() if isinstance(m, HFMoEBlock) for p in m.moe.experts.parameters()}
    emb = model.get_input_embeddings().weight
    active += sum(p.numel() for p in model.parameters() if id(p) not in expert_ids and p is not emb)
    return 6.0 * active * tokens


class Trainer:
    """One model, its AdamW, and a timed training step."""

    def __init__(self, model, device: str, dtype: torch.dtype) -> None:
        self.model = model.to(device, dtype).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, foreach=True)
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step(self, ids: torch.Tensor) -> tuple[float, float, float]:
        """``(wall seconds, process CPU seconds, loss)`` of one training step."""
        self.sync()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.sync()
        return time.perf_counter() - t0, time.process_time() - c0, float(loss.detach())


def compare(family: str, width: str, args) -> dict:
    """HF's default against the swapped model, alternating rounds."""
    from sparsetrain.moe.hf import replace_moe_blocks

    hf = build(family, width)
    impl = getattr(hf.config, "_experts_implementation", None)
    swapped = replace_moe_blocks(copy.deepcopy(hf), backend=args.backend)
    dtype = DTYPES[args.dtype]
    a, b = Trainer(hf, args.device, dtype), Trainer(swapped, args.device, dtype)
    ids = [batch(args.tokens, args.seq, s, args.device) for s in range(args.rounds + 1)]
    first_hf, _, loss_hf = a.step(ids[0])
    first_sw, _, loss_sw = b.step(ids[0])
    if abs(loss_hf - loss_sw) > (1e-4 if dtype == torch.float32 else 5e-2) * max(1.0, abs(loss_hf)):
        raise SystemExit(f"{family}/{width}: first-step losses differ: HF {loss_hf:.6f}, swapped {loss_sw:.6f}")
    t_hf, t_sw, c_hf, c_sw = [], [], [], []
    for r in range(args.rounds):
        pair = [(a, t_hf, c_hf), (b, t_sw, c_sw)] if r % 2 == 0 else [(b, t_sw, c_sw), (a, t_hf, c_hf)]
        for trainer, wall, cpu in pair:
            w, c, _ = trainer.step(ids[r + 1])
            wall.append(w)
            cpu.append(c)
    ratios = [s / h for s, h in zip(t_sw, t_hf)]
    cpu_ratios = [s / h for s, h in zip(c_sw, c_hf)]
    w = WIDTHS[width]
    experts, top_k = (8, 2) if (family, width) == ("mixtral", "small") else (w["experts"], w["top_k"])
    row = {
        "family": family, "width": width, "d": w["d"], "h": w["h"], "experts": experts, "top_k": top_k,
        "tokens": args.tokens, "hf_experts_implementation": impl,
        "hf_ms": statistics.median(t_hf) * 1e3, "swapped_ms": statistics.median(t_sw) * 1e3,
        "ratio": statistics.median(ratios), "ratio_of_medians": statistics.median(t_sw) / statistics.median(t_hf),
        "hf_cpu_ms": statistics.median(c_hf) * 1e3, "swapped_cpu_ms": statistics.median(c_sw) * 1e3,
        "cpu_ratio": statistics.median(cpu_ratios), "round_ratios": ratios, "round_cpu_ratios": cpu_ratios,
        "first_step_ms_hf": first_hf * 1e3, "first_step_ms_swapped": first_sw * 1e3,
        "loss_hf": loss_hf, "loss_swapped": loss_sw,
    }  # fmt: skip
    row["hf_tok_s"] = args.tokens / (row["hf_ms"] / 1e3)
    row["swapped_tok_s"] = args.tokens / (row["swapped_ms"] / 1e3)
    if args.device == "cuda":
        flops = flops_per_step(swapped, args.tokens)
        row["mfu_hf"] = flops / (row["hf_ms"] / 1e3) / (args.peak_tflops * 1e12)
        row["mfu_swapped"] = flops / (row["swapped_ms"] / 1e3) / (args.peak_tflops * 1e12)
    return row


# --------------------------------------------------------------------------- --dist
DIST_MODES = ("ddp", "fssdp", "expert_parallel")


def _ddp(model, ignore: list[str], counter: list[int]):
    from torch.nn.parallel import DistributedDataParallel

    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignore)
    ddp = DistributedDataParallel(model)

    def hook(state, bucket):  # count what DDP hands to all-reduce, then do what DDP does
        buf = bucket.buffer()
        counter[0] += buf.numel() * buf.element_size()
        fut = dist.all_reduce(buf.div_(dist.get_world_size()), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, hook)
    return ddp


def dist_worker(rank: int, world: int, port: int, family: str, width: str, mode: str, args, out: str) -> None:
    """One (family, width, mode) on ``world`` gloo ranks; rank 0 writes the per-rank records."""
    from sparsetrain.collective import CollectiveStats
    from sparsetrain.moe import FSSDP, ExpertParallel, finish_step, sharded_parameter_names
    from sparsetrain.moe.hf import replace_moe_blocks

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, args.threads // world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    stats = CollectiveStats()
    sharding = {"ddp": None, "fssdp": FSSDP(stats=stats), "expert_parallel": ExpertParallel(stats=stats)}[mode]
    model = replace_moe_blocks(build(family, width), sharding=sharding, backend=args.backend)
    counter = [0]
    ddp = _ddp(model, sharded_parameter_names(model), counter)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    local = args.tokens // world
    times = []
    for step in range(1 + args.dist_steps):
        ids = batch(local, min(args.seq, local), 100 * rank + step, "cpu")
        dist.barrier()
        if step == 1:
            stats.reset()
            counter[0] = 0
        t0 = time.perf_counter()
        ddp(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        finish_step(model, opt)
        times.append(time.perf_counter() - t0)
    steps = args.dist_steps
    ring = 2 * (world - 1) / world
    mine = {
        "step_s": statistics.median(times[1:]),
        "allreduce_bytes_sent": counter[0] * ring / steps,
        "sparse_bytes_sent": (stats.bytes_sent + stats.total("meta_bytes")) / steps,
        "expert_params_here": sum(p.numel() for n, p in model.named_parameters() if "moe.experts" in n),
    }
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        Path(out).write_text(json.dumps(everyone))
    dist.destroy_process_group()


def distributed(family: str, width: str, args) -> list[dict]:
    out = HERE / "out" / "moe_hf_swap_rank_records.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in DIST_MODES:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(dist_worker, args=(2, port, family, width, mode, args, str(out)), nprocs=2,
                           start_method="spawn")  # fmt: skip
        ranks = json.loads(out.read_text())
        sent = [r["allreduce_bytes_sent"] + r["sparse_bytes_sent"] for r in ranks]
        rows.append({"family": family, "width": width, "mode": mode, "ranks": 2,
                     "step_ms (slowest rank)": max(r["step_s"] for r in ranks) * 1e3,
                     "MiB sent/step/rank": statistics.mean(sent) / 2**20,
                     "of which all-reduce MiB": statistics.mean(r["allreduce_bytes_sent"] for r in ranks) / 2**20,
                     "expert params/rank (M)": max(r["expert_params_here"] for r in ranks) / 1e6})  # fmt: skip
        print(rows[-1], flush=True)
    base = rows[0]["step_ms (slowest rank)"]
    for r in rows:
        r["step vs DDP"] = r["step_ms (slowest rank)"] / base
    return rows


def markdown(rows: list[dict], keys: list[str]) -> str:
    def cell(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--widths", nargs="+", default=list(WIDTHS), choices=list(WIDTHS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, choices=list(DTYPES), help="default: fp32 on CPU, bf16 on CUDA")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--backend", default=None, help="force the swapped layers' grouped-matmul backend")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak for MFU (H100/H200 SXM: 989)")
    p.add_argument("--dist", action="store_true", help="also 2 gloo ranks: DDP vs FSSDP vs ExpertParallel")
    p.add_argument("--dist-only", action="store_true")
    p.add_argument("--dist-steps", type=int, default=3)
    p.add_argument("--backend-table", default=None, help="write the measured backend choices here (JSON)")
    p.add_argument("--out", default=str(HERE / "out" / "moe_hf_swap.json"))
    args = p.parse_args()
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    torch.set_num_threads(args.threads)
    rows, dist_rows = [], []
    for width in args.widths:
        for family in args.families:
            if not args.dist_only:
                rows.append(compare(family, width, args))
                r = rows[-1]
                mfu = f"  MFU {r['mfu_hf']:.1%} -> {r['mfu_swapped']:.1%}" if "mfu_hf" in r else ""
                print(f"{family:12s} {width:6s} HF({r['hf_experts_implementation']}) {r['hf_ms']:8.1f} ms  swapped "
                      f"{r['swapped_ms']:8.1f} ms  ratio {r['ratio']:.3f}  (tok/s {r['hf_tok_s']:.0f} -> "
                      f"{r['swapped_tok_s']:.0f}); CPU time {r['hf_cpu_ms']:.0f} -> {r['swapped_cpu_ms']:.0f} ms, "
                      f"ratio {r['cpu_ratio']:.3f}{mfu}", flush=True)  # fmt: skip
            if args.dist or args.dist_only:
                dist_rows += distributed(family, width, args)
    keys = ["family", "width", "d", "experts", "top_k", "hf_experts_implementation", "hf_ms", "swapped_ms",
            "hf_tok_s", "swapped_tok_s", "ratio", "hf_cpu_ms", "swapped_cpu_ms", "cpu_ratio"]
    keys += ["mfu_hf", "mfu_swapped"] if args.device == "cuda" else []
    if rows:
        print(markdown(rows, keys))
    if dist_rows:
        print(markdown(dist_rows, list(dist_rows[0])))
    print("backend choices:", json.dumps({k: v["backend"] for k, v in autotune.table().items()}))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps({"args": vars(args), "rows": rows, "dist": dist_rows,
                               "backends": autotune.table()}, indent=1))  # fmt: skip
    os.replace(tmp, args.out)
    if args.backend_table:
        autotune.save_table(args.backend_table)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
