"""Partitioned training against the replicated-topology runs, in one run: the same graph and flags trained three ways
through the CLI, as a user would start them.

- ``single``: one process, ``sparsetrain train --data DATA`` (the whole topology and feature table);
- ``sharded``: W ranks, ``--features sharded`` (every rank holds the whole topology, features sharded);
- ``partitioned``: W ranks on the partitioned folder (each rank holds its part: owned in-edges, id maps, owned rows
  and a cache of halo rows).

W is the folder's part count. The ranks are this script's child processes with torchrun's environment (RANK,
WORLD_SIZE, MASTER_ADDR/PORT, OMP_NUM_THREADS=1 as torchrun sets it), so ``os.wait4`` gives each rank's peak RSS.
Per way: steps/s of a rank and seeds/s of all ranks (training epochs after the first, from rank 0's metrics log;
the first epoch's seconds apart), test accuracy at the best val epoch, per-rank peak RSS, per-rank topology bytes (a
part's indptr + indices + id maps, else the whole CSC), the halo's size against the owned nodes, and rank 0's halo
cache hit rate and feature exchange per step. Prints a markdown table, writes JSON.

    python benchmarks/dist_train.py DATA PARTITIONED_DIR --epochs 2 --fanout 10,5 --batch-size 1024 \\
        --json dist_train.json [any other `sparsetrain train` flag, e.g. --lr 0.003]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("single", "sharded", "partitioned")
PART_TOPOLOGY = ("indptr", "indices", "node.*.local_to_global", "node.*.halo_owner", "edge.*.col_start")
"""A part's topology files (glob patterns, one per kind): its CSC over local ids and the maps, per node or edge
type, that tie it to the global graph."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _npy_bytes(folder: Path, names) -> int:
    return sum(np.load(path, mmap_mode="r").nbytes for name in names for path in sorted(folder.glob(f"{name}.npy")))


def topology_bytes(data: Path, parts: Path, way: str, ranks: int) -> list[int]:
    """Per rank: the topology arrays it opens (a part's CSC and id maps, else the whole graph's CSC)."""
    if way == "partitioned":
        return [_npy_bytes(parts / f"part-{r}", PART_TOPOLOGY) for r in range(ranks)]
    return [_npy_bytes(data, ("indptr", "indices"))] * ranks


def launch(data: Path, ranks: int, flags: list[str], out: Path, timeout: float) -> dict:
    """Start ``ranks`` processes of ``sparsetrain train`` (torchrun's environment when more than one), wait for all;
    returns wall seconds and each rank's peak RSS. A rank that fails ends the others."""
    port = _free_port()
    procs = []
    for rank in range(ranks):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        if ranks > 1:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            env.setdefault("OMP_NUM_THREADS", "1")
        cmd = [sys.executable, "-m", "sparsetrain", "train", "--data", str(data), *flags, "--quiet",
               "--summary-json", str(out / "summary.json"), "--metrics-log", str(out / "log.jsonl")]
        with open(out / f"stderr-{rank}.txt", "w") as err:
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err))
    start, rss, codes = time.perf_counter(), {}, {}
    while len(codes) < ranks:
        for rank, proc in enumerate(procs):
            if rank in codes:
                continue
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = codes[rank] = os.waitstatus_to_exitcode(status)
                rss[rank] = usage.ru_maxrss * 1024  # KiB on Linux
        failed = any(codes.values()) or time.perf_counter() - start > timeout
        if failed:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            for proc in procs:
                proc.wait()
            tail = "".join((out / f"stderr-{r}.txt").read_text()[-1500:] for r in range(ranks))
            raise SystemExit(f"{out.name}: a rank failed or timed out ({codes}):\n{tail}")
        time.sleep(0.2)
    return {"wall_s": round(time.perf_counter() - start, 1), "peak_rss": [rss[r] for r in range(ranks)]}


def throughput(epochs: list[dict], steps_per_epoch: int, train_seeds: int) -> dict:
    """Steps/s of a rank and seeds/s of all ranks over the training epochs after the first (the first also pays
    for compilation and a cold page cache), over the one epoch when there is one."""
    timed = epochs[1:] or epochs
    seconds = sum(r["seconds"] for r in timed)
    return {"steps_per_s": steps_per_epoch * len(timed) / seconds, "seeds_per_s": train_seeds * len(timed) / seconds}


def measure(way: str, data: Path, parts: Path, ranks: int, flags: list[str], out: Path, timeout: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("summary.json", "log.jsonl"):
        (out / stale).unlink(missing_ok=True)
    extra = ["--features", "sharded"] if way == "sharded" else []
    ran = launch(parts if way == "partitioned" else data, ranks, [*flags, *extra], out, timeout)
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line.strip()]
    epochs = [r for r in records if "train_loss" in r]
    train_seeds = json.loads((data / "meta.json").read_text())["splits"]["train"]
    result = {
        "way": way, "ranks": ranks, **ran, "test_acc": summary["test_acc"], "val_acc": summary["val_acc"],
        "epochs": len(epochs), "steps_per_rank": summary["steps"], "epoch_seconds": [r["seconds"] for r in epochs],
        **throughput(epochs, summary["steps"] // len(epochs), train_seeds),
        "topology_bytes": topology_bytes(data, parts, way, ranks),
        "hit_rate": epochs[-1].get("hit_rate"), "net_kb_per_step": epochs[-1].get("net_kb_per_step"),
    }
    if way == "partitioned":
        manifest = json.loads((parts / "manifest.json").read_text())
        result["halo_per_owned"] = [p["num_halo"] / p["num_owned"] for p in manifest["parts"]]
    return result


COLUMNS = ("way", "ranks", "epoch 1 s", "steps/s per rank (later epochs)", "seeds/s (all ranks)", "test acc",
           "peak RSS per rank (GiB)", "topology per rank (MB)", "topology / whole CSC", "halo / owned",
           "halo cache hit rate (rank 0)", "net KB/step (rank 0)")


def table(results: list[dict], whole_csc: int) -> str:
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in results:
        cells = [
            r["way"], r["ranks"], f"{r['epoch_seconds'][0]:.0f}", f"{r['steps_per_s']:.2f}", f"{r['seeds_per_s']:,.0f}",
            f"{r['test_acc']:.4f}", " / ".join(f"{b / 2**30:.2f}" for b in r["peak_rss"]),
            " / ".join(f"{b / 1e6:.1f}" for b in r["topology_bytes"]),
            " / ".join(f"{b / whole_csc:.2f}" for b in r["topology_bytes"]),
            " / ".join(f"{h:.2f}" for h in r.get("halo_per_owned", [])) or "-",
            "-" if r["hit_rate"] is None else f"{r['hit_rate']:.0%}",
            "-" if r["net_kb_per_step"] is None else f"{r['net_kb_per_step']:,.0f}",
        ]
        rows.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="the dataset folder")
    ap.add_argument("parts", type=Path, help="its partitioned folder (`sparsetrain partition DATA --out`)")
    ap.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    ap.add_argument("--work", type=Path, default=Path("dist_train_runs"), help="each way's logs go here")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a way may take")
    ap.add_argument("--json", type=Path, default=Path("dist_train.json"))
    a, flags = ap.parse_known_args()
    ways = a.ways.split(",")
    if set(ways) - set(WAYS):
        ap.error(f"--ways {a.ways}: choose among {', '.join(WAYS)}")
    ranks = json.loads((a.parts / "manifest.json").read_text())["num_parts"]
    # a rank of a loaded machine can be far behind its peers (evaluation, start-up): wait rather than fail
    os.environ.setdefault("SPARSETRAIN_DIST_TIMEOUT", "600")
    results = []
    for way in ways:
        results.append(measure(way, a.data, a.parts, 1 if way == "single" else ranks, flags, a.work / way, a.timeout))
        print(json.dumps(results[-1]), flush=True)
    whole = _npy_bytes(a.data, ("indptr", "indices"))
    print(table(results, whole))
    a.json.write_text(json.dumps({"data": str(a.data), "parts": str(a.parts), "flags": flags, "whole_csc_bytes": whole,
                                  "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
