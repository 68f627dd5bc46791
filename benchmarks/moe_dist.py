"""FSSDP with the dense part under sync_dense_grads / DDP / FSDP2 on 2 gloo ranks vs one process:
step time and DCP checkpoint size of ``examples/moe_lm.py`` (HF Mixtral or TinyLM), all in one run.

    python benchmarks/moe_dist.py --model mixtral --steps 30

Each row is a fresh ``python -m torch.distributed.run`` (or plain ``python``) of the example; the step time is the
median over steps after ``--warmup``, rank 0's wall clock (global batch fixed, so 2 ranks do half the
tokens each). Losses are checked equal to the single process's (1e-5 relative). Writes
``benchmarks/out/moe_dist.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "moe_lm.py"
LINE = re.compile(r"step\s+(\d+)\s+loss\s+([0-9.]+)\s+([0-9.]+) ms")

RUNS = [  # (name, ranks, example flags)
    ("1 process, unsharded", 1, ["--sharding", "none"]),
    ("2 ranks FSSDP + sync_dense_grads", 2, ["--sharding", "fssdp", "--dp", "sync"]),
    ("2 ranks FSSDP + DDP", 2, ["--sharding", "fssdp", "--dp", "ddp"]),
    ("2 ranks FSSDP + FSDP2", 2, ["--sharding", "fssdp", "--dp", "fsdp2"]),
]


def folder_bytes(path: Path) -> tuple[int, int]:
    """Total bytes of a checkpoint folder and of its largest file."""
    sizes = [f.stat().st_size for f in path.rglob("*") if f.is_file()]
    return sum(sizes), max(sizes, default=0)


def run(name: str, ranks: int, flags: list[str], args, tmp: Path) -> dict:
    ckpt = tmp / re.sub(r"\W+", "_", name)
    cmd = (
        [sys.executable, str(EXAMPLE)]
        if ranks == 1
        else [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), str(EXAMPLE)]
    )
    cmd += ["--model", args.model, "--steps", str(args.steps), "--batch", str(args.batch), "--save", str(ckpt), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if out.returncode != 0:
        raise SystemExit(f"{name}: exit {out.returncode}\n{out.stderr[-3000:]}")
    steps = [(int(s), float(loss), float(ms)) for s, loss, ms in LINE.findall(out.stdout)]
    total, largest = folder_bytes(ckpt)
    return {
        "name": name, "ranks": ranks, "losses": [loss for _, loss, _ in steps],
        "step_ms": statistics.median(ms for s, _, ms in steps if s >= args.warmup),
        "checkpoint_bytes": total, "largest_file_bytes": largest,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mixtral", choices=["mixtral", "tiny"])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "moe_dist.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(name, ranks, flags, args, Path(tmp)) for name, ranks, flags in RUNS]
    base = rows[0]
    print(
        f"{'run':36s} {'step ms':>8s} {'vs 1 proc':>9s} {'ckpt KiB':>9s} {'largest file KiB':>17s} "
        f"{'max loss rel diff':>18s}"
    )
    for r in rows:
        diff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], base["losses"]))
        r["max_rel_loss_diff"] = diff
        r["step_time_ratio"] = r["step_ms"] / base["step_ms"]
        print(f"{r['name']:36s} {r['step_ms']:8.1f} {r['step_time_ratio']:9.2f} {r['checkpoint_bytes'] / 1024:9.1f} "
              f"{r['largest_file_bytes'] / 1024:17.1f} {diff:18.1e}")  # fmt: skip
        if diff > 1e-5:
            raise SystemExit(f"{r['name']}: losses differ from the single process's by {diff:.2e} (relative)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"model": args.model, "steps": args.steps, "batch": args.batch, "rows": rows}, indent=1)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
