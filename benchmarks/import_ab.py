"""Two checkouts of sparsetrain, same inputs: does every importer still write the same dataset, byte for byte?

Builds one set of inputs (a CSV edge list with times, typed edge lists, an ogbn-mag-shaped and an arxiv-shaped OGB
CSV folder, Cora and a small ``HeteroData``) and imports each through both trees (``PYTHONPATH``, CLI verbs and
``from_pyg``, names both trees have); then compares every array's sha256 and ``meta.json`` (all but ``source``,
the provenance, which is printed when it differs). Exit 1 when any dataset differs.

    git worktree add /tmp/before <rev>
    python benchmarks/import_ab.py --before /tmp/before --work /tmp/import_ab    # --after defaults to this checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

BUILD = r'''
import gzip, sys, warnings
from pathlib import Path
import numpy as np, torch
import sparsetrain as st
from sparsetrain.cli import main
from sparsetrain.datasets.builtin import planetoid_data
from torch_geometric.data import HeteroData

out, inp = Path(sys.argv[1]), Path(sys.argv[2])
warnings.simplefilter("ignore")


def gz(path, rows, header=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", newline="") as f:
        f.write("" if header is None else ",".join(header) + "\n")
        f.writelines(",".join(map(str, r)) + "\n" for r in rows)


if not inp.exists():  # the first tree writes the inputs, the second reads the same files
    rng = np.random.default_rng(0)
    n, e = 200, 900
    src, dst, t = rng.integers(0, n, e), rng.integers(0, n, e), rng.integers(0, 10**6, e)
    inp.mkdir(parents=True)
    (inp / "timed.csv").write_text("src,dst,t\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(src, dst, t)))
    (inp / "e.csv").write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in zip(src, dst)))
    (inp / "w.csv").write_text("src,dst,t\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(src % 50, dst, t)))
    np.save(inp / "x.npy", rng.standard_normal((n, 5)).astype(np.float32))
    y = rng.integers(0, 4, n)
    y[::7] = -1
    np.save(inp / "y.npy", y)
    np.save(inp / "nt.npy", rng.integers(0, 10**6, n))
    np.save(inp / "xa.npy", rng.standard_normal((50, 3)).astype(np.float32))
    np.save(inp / "ya.npy", rng.integers(0, 3, 50))
    raw = inp / "mag" / "raw"
    gz(raw / "num-node-dict.csv.gz", [[50, n]], header=["author", "paper"])
    gz(raw / "relations" / "paper___cites___paper" / "edge.csv.gz", list(zip(src, dst)))
    gz(raw / "relations" / "author___writes___paper" / "edge.csv.gz", list(zip(src % 50, dst)))
    gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", rng.standard_normal((n, 4)).round(3).tolist())
    gz(raw / "node-label" / "paper" / "node-label.csv.gz", [[v] for v in rng.integers(0, 5, n)])
    perm = rng.permutation(n)
    for part, ids in zip(("train", "valid", "test"), (perm[:120], perm[120:160], perm[160:])):
        gz(inp / "mag" / "split" / "time" / "paper" / f"{part}.csv.gz", [[i] for i in sorted(ids)])
    arxiv = inp / "arxiv"
    gz(arxiv / "raw" / "edge.csv.gz", rng.integers(0, 60, (300, 2)).tolist())
    gz(arxiv / "raw" / "num-node-list.csv.gz", [[60]])
    gz(arxiv / "raw" / "node-feat.csv.gz", rng.standard_normal((60, 3)).round(3).tolist())
    gz(arxiv / "raw" / "node-label.csv.gz", [["nan"] if i % 4 == 0 else [i % 5] for i in range(60)])
    for part, ids in zip(("train", "valid", "test"), (range(1, 40, 4), range(41, 50, 4), range(51, 60, 4))):
        gz(arxiv / "split" / "time" / f"{part}.csv.gz", [[i] for i in ids])

runs = {
    "csv_times": ["preprocess", "--edges", inp / "timed.csv", "--features", inp / "x.npy", "--labels", inp / "y.npy",
                  "--edge-time-column", "t", "--node-time", inp / "nt.npy"],
    "csv_reorder": ["preprocess", "--edges", inp / "e.csv", "--features", inp / "x.npy", "--labels", inp / "y.npy",
                    "--undirected", "--reorder", "degree", "--split", "0.5,0.2,0.3"],
    "csv_link": ["preprocess", "--edges", inp / "e.csv", "--undirected", "--link-split", "0.8,0.1,0.1"],
    "typed_files": ["preprocess", "--typed-edges", f"paper,cites,paper={inp / 'timed.csv'}", "--typed-edges",
                    f"author,writes,paper={inp / 'w.csv'}", "--node-features", f"paper={inp / 'x.npy'}",
                    "--node-features", f"author={inp / 'xa.npy'}", "--node-labels", f"author={inp / 'ya.npy'}",
                    "--edge-time-column", "t", "--add-reverse", "--num-classes", "4"],
    "ogb_typed": ["preprocess", "--ogb", inp / "mag", "--add-reverse"],
    "ogb_typed_random": ["preprocess", "--ogb", inp / "mag", "--split", "0.3,0.3,0.3"],
    "ogb_csv": ["preprocess", "--ogb", inp / "arxiv", "--undirected"],
    "ogb_csv_random": ["preprocess", "--ogb", inp / "arxiv", "--split", "random"],
    "synth": ["synth", "--nodes", "300", "--edges", "2000", "--feature-dim", "6", "--classes", "4",
              "--label-fraction", "0.5"],
    "synth_half_rcm": ["synth", "--nodes", "300", "--edges", "2000", "--feature-dtype", "float16", "--reorder", "rcm"],
    "synth_typed": ["synth", "--typed", "--scale", "0.002", "--classes", "5", "--feature-dim", "8"],
}
for name, argv in runs.items():
    assert main([str(a) for a in [*argv, "--out", out / name, "--quiet"]]) == 0, name
st.datasets.from_pyg(planetoid_data("cora"), out / "cora", quiet=True)
st.datasets.from_pyg(planetoid_data("cora"), out / "cora_undirected_rcm", undirected=True, reorder="rcm", quiet=True)
g = torch.Generator().manual_seed(0)
h = HeteroData()
h["paper"].x, h["paper"].y = torch.randn(30, 4, generator=g), torch.randint(0, 3, (30,), generator=g)
h["paper"].time, h["paper"].train_mask = torch.arange(30), torch.rand(30, generator=g) < 0.5
h["author"].num_nodes = 12
writes = h["author", "writes", "paper"]
writes.edge_index = torch.stack([torch.randint(0, 12, (60,), generator=g), torch.randint(0, 30, (60,), generator=g)])
writes.edge_attr, writes.edge_time = torch.randn(60, 2, generator=g), torch.randint(0, 100, (60,), generator=g)
h["paper", "cites", "paper"].edge_index = torch.randint(0, 30, (2, 80), generator=g)
st.datasets.from_pyg(h, out / "hetero", quiet=True)
st.datasets.from_pyg(h, out / "hetero_reverse", add_reverse=True, quiet=True)
'''


def _build(tree: Path, out: Path, inputs: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", BUILD, str(out), str(inputs)], env=env, cwd=tree, check=True)


def _compare(before: Path, after: Path) -> int:
    """Print one line per dataset; returns how many differ."""
    differ = 0
    for folder in sorted(p for p in before.iterdir() if p.is_dir()):
        metas = [json.loads((root / folder.name / "meta.json").read_text()) for root in (before, after)]
        sums = [{name: entry["sha256"] for name, entry in m["files"].items()} for m in metas]
        rest = [{k: v for k, v in m.items() if k not in ("files", "source", "created_by", "name")} for m in metas]
        same = sums[0] == sums[1] and rest[0] == rest[1]
        source = "" if metas[0]["source"] == metas[1]["source"] else \
            f"; source {metas[0]['source']} -> {metas[1]['source']}"
        print(f"{folder.name:<20} {'identical' if same else 'DIFFERS'} ({len(sums[0])} arrays){source}")
        for key in sorted(set(rest[0]) | set(rest[1])) if not same else ():
            if rest[0].get(key) != rest[1].get(key):
                print(f"    meta {key}: {rest[0].get(key)} -> {rest[1].get(key)}")
        differ += not same
    return differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (its repository root)")
    parser.add_argument("--after", type=Path, default=HERE.parent, help="default: this checkout")
    parser.add_argument("--work", type=Path, required=True, help="an empty folder for the inputs and datasets")
    args = parser.parse_args()
    for side in ("before", "after"):
        _build(getattr(args, side).resolve(), args.work / side, args.work / "inputs")
    return 1 if _compare(args.work / "before", args.work / "after") else 0


if __name__ == "__main__":
    sys.exit(main())
