"""The IGBH-large shape imported from IGB's on-disk layout and partitioned into 8, in bounded memory (issue 46 item 5).

Phases, each a child process under ``/usr/bin/time -v nice -n 10`` (its wall time and peak RSS logged; the peaks of
its anonymous memory and of its mapped file pages sampled every 2 s from ``/proc``):

1. ``write``: an IGB-layout folder ``ROOT/large/processed/`` of IGBH-large's node counts (100M papers, 116,959,896
   authors, 26,524 institutes, 649,707 fos, 48,820 journals, 4,490 conferences) written as IGB ships large: paper and
   author features and the paper labels as raw headerless float32 memory maps, the small types' features as ``.npy``,
   every relation's ``edge_index.npy`` as a raw int64 ``[E, 2]`` memory map. Edges are IGB's published per-relation
   counts times ``--edge-scale`` (``published``/``venue``, whose counts are not published with the others, get
   ``PUBLISHED_PER_PAPER`` / ``VENUE_PER_PAPER`` edges a paper before the scale), drawn as ``synth --preset igbh-*``
   draws them (power-law degrees, mostly within a hidden class); features ``--feature-dim`` float32 columns (narrow,
   for the disk), labels 19 classes. Streamed chunk by chunk: memory is the node-class tables, not the edges.
2. ``import``: ``sparsetrain preprocess --igb ROOT --size large`` (the reference's reverses and self-loops added).
   The IGB-layout source is deleted after it (``--keep-source`` keeps it).
3. ``partition``: ``sparsetrain partition DATA --parts 8 --method ldg``.

Then the manifest's quality (edge cut, balance per node type) and every phase's wall / CPU / peak RSS go into
``ROOT/igbh_large.json``; ``--clean`` deletes everything at the end. ``df`` is logged before each phase.

    python benchmarks/igbh_large.py --root /tmp/igbh-large --edge-scale 0.25 --clean
    python benchmarks/igbh_large.py --root /tmp/igbh-smoke --node-scale 0.001 --edge-scale 0.001 --clean   # seconds
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sparsetrain.datasets.igb import HEADERLESS, LARGE_RELATIONS  # noqa: E402
from sparsetrain.datasets.presets import IGBH_EDGES, IGBH_NODES, IGBH_RELATIONS  # noqa: E402
from sparsetrain.datasets.synth_mag import typed_graph  # noqa: E402

EXTRA_NODES = {"journal": 48_820, "conference": 4_490}
"""IGBH-large's journal and conference counts (IGB's README; the synthetic presets leave them out)."""
PUBLISHED_PER_PAPER, VENUE_PER_PAPER = 0.5, 0.1
"""Edges a paper of ``published``/``venue`` (IGB does not publish their counts with the others'; our choice)."""
CLASSES = 19


def shape(node_scale: float, edge_scale: float) -> tuple[dict[str, int], dict[tuple, int]]:
    """IGBH-large's node counts (times ``node_scale``) and edge counts (times ``edge_scale``) per stored relation."""
    nodes = {**IGBH_NODES["large"], **EXTRA_NODES}
    nodes = {t: max(2, round(n * node_scale)) for t, n in nodes.items()}
    base = dict(zip(IGBH_RELATIONS, IGBH_EDGES["large"]))
    base[LARGE_RELATIONS[0]] = round(PUBLISHED_PER_PAPER * IGBH_NODES["large"]["paper"])
    base[LARGE_RELATIONS[1]] = round(VENUE_PER_PAPER * IGBH_NODES["large"]["paper"])
    edges = {et: max(1, round(n * node_scale * edge_scale)) for et, n in base.items()}
    return nodes, edges


def _stream(path: Path, chunks, total_rows: int, width: int | None, dtype, header: bool) -> None:
    """Write ``chunks`` (arrays of rows) to ``path`` with plain writes (nothing mapped): a raw memmap's bytes (IGB's
    large files) or an ``.npy``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shape_ = (total_rows,) if width is None else (total_rows, width)
    row = 0
    with open(path, "wb") as f:
        if header:
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                     "fortran_order": False, "shape": shape_})
        for block in chunks:
            np.ascontiguousarray(block, dtype=dtype).tofile(f)
            row += len(block)
    assert row == total_rows, (path, row, total_rows)


def write_layout(root: Path, node_scale: float, edge_scale: float, feature_dim: int, seed: int) -> dict:
    """Phase 1: the IGB-layout folder of the large shape (see the module docstring)."""
    nodes, edges = shape(node_scale, edge_scale)
    graph = typed_graph(nodes, edges, 1.0, CLASSES, feature_dim, seed, "the IGBH-large shape", featured=tuple(nodes))
    folder = root / "large" / "processed"
    headerless = "large" in HEADERLESS
    for t in nodes:
        raw = headerless and t in ("paper", "author")
        _stream(folder / t / "node_feat.npy", graph.features[t].chunks(), nodes[t], feature_dim, np.float32, not raw)
        print(f"[write] {t}: {nodes[t]} nodes x {feature_dim} float32 ({'raw' if raw else 'npy'})", flush=True)
    labels = (block.astype(np.float32) for block in graph.labels["paper"].chunks())
    _stream(folder / "paper" / "node_label_19.npy", labels, nodes["paper"], None, np.float32, not headerless)
    for et, source in graph.edges.items():
        pairs = (np.stack([src, dst], 1).astype(np.int64) for src, dst, _ in source.chunks())
        _stream(folder / "__".join(et) / "edge_index.npy", pairs, edges[et], 2, np.int64, not headerless)
        print(f"[write] {'__'.join(et)}: {edges[et]} edges (int64 [E, 2], {'raw' if headerless else 'npy'})",
              flush=True)
    return {"nodes": nodes, "edges": {"__".join(et): n for et, n in edges.items()}}


def _df(path: Path) -> str:
    usage = shutil.disk_usage(path)
    return f"{usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.1f}"


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _status(time_pid: int) -> dict[str, int]:
    """RssAnon / RssFile (KiB) of the process ``/usr/bin/time`` runs (``nice`` execs it: time's one child)."""
    try:
        child = open(f"/proc/{time_pid}/task/{time_pid}/children").read().split()
        lines = open(f"/proc/{child[0]}/status").read().splitlines() if child else []
    except OSError:
        return {}
    return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines) if k in ("RssAnon", "RssFile")}


def run_phase(name: str, argv: list[str], log: Path) -> dict:
    """``argv`` under ``/usr/bin/time -v nice -n 10``; wall, CPU seconds and peak RSS from time's report."""
    timing = log.with_name(f"{name}.time")
    cmd = ["/usr/bin/time", "-v", "-o", str(timing), "nice", "-n", "10", *argv]
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}", flush=True)
    start = time.time()
    peaks = {"RssAnon": 0, "RssFile": 0}
    with open(log, "a") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:  # the phase's own (anonymous) memory vs the file pages it has mapped
            for key, kb in _status(proc.pid).items():
                peaks[key] = max(peaks[key], kb)
            time.sleep(2)
        rc = proc.returncode
    text = timing.read_text() if timing.exists() else ""

    def field(label: str) -> str | None:
        m = re.search(rf"{re.escape(label)}: (.+)", text)
        return m.group(1).strip() if m else None

    rss_kb = field("Maximum resident set size (kbytes)")
    result = {"phase": name, "rc": rc, "wall_s": round(time.time() - start, 1),
              "user_s": float(field("User time (seconds)") or 0),
              "system_s": float(field("System time (seconds)") or 0),
              "peak_rss_gib": round(int(rss_kb) / 2**20, 2) if rss_kb else None,
              "cpu_percent": field("Percent of CPU this job got"),
              "peak_rss_anon_gib": round(peaks["RssAnon"] / 2**20, 2),
              "peak_rss_file_gib": round(peaks["RssFile"] / 2**20, 2),
              "command": " ".join(argv)}
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {json.dumps(result)}", flush=True)
    if rc:
        raise SystemExit(f"phase {name} failed (rc {rc}); see {log}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="work folder (source, dataset, parts, logs)")
    ap.add_argument("--edge-scale", type=float, default=1.0, help="IGB's published edge counts times this")
    ap.add_argument("--node-scale", type=float, default=1.0, help="node counts times this (smoke runs only)")
    ap.add_argument("--feature-dim", type=int, default=4, help="float32 feature columns per node (default 4)")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phases", default="write,import,partition", help="comma-separated subset, in order")
    ap.add_argument("--keep-source", action="store_true", help="keep the IGB-layout folder after the import")
    ap.add_argument("--clean", action="store_true", help="delete everything under --root at the end")
    ap.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)  # the child of the write phase
    args = ap.parse_args()
    source, data, parts = args.root / "igb", args.root / "dataset", args.root / "parts"
    if args.write_only:
        shape_ = write_layout(source, args.node_scale, args.edge_scale, args.feature_dim, args.seed)
        (args.root / "shape.json").write_text(json.dumps(shape_, indent=1))
        return
    args.root.mkdir(parents=True, exist_ok=True)
    log, summary_path = args.root / "igbh_large.log", args.root / "igbh_large.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"phases": {}}
    summary.update({"edge_scale": args.edge_scale, "node_scale": args.node_scale, "feature_dim": args.feature_dim,
                    "parts": args.parts})
    cli = [sys.executable, "-m", "sparsetrain"]
    phases = {
        "write": [sys.executable, __file__, "--root", str(args.root), "--edge-scale", str(args.edge_scale),
                  "--node-scale", str(args.node_scale), "--feature-dim", str(args.feature_dim), "--seed",
                  str(args.seed), "--write-only"],
        "import": [*cli, "preprocess", "--igb", str(source), "--size", "large", "--classes", "19", "--out", str(data),
                   "--overwrite"],
        "partition": [*cli, "partition", str(data), "--parts", str(args.parts), "--method", "ldg", "--out", str(parts),
                      "--overwrite"],
    }
    if args.node_scale != 1.0:  # a smoke run: the headerless files are sized by the counts given
        nodes, _ = shape(args.node_scale, args.edge_scale)
        phases["import"] += [a for t in ("paper", "author") for a in ("--node-count", f"{t}={nodes[t]}")]
    for name in args.phases.split(","):
        free_before = _df(args.root)
        print(f"[{time.strftime('%H:%M:%S')}] before {name}: disk {free_before}", flush=True)
        result = run_phase(name, phases[name], log)
        result["disk_free_before"], result["disk_free_after"] = free_before, _df(args.root)
        if name == "write":
            result["source_bytes"] = _du(source)
            summary["shape"] = json.loads((args.root / "shape.json").read_text())
        if name == "import":
            result["dataset_bytes"] = _du(data)
            if not args.keep_source:
                shutil.rmtree(source, ignore_errors=True)
        if name == "partition":
            result["parts_bytes"] = _du(parts)
            manifest = json.loads((parts / "manifest.json").read_text())
            summary["quality"] = manifest["quality"]
            summary["graph"] = {k: manifest["dataset"][k] for k in ("num_nodes", "num_edges", "node_types")}
        summary["phases"][name] = result
        summary_path.write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1), flush=True)
    if args.clean:
        for path in (source, data, parts):
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
