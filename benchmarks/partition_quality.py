"""Partition quality and cost: `sparsetrain partition` (LDG, streaming) against a random hash and, where `pymetis`
imports, METIS on the whole graph in memory (the quality a one-machine, all-in-RAM partitioner reaches).

Per dataset and part count: edge cut (share of edges whose ends have different owners), node and edge balance
(largest part over the mean), halo (remote in-neighbours the parts reach, over the node count), wall time and the
peak RSS of the partitioning process (each run in its own child, os.wait4). METIS's numbers are computed here from
its assignment, with the same NumPy count. Prints a table and writes JSON.

    python benchmarks/partition_quality.py DATA [DATA ...] --parts 2,4,8 [--no-metis] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PARTITION = """
import json, sys
from sparsetrain.partition import PartitionOptions, partition_dataset
m = partition_dataset(sys.argv[1], sys.argv[2], PartitionOptions(int(sys.argv[3]), method=sys.argv[4], quiet=True))
print(json.dumps(m["quality"]))
"""

_METIS = """
import json, sys
import numpy as np
import pymetis
from sparsetrain.datasets import load
ds = load(sys.argv[1]); P = int(sys.argv[2])
indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy().astype(np.int64)
dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
keep = indices != dst  # METIS takes no self loops
xadj = np.concatenate([[0], np.cumsum(np.bincount(dst[keep], minlength=len(indptr) - 1))])
_, owner = pymetis.part_graph(P, xadj=xadj, adjncy=indices[keep])
owner = np.asarray(owner)
n, E = len(owner), len(indices)
cut = int(np.count_nonzero(owner[indices] != owner[dst]))
edges = np.bincount(owner[dst], minlength=P)
halo = sum(len(np.setdiff1d(np.unique(indices[owner[dst] == p]), np.flatnonzero(owner == p))) for p in range(P))
print(json.dumps({"edge_cut": cut, "edge_cut_fraction": cut / E,
                  "node_balance": float(np.bincount(owner).max() * P / n), "edge_balance": float(edges.max() * P / E),
                  "halo_fraction": halo / n}))
"""


def run(code: str, *args: str) -> dict:
    """Run ``code`` in a child process: its JSON line, wall time and its own peak RSS."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"child failed with status {status}")
    result = json.loads(out.strip().splitlines()[-1])
    return result | {"seconds": time.perf_counter() - start, "peak_rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="+", type=Path)
    ap.add_argument("--parts", default="2,4,8")
    ap.add_argument("--no-metis", action="store_true")
    ap.add_argument("--json", type=Path, default=Path("partition_quality.json"))
    args = ap.parse_args()
    try:
        import pymetis  # noqa: F401
        metis = not args.no_metis
    except ImportError:
        metis = False
    rows = []
    print(f"{'dataset':<22} {'parts':>5} {'method':<6} {'cut %':>7} {'node bal':>8} {'edge bal':>8} {'halo':>6} "
          f"{'s':>7} {'RSS MiB':>8}")
    for data in args.data:
        for parts in map(int, args.parts.split(",")):
            for method in ("hash", "ldg", "metis") if metis else ("hash", "ldg"):
                with tempfile.TemporaryDirectory(dir=data.parent) as tmp:
                    if method == "metis":
                        r = run(_METIS, str(data), str(parts))
                    else:
                        r = run(_PARTITION, str(data), str(Path(tmp) / "p"), str(parts), method)
                    shutil.rmtree(tmp, ignore_errors=True)
                rows.append({"dataset": data.name, "parts": parts, "method": method} | r)
                print(f"{data.name:<22} {parts:>5} {method:<6} {100 * r['edge_cut_fraction']:>7.1f} "
                      f"{r['node_balance']:>8.3f} {r['edge_balance']:>8.3f} {r['halo_fraction']:>6.2f} "
                      f"{r['seconds']:>7.1f} {r['peak_rss_mib']:>8.0f}", flush=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
