"""Preprocessing benchmark: time and peak RSS of `sparsetrain synth` and of importing an edge list from Parquet.

Peer, in the same run: the usual way to get a CSC from a Parquet edge list with the PyG stack —
`pyarrow.parquet.read_table` of the whole file, then `torch_geometric.utils.to_torch_csc_tensor`,
then saving the arrays with `numpy.save`. Every stage runs in its own process so its peak RSS is
its own (os.wait4). Prints a table and writes JSON.

    python benchmarks/preprocess.py                       # products scale: 2.4M nodes, 120M edges, 100-dim
    python benchmarks/preprocess.py --nodes 100000 --edges 2000000   # a quick run

`--scale papers100m` measures the bounded-memory claim instead (issue 20): `sparsetrain synth
--preset papers100m` at full scale and at 1/10 of the edges (peak RSS should not move with the
edge count), then `sparsetrain preprocess --ogb` of an OGB binary-layout folder (deflated
raw/data.npz, node-label.npz with NaN for unlabelled nodes, split_dict.pt) at 1/10 of the nodes
and edges. Its peer is OGB's own reader, `ogb.io.read_graph_raw.read_binary_graph_raw`, which
loads the arrays into memory (run only where it fits: `--ogb-peer`). Needs ~45 GiB of free disk
at full scale (`--skip-full` / `--skip-tenth` leave those runs out).

    python benchmarks/preprocess.py --scale papers100m --workdir /tmp/p100m-bench
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
st.datasets.synthesize(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), feature_dim=int(sys.argv[4]), num_classes=47,
                       overwrite=True, quiet=True)
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
edge_index = torch.stack([torch.from_numpy(table.column("src").to_numpy()),
                          torch.from_numpy(table.column("dst").to_numpy())])
del table
n = int(sys.argv[3])
csc = to_torch_csc_tensor(edge_index, size=(n, n))
os.makedirs(sys.argv[2], exist_ok=True)
np.save(os.path.join(sys.argv[2], "indptr.npy"), csc.ccol_indices().numpy())
np.save(os.path.join(sys.argv[2], "indices.npy"), csc.row_indices().numpy())
"""


SYNTH_CLI = """
import sys
from sparsetrain.cli import main
sys.exit(main(["synth", "--preset", "papers100m", *sys.argv[1:], "--quiet"]))
"""

PREPROCESS_OGB = """
import sys
from sparsetrain.cli import main
sys.exit(main(["preprocess", "--ogb", sys.argv[1], "--out", sys.argv[2], "--feature-dtype", "float16", "--quiet"]))
"""

OGB_PEER = """
import sys
from ogb.io.read_graph_raw import read_binary_graph_raw
g = read_binary_graph_raw(sys.argv[1] + "/raw")[0]
print(g["edge_index"].shape, g["node_feat"].shape)
"""

WRITE_OGB = """
import sys, zipfile, numpy as np, torch
from pathlib import Path
from sparsetrain.datasets.writer import _npy_header
root, n, e, dim, classes, labelled = Path(sys.argv[1]), *map(int, sys.argv[2:6]), float(sys.argv[6])
(root / "raw").mkdir(parents=True)
(root / "RELEASE_v1.txt").write_text("# synthetic OGB binary layout at papers100M proportions")
step = 1 << 22

def member(archive, name, shape, dtype, blocks):
    with archive.open(name + ".npy", "w", force_zip64=True) as f:
        f.write(_npy_header(np.dtype(dtype), shape))
        for block in blocks:
            f.write(np.ascontiguousarray(block, dtype=dtype).tobytes())

def power_law_ids(rng, count):  # skewed like a citation graph's sources; hubs scattered over the id range
    return (rng.pareto(1.2, count) * (n / 50)).astype(np.int64) % n * 2654435761 % n

with zipfile.ZipFile(root / "raw" / "data.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
    member(z, "num_nodes_list", (1,), np.int64, [np.array([n])])
    def edge_rows():
        for row in range(2):
            for lo in range(0, e, step):
                rng = np.random.default_rng([row, lo])
                yield power_law_ids(rng, min(step, e - lo)) if row == 0 else rng.integers(0, n, min(step, e - lo))
    member(z, "edge_index", (2, e), np.int64, edge_rows())
    member(z, "num_edges_list", (1,), np.int64, [np.array([e])])
    def feats():
        for lo in range(0, n, step // dim * 4):
            yield np.random.default_rng([7, lo]).standard_normal((min(step // dim * 4, n - lo), dim), dtype=np.float32)
    member(z, "node_feat", (n, dim), np.float32, feats())
rng = np.random.default_rng(1)
chosen = np.sort(rng.choice(n, size=max(3, int(labelled * n)), replace=False))
label = np.full((n, 1), np.nan, dtype=np.float32)
label[chosen, 0] = rng.integers(0, classes, len(chosen))
np.savez_compressed(root / "raw" / "node-label.npz", node_label=label)
(root / "split" / "time").mkdir(parents=True)
perm = rng.permutation(chosen)
a, b = int(0.78 * len(perm)), int(0.86 * len(perm))
split = {"train": np.sort(perm[:a]), "valid": np.sort(perm[a:b]), "test": np.sort(perm[b:])}
torch.save(split, root / "split" / "time" / "split_dict.pt")
"""


def papers100m(args) -> None:
    """The bounded-memory measurements of issue 20 (see the module docstring)."""
    from sparsetrain.datasets.presets import PAPERS100M

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    n, e, dim = PAPERS100M["nodes"], PAPERS100M["edges"], PAPERS100M["feature_dim"]
    tenth_e = e // 10 // 2 * 2
    rows = []

    def measure(name, code, *argv, folder=None):
        stats = run_stage(code, *map(str, argv))
        row = {"stage": name, **stats}
        if folder is not None:
            row["arrays_gib"] = round(folder_arrays_gib(folder), 2)
        rows.append(row)
        print(row, flush=True)
        return row

    if not args.skip_full:
        measure(
            "synth --preset papers100m (1.6B edges)",
            SYNTH_CLI,
            "--out",
            work / "full",
            "--overwrite",
            folder=work / "full",
        )
        shutil.rmtree(work / "full")
    if not args.skip_tenth:
        measure(
            f"synth --preset papers100m --edges {tenth_e} --feature-dim {args.tenth_feature_dim}",
            SYNTH_CLI, "--edges", tenth_e, "--feature-dim", args.tenth_feature_dim, "--out",
            work / "tenth",
            "--overwrite",
            folder=work / "tenth",
        )
        shutil.rmtree(work / "tenth")
    ogb = work / "ogb-tenth"
    shutil.rmtree(ogb, ignore_errors=True)
    export = run_stage(
        WRITE_OGB,
        str(ogb),
        str(n // 10),
        str(tenth_e),
        str(args.ogb_feature_dim),
        str(PAPERS100M["classes"]),
        str(PAPERS100M["label_fraction"]),
    )
    npz_gib = (ogb / "raw" / "data.npz").stat().st_size / 2**30
    print(f"(wrote the OGB binary folder in {export['seconds']} s: data.npz {npz_gib:.2f} GiB deflated)", flush=True)
    measure(
        f"preprocess --ogb (binary, {n // 10:,} nodes, {tenth_e:,} edges, {args.ogb_feature_dim}-dim)",
        PREPROCESS_OGB,
        ogb,
        work / "ogb-imported",
        folder=work / "ogb-imported",
    )
    shutil.rmtree(work / "ogb-imported")
    if args.ogb_peer:
        measure("peer: ogb read_binary_graph_raw (into memory)", OGB_PEER, ogb)
    shutil.rmtree(ogb)

    print(f"\npapers100M scale ({n:,} nodes, {e:,} edges, {dim}-dim float16), {os.cpu_count()} cores")
    print(f"{'stage':<72} {'seconds':>8} {'peak RSS GiB':>13} {'arrays GiB':>11}")
    for r in rows:
        print(
            f"{r['stage']:<72} {r['seconds']:>8.1f} {r['peak_rss_gib']:>13.2f} "
            f"{r.get('arrays_gib', float('nan')):>11.2f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"scale": "papers100m", "cpus": os.cpu_count(), "rows": rows, "ogb_npz_gib": round(npz_gib, 2)}, indent=2
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scale",
        choices=["papers100m"],
        help="the bounded-memory runs at papers100M scale instead of the Parquet import",
    )
    parser.add_argument(
        "--skip-full", action="store_true", help="with --scale papers100m: leave out the full 1.6B-edge synth"
    )
    parser.add_argument(
        "--skip-tenth", action="store_true", help="with --scale papers100m: leave out the 1/10-edge synth"
    )
    parser.add_argument(
        "--tenth-feature-dim", type=int, default=128, help="feature dim of the 1/10-edge synth (lower it to save disk)"
    )
    parser.add_argument(
        "--ogb-feature-dim", type=int, default=128, help="node_feat width of the 1/10 OGB folder (float32 in OGB)"
    )
    parser.add_argument("--ogb-peer", action="store_true", help="also time OGB's in-memory reader on the 1/10 folder")
    parser.add_argument("--nodes", type=int, default=2_400_000)
    parser.add_argument("--edges", type=int, default=120_000_000)
    parser.add_argument("--feature-dim", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=HERE / "out" / "preprocess")
    parser.add_argument("--json", type=Path, default=HERE / "out" / "preprocess.json")
    args = parser.parse_args()
    if args.scale == "papers100m":
        papers100m(args)
        return

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    synth_dir, parquet, imported, peer_dir = work / "synth", work / "edges.parquet", work / "imported", work / "peer"
    rows = []
    n, e = str(args.nodes), str(args.edges)

    stats = run_stage(SYNTH, str(synth_dir), n, e, str(args.feature_dim))
    rows.append(
        {"stage": "sparsetrain synth (graph + features + labels)", **stats, "arrays_gib": folder_arrays_gib(synth_dir)}
    )
    export = run_stage(EXPORT, str(synth_dir), str(parquet))
    print(f"(exported the edge list to Parquet in {export['seconds']} s, {parquet.stat().st_size / 2**30:.2f} GiB)")
    stats = run_stage(IMPORT, str(parquet), str(imported), n)
    ours = {"stage": "sparsetrain preprocess --edges edges.parquet", **stats, "arrays_gib": folder_arrays_gib(imported)}
    rows.append(ours)
    shutil.rmtree(peer_dir, ignore_errors=True)
    stats = run_stage(PEER, str(parquet), str(peer_dir), n)
    peer = {
        "stage": "peer: pyarrow read_table + PyG to_torch_csc_tensor + np.save",
        **stats,
        "arrays_gib": folder_arrays_gib(peer_dir),
    }
    rows.append(peer)

    print(
        f"\n{args.nodes:,} nodes, {args.edges:,} directed edges, {args.feature_dim}-dim features, "
        f"{os.cpu_count()} cores"
    )
    print(f"{'stage':<58} {'seconds':>8} {'peak RSS GiB':>13} {'arrays GiB':>11} {'RSS/arrays':>11}")
    for r in rows:
        r["rss_over_arrays"] = round(r["peak_rss_gib"] / r["arrays_gib"], 2)
        r["arrays_gib"] = round(r["arrays_gib"], 3)
        print(
            f"{r['stage']:<58} {r['seconds']:>8.1f} {r['peak_rss_gib']:>13.2f} {r['arrays_gib']:>11.2f} "
            f"{r['rss_over_arrays']:>11.2f}"
        )
    ratio = {
        "import_speedup_vs_peer": round(peer["seconds"] / ours["seconds"], 2),
        "import_rss_vs_peer": round(ours["peak_rss_gib"] / peer["peak_rss_gib"], 2),
    }
    print(
        f"\nimport vs peer: {ratio['import_speedup_vs_peer']}x faster, {ratio['import_rss_vs_peer']}x the "
        "peer's peak RSS"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "nodes": args.nodes,
                "edges": args.edges,
                "feature_dim": args.feature_dim,
                "cpus": os.cpu_count(),
                "rows": rows,
                **ratio,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
