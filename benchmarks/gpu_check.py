"""The one device check (issue 45): every open GPU question answered by one command, in order, each section under its
own time limit, about 8 minutes on an H200, one JSON and one Markdown table.

On a GPU machine (python 3.12, torch 2.11+cu130, no torch-sparse: PyG's peer from torch-scatter / torch-sparse
wheels built for that torch, put into the ignored folder ``.peer`` of the checkout, WHEELS being wherever they are)::

    mkdir -p .peer && cp WHEELS/*.whl .peer/
    PYTHONUNBUFFERED=1 python benchmarks/gpu_check.py --out $OUT/check --peer-src .peer

On a CPU, under Numba's CUDA simulator on tiny sizes (what CI keeps working)::

    python benchmarks/gpu_check.py --out /tmp/check --simulate

Sections (seconds of budget on an H200):

1. ``tests`` (80): ``pytest -m gpu``, the pass/fail/skip counts and the failures named.
2. ``race`` (30): the race test (a device sleep before each captured batch, the pinned ring full, every batch against
   the eager sampler) and the eager step's host syncs per step (``set_sync_debug_mode``); simulated: the captured
   batches' and the workspace ring's checks under the simulator.
3. ``data`` (70): the products-scale synthetic graph (2.4M nodes, 120M edges), made once under ``--data``.
4. ``sampling`` (50): eager / padded / captured node batches: wall against GPU-busy, launches, copies, syncs
   (``gpu_report.py``'s section).
5. ``epoch`` (130): the step timeline of the CLI path, eager / ``--step static`` / ``--step static --fuse-last-hop``,
   and the drop-in, with PyG's ``NeighborLoader`` (8 workers, ``pin_memory``) as the peer in the same run
   (``gpu_report.py``'s section).
6. ``pinned_static`` (40): ``--step static --features pinned`` (the step captured, the loader thread filling its
   buffers outside the capture): ms a step, stall.
7. ``sink`` (15): a padded block of products proportions, its padded edges on one sink row (before) against spread
   over the padding rows (now): largest CSR row, SpMM forward + backward ms.
8. ``gather`` (40): the zero-copy gather against pinned memcpy per row size (``gpu_report.py``'s section), and for
   188-byte rows the aligned warp kernel against the word kernel, end to end.
9. ``moe`` (25): the MoE layer against Hugging Face's ``grouped_mm`` experts, fraction of bf16 peak.

Writes ``gpu_check.json`` and ``gpu_check.md`` into ``--out`` after every section (a run cut short keeps what it
finished); each section's output goes to ``--logs`` (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import gpu_report  # noqa: E402

SECTIONS = {"tests": 80, "race": 30, "data": 70, "sampling": 50, "epoch": 130, "pinned_static": 40, "sink": 15,
            "gather": 40, "moe": 25}
"""Each section's time limit in seconds on an H200 (in order); 480 in all."""
SIMULATE_FACTOR = 2  # a simulated section's limit: its budget times this (2 shared CPU cores, tiny sizes)


# --------------------------------------------------------------------------- sections of this check
def section_race(args) -> dict:
    """The race test and the eager step's host syncs on a GPU; under the simulator the captured batches' checks and the
    workspace ring's (a failed batch holds its slot)."""
    if args.device == "cuda":
        tests = ["tests/test_captured_sampling.py::test_captured_batches_stay_right_when_the_host_runs_ahead",
                 "tests/test_captured_sampling.py::test_captured_gpu_batches_equal_eager_batches",
                 "tests/test_host_syncs.py", "tests/test_workspace_ring.py"]
        return _pytest(tests, ["-m", "gpu or not gpu"], args)
    checks = ["check_captured_batches_replay_the_eager_batches", "check_a_failed_capture_is_an_error"]
    done = subprocess.run([sys.executable, "tests/cudasim_sampling.py", *checks], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"},
                          timeout=SECTIONS["race"] * SIMULATE_FACTOR)
    checks = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"error": done.stderr[-500:]}
    ring = _pytest(["tests/test_workspace_ring.py"], [], args)
    return {"simulated": {k: v if v == "ok" else v.strip().splitlines()[-1] for k, v in checks.items()},
            "workspace_ring": ring}


def _pytest(tests: list[str], extra: list[str], args) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, *tests]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=SECTIONS["tests"] * 2)
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:]
    failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"exit_code": done.returncode, "summary": tail, "failures": failed[:10]}


def section_tests(args) -> dict:
    """``pytest -m gpu`` (``gpu_report.py``'s section); simulated: the gather's simulator checks and the workspace
    ring's tests, instead of a run that would skip every GPU test."""
    if args.device == "cuda":
        return gpu_report.section_tests(args)
    return _pytest(["tests/test_storage_gpu.py", "tests/test_workspace_ring.py"], ["-k", "simulator or slot or entry"],
                   args)


def section_pinned_static(args) -> dict:
    """``sparsetrain train --step static --features pinned`` on the products-scale graph (``--quick``: the tiny one,
    features in memory on a CPU): ms a step over the first ``steps`` steps, capture included, and the stall."""
    import torch

    from sparsetrain.engine.run import train
    from sparsetrain.engine.settings import TrainSettings

    steps = 6 if args.quick else 60
    data = gpu_report._products(args)
    features = "pinned" if args.device == "cuda" else "memory"
    started = time.perf_counter()
    summary = train(TrainSettings(data=str(data), fanouts=gpu_report.FANOUTS, batch_size=gpu_report.BATCH,
                                  hidden=gpu_report.HIDDEN, step="static", features=features, device=args.device,
                                  max_steps=steps, quiet=True))
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {"features": features, "steps": summary["steps"], "train_seconds": summary["seconds"],
            "ms_per_step": 1e3 * summary["seconds"] / max(summary["steps"], 1), "stall_fraction":
            summary["stall_fraction"], "wall_seconds_with_setup": seconds}


def section_sink(args) -> dict:
    """The outermost padded block at products proportions (``--quick``: 1/100), its padded edges on one sink row
    against spread over the padding rows (``padding_row``): the largest CSR row and SpMM forward + backward."""
    import warnings

    import torch

    from sparsetrain.sampling.cuda.padded import padding_row

    scale = 100 if args.quick else 1
    num_dst, real_dst = 180_225 // scale, 150_000 // scale
    num_src, real_src = 1_081_345 // scale, 800_000 // scale
    edges, real = 901_120 // scale, 700_000 // scale
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    real_dst_ids = torch.sort(torch.randint(0, real_dst, (real,), generator=gen)).values
    real_src_ids = torch.randint(0, real_src, (real,), generator=gen)
    k = torch.arange(edges - real)
    layouts = {"sink": (torch.full_like(k, num_src - 1), torch.full_like(k, num_dst - 1)),
               "spread": (padding_row(k, edges - real, real_src, num_src), padding_row(k, edges - real, real_dst,
                                                                                        num_dst))}
    x = torch.randn(num_src, gpu_report.HIDDEN, device=device, requires_grad=True)
    rows = []
    for name, (pad_src, pad_dst) in layouts.items():
        src = torch.cat([real_src_ids, pad_src]).to(device)
        dst = torch.cat([real_dst_ids, pad_dst]).to(device)
        crow = torch.searchsorted(dst, torch.arange(num_dst + 1, device=device))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adj = torch.sparse_csr_tensor(crow, src, torch.ones(edges, device=device), size=(num_dst, num_src))
        largest = int(crow.diff().max())
        rows.append({"padding": name, "largest_row": largest, "ms_fwd_bwd": _time(lambda: _spmm(adj, x), device)})
    return {"block": {"num_dst": num_dst, "num_src": num_src, "edges": edges, "real_edges": real}, "rows": rows,
            "spread_over_sink": rows[1]["ms_fwd_bwd"] / rows[0]["ms_fwd_bwd"]}


def _spmm(adj, x) -> None:
    import torch

    out = torch.sparse.mm(adj, x)
    out.sum().backward()
    x.grad = None


def _time(work, device, reps: int = 10) -> float:
    """Median ms of ``work`` (CUDA events on a GPU)."""
    import statistics

    import torch

    work()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            work()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def section_gather(args) -> dict:
    """``gpu_report.py``'s gather section, then 188-byte rows (47 float32) end to end through ``PinnedFeatures``: the
    aligned warp kernel against the word kernel and pinned memcpy of the same bytes."""
    if args.device != "cuda":
        return {"not_run": "zero-copy gather needs CUDA (the simulator checks run in tests/test_storage_gpu.py)"}
    import torch

    from sparsetrain.storage import PinnedFeatures, cuda_gather

    report = gpu_report.section_gather(args)
    rows, n = (200_000, 50_000) if args.quick else (2_000_000, 700_000)
    table = torch.randn(rows, 47)
    store = PinnedFeatures(table.numpy(), device="cuda", copy=True)
    ids = torch.randint(0, rows, (n,), device="cuda")
    out = torch.empty(n, 47, device="cuda")
    host = torch.empty(n * 47, pin_memory=True)
    dev = torch.empty(n * 47, device="cuda")
    device = torch.device("cuda")
    memcpy_ms = _time(lambda: dev.copy_(host, non_blocking=True), device)
    both = {}
    for aligned in (True, False):
        cuda_gather.ALIGNED = aligned
        both["aligned warp" if aligned else "word per thread"] = _time(lambda: store.gather(ids, out=out), device)
        exact = torch.equal(out.cpu(), table[ids.cpu()])
    cuda_gather.ALIGNED = True
    report["row_188_bytes"] = {"memcpy_ms": memcpy_ms, "exact": exact,
                               **{f"{k}_fraction_of_memcpy": memcpy_ms / v for k, v in both.items()},
                               **{f"{k}_ms": v for k, v in both.items()}}
    return report


RUNNERS = {"tests": section_tests, "race": section_race, "data": gpu_report.section_data,
           "sampling": gpu_report.section_sampling, "epoch": gpu_report.section_epoch,
           "pinned_static": section_pinned_static, "sink": section_sink, "gather": section_gather,
           "moe": gpu_report.section_moe}


# --------------------------------------------------------------------------- the run
def run_section(name: str, args, logs: Path) -> dict:
    """One section in a child process under its own limit: its JSON, or what went wrong in one line."""
    result = logs / f"{name}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--section", name, "--out", str(args.out), "--logs",
           str(logs), "--data", args.data, "--epoch-steps", str(args.epoch_steps)] + (["--simulate"] if args.simulate
                                                                                      else [])
    limit = SECTIONS[name] * (SIMULATE_FACTOR if args.simulate else 1)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    data = gpu_report.run_child(cmd, result, logs / f"{name}.log", limit, env)
    data["budget_seconds"] = limit
    return data


def markdown(report: dict) -> str:
    """One table: a row per section (status, seconds against budget, its headline numbers)."""
    lines = [f"Device check on {report['device']} ({report['date']}, {'simulated' if report['simulate'] else 'GPU'}, "
             f"{report['total_seconds']:.0f} s): `python benchmarks/gpu_check.py"
             f"{' --simulate' if report['simulate'] else ''}`", "",
             "| section | status | s / budget | headline |", "| --- | --- | --- | --- |"]
    for name, sec in report["sections"].items():
        status = "error" if "error" in sec else "not run" if "not_run" in sec else "ok"
        lines.append(f"| {name} | {status} | {sec.get('section_seconds')} / {sec.get('budget_seconds')} | "
                     f"{_headline(name, sec)} |")
    return "\n".join(lines) + "\n"


def _headline(name: str, sec: dict) -> str:
    if "error" in sec:
        return str(sec["error"])[:150]
    if "not_run" in sec:
        return sec["not_run"]
    if name in ("tests",):
        return sec.get("summary", "")
    if name == "race":
        if "simulated" in sec:
            return f"simulated: {sec['simulated']}; ring: {sec['workspace_ring'].get('summary')}"
        return sec.get("summary", "")
    if name == "pinned_static":
        return f"{sec['ms_per_step']:.1f} ms a step ({sec['features']}), stall {sec['stall_fraction']}"
    if name == "sink":
        return "; ".join(f"{r['padding']}: largest row {r['largest_row']}, {r['ms_fwd_bwd']:.2f} ms" for r in
                         sec["rows"])
    if name == "gather" and "row_188_bytes" in sec:
        r = sec["row_188_bytes"]
        return (f"188 B rows: aligned {r['aligned warp_fraction_of_memcpy']:.2f}, word "
                f"{r['word per thread_fraction_of_memcpy']:.2f} of memcpy")
    if name == "epoch":
        return "; ".join(f"{r['path']}: {r['ms_per_step']:.1f} ms" for r in sec.get("rows", []) if "ms_per_step" in r)
    if name == "sampling":
        return "; ".join(f"{r['sampler']}: {_rate_of(r.get('gpu'))} on the GPU" for r in sec.get("rows", []))
    if name == "moe":
        return "; ".join(f"{r['implementation']}: {r['expert_TFLOP_s']:.1f} TFLOP/s"
                         + (f" ({r['fraction_of_bf16_peak']:.2f} of peak)" if r.get("fraction_of_bf16_peak") else "")
                         for r in sec.get("rows", []))
    if name == "data":
        return f"products {sec.get('products_s', 0):.0f} s"
    keys = [k for k in sec if k not in ("section_seconds", "budget_seconds")]
    return ", ".join(keys[:6])


def _rate_of(row) -> str:
    if not isinstance(row, dict) or "edges_per_s" not in row:
        return str((row or {}).get("error", "-"))[:60] if isinstance(row, dict) else "-"
    return f"{row['edges_per_s'] / 1e6:.0f}M edges/s"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.md")
    p.add_argument("--logs", default=None, help="folder for each section's log and JSON (default: a temporary one)")
    p.add_argument("--data", default=os.environ.get("SPARSETRAIN_BENCH_DATA", str(Path(tempfile.gettempdir()) /
                                                                                    "sparsetrain-bench")),
                   help="where the synthetic datasets are made")
    p.add_argument("--simulate", action="store_true", help="on the CPU under the CUDA simulator, tiny sizes")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--epoch-steps", type=int, default=40, help="timed steps of the epoch section's rows")
    p.add_argument("--peer-src", default=None, help="folder of torch_scatter/torch_sparse wheels for PyG's peer")
    p.add_argument("--section", choices=list(SECTIONS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="gpu_check-"))
    logs.mkdir(parents=True, exist_ok=True)
    # the fields gpu_report's sections read
    args.quick, args.rounds = args.simulate, 1 if args.simulate else 3
    if args.simulate:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        args.device = "cpu"
    else:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.section:  # child: one section
        gpu_report.BUDGET_S.update(SECTIONS)  # (the tests section sizes its pytest run by it)
        (logs / f"{args.section}.json").write_text(json.dumps(RUNNERS[args.section](args), indent=1, default=str))
        return 0
    if args.peer_src and not args.simulate:
        _install_peer(Path(args.peer_src))
    start = time.perf_counter()
    report = {"device": gpu_report._device_name(args), "date": time.strftime("%Y-%m-%d"), "simulate": args.simulate,
              "total_seconds": 0.0, "sections": {}}
    for name in args.only.split(","):
        print(f"[{time.perf_counter() - start:6.0f} s] {name} ...", flush=True)
        report["sections"][name] = sec = run_section(name, args, logs)
        print(f"         {'error: ' + sec['error'] if 'error' in sec else 'done'} ({sec['section_seconds']} s)",
              flush=True)
        report["total_seconds"] = time.perf_counter() - start
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        (out / "gpu_check.md").write_text(markdown(report))
    print(markdown(report))
    print(f"wrote {out / 'gpu_check.md'} and {out / 'gpu_check.json'}; logs in {logs}")
    return 0


def _install_peer(folder: Path) -> None:
    """PyG's peer sampler from carried wheels, into a folder on the path of the sections (no registry there)."""
    wheels = sorted(str(w) for w in folder.glob("*.whl"))
    if not wheels:
        return
    target = Path(tempfile.gettempdir()) / "gpu_check-peer"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
                    *wheels], check=False)
    os.environ["PYTHONPATH"] = f"{target}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"


if __name__ == "__main__":
    sys.exit(main())
