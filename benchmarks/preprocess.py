"""Preprocessing benchmark: time and peak RSS of `sparsetrain synth` and of importing an edge list from Parquet.

Peer, in the same run: the usual way to get a CSC from a Parquet edge list with the PyG stack —
`pyarrow.parquet.read_table` of the whole file, then `torch_geometric.utils.to_torch_csc_tensor`,
then saving the arrays with `numpy.save`. Every stage runs in its own process so its peak RSS is
its own (os.wait4). Prints a table and writes JSON.

    python benchmarks/preprocess.py                       # products scale: 2.4M nodes, 120M edges, 100-dim
    python benchmarks/preprocess.py --nodes 100000 --edges 2000000   # a quick run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_stage(code: str, *args: str) -> dict:
    """Run Python ``code`` in a child process; wall time and the child's own peak RSS."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args])
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"stage failed: {code.splitlines()[0]} {args}")
    return {"seconds": round(seconds, 2), "peak_rss_gib": round(usage.ru_maxrss / 2**20, 3)}


def folder_arrays_gib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.npy")) / 2**30


SYNTH = """
import sys, sparsetrain as st
st.datasets.synthesize(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), feature_dim=int(sys.argv[4]), num_classes=47, overwrite=True, quiet=True)
"""

EXPORT = """
import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq, sparsetrain as st
g = st.datasets.load(sys.argv[1]).graph
indptr, indices = g.indptr.numpy(), g.indices.numpy()
dst = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(indptr))
rng = np.random.default_rng(0)
order = rng.permutation(g.num_edges)  # an edge list as found in the wild: unsorted
with pq.ParquetWriter(sys.argv[2], pa.schema([("src", pa.int64()), ("dst", pa.int64())])) as w:
    step = 1 << 23
    for lo in range(0, g.num_edges, step):
        sel = np.sort(order[lo:lo + step])
        w.write_table(pa.table({"src": indices[sel].astype(np.int64), "dst": dst[sel]}))
"""

IMPORT = """
import sys, sparsetrain as st
st.datasets.from_files(sys.argv[2], sys.argv[1], num_nodes=int(sys.argv[3]), overwrite=True, quiet=True)
"""

PEER = """
import sys, os, numpy as np, pyarrow.parquet as pq, torch
from torch_geometric.utils import to_torch_csc_tensor
table = pq.read_table(sys.argv[1])
edge_index = torch.stack([torch.from_numpy(table.column("src").to_numpy()), torch.from_numpy(table.column("dst").to_numpy())])
del table
n = int(sys.argv[3])
csc = to_torch_csc_tensor(edge_index, size=(n, n))
os.makedirs(sys.argv[2], exist_ok=True)
np.save(os.path.join(sys.argv[2], "indptr.npy"), csc.ccol_indices().numpy())
np.save(os.path.join(sys.argv[2], "indices.npy"), csc.row_indices().numpy())
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2_400_000)
    parser.add_argument("--edges", type=int, default=120_000_000)
    parser.add_argument("--feature-dim", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "preprocess")
    parser.add_argument("--json", type=Path, default=HERE / "out" / "preprocess.json")
    args = parser.parse_args()

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    synth_dir, parquet, imported, peer_dir = work / "synth", work / "edges.parquet", work / "imported", work / "peer"
    rows = []
    n, e = str(args.nodes), str(args.edges)

    stats = run_stage(SYNTH, str(synth_dir), n, e, str(args.feature_dim))
    rows.append({"stage": "sparsetrain synth (graph + features + labels)", **stats, "arrays_gib": folder_arrays_gib(synth_dir)})
    export = run_stage(EXPORT, str(synth_dir), str(parquet))
    print(f"(exported the edge list to Parquet in {export['seconds']} s, {parquet.stat().st_size / 2**30:.2f} GiB)")
    stats = run_stage(IMPORT, str(parquet), str(imported), n)
    ours = {"stage": "sparsetrain preprocess --edges edges.parquet", **stats, "arrays_gib": folder_arrays_gib(imported)}
    rows.append(ours)
    shutil.rmtree(peer_dir, ignore_errors=True)
    stats = run_stage(PEER, str(parquet), str(peer_dir), n)
    peer = {"stage": "peer: pyarrow read_table + PyG to_torch_csc_tensor + np.save", **stats, "arrays_gib": folder_arrays_gib(peer_dir)}
    rows.append(peer)

    print(f"\n{args.nodes:,} nodes, {args.edges:,} directed edges, {args.feature_dim}-dim features, {os.cpu_count()} cores")
    print(f"{'stage':<58} {'seconds':>8} {'peak RSS GiB':>13} {'arrays GiB':>11} {'RSS/arrays':>11}")
    for r in rows:
        r["rss_over_arrays"] = round(r["peak_rss_gib"] / r["arrays_gib"], 2)
        r["arrays_gib"] = round(r["arrays_gib"], 3)
        print(f"{r['stage']:<58} {r['seconds']:>8.1f} {r['peak_rss_gib']:>13.2f} {r['arrays_gib']:>11.2f} {r['rss_over_arrays']:>11.2f}")
    ratio = {"import_speedup_vs_peer": round(peer["seconds"] / ours["seconds"], 2), "import_rss_vs_peer": round(ours["peak_rss_gib"] / peer["peak_rss_gib"], 2)}
    print(f"\nimport vs peer: {ratio['import_speedup_vs_peer']}x faster, {ratio['import_rss_vs_peer']}x the peer's peak RSS")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"nodes": args.nodes, "edges": args.edges, "feature_dim": args.feature_dim, "cpus": os.cpu_count(), "rows": rows, **ratio}, indent=2))


if __name__ == "__main__":
    main()
