"""Time per training batch (and extrapolated per epoch) of the same 3-layer GraphSAGE, side by side.

sparsetrain `Loader` (features in RAM, and memory-mapped behind a 10%-of-rows cache) vs PyG
(torch-sparse; `NeighborLoader` with a plain model, and block by block) vs DGL `DataLoader` +
`NeighborSampler` (run in the DGL environment by a child process of this run). PyG's `trim_to_layer`
needs pyg-lib (not on PyPI); its block-by-block counterpart with torch-sparse is the legacy
`torch_geometric.loader.NeighborSampler`, which is what the fair PyG row uses. Same graph, same
model shape (hidden 256, fanouts [15,10,5], batch 1024), same machine, back to back.

    python benchmarks/train_epoch.py                         # products scale (benchmarks/out/products, made if missing)
    python benchmarks/train_epoch.py --data DIR --batches 20 --dgl-python .ci/venv-dgl/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from dgl_peer import DGL_PYTHON, run_json
from peers import dgl_missing, pyg_sampler_missing, say_missing

HERE = Path(__file__).resolve().parent
FANOUTS = [15, 10, 5]
HIDDEN = 256
BATCH = 1024


def _train_steps(model, batches, forward, warmup: int, count: int, precision: str = "fp32") -> tuple[float, float]:
    """Mean seconds per full step (load + forward + backward + update) and per load.

    ``precision="bf16"``: forward and loss under bfloat16 autocast (weights and optimizer stay float32).
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    model.train()
    it = iter(batches)
    step_times, load_times = [], []
    for i in range(warmup + count):
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out, y = forward(model, batch)
            loss = F.cross_entropy(out.float(), y)
        loss.backward()
        optimizer.step()
        t2 = time.perf_counter()
        if i >= warmup:
            step_times.append(t2 - t0)
            load_times.append(t1 - t0)
    return float(np.mean(step_times)), float(np.mean(load_times))


def run_sparsetrain(
    ds, features, label: str, warmup: int, count: int,
    spmm: bool = True,
    loader_threads: int | None = None,
    precision: str = "fp32",
    prefetch: int = 2,
) -> dict:
    import sparsetrain as st
    from sparsetrain.nn.models import GraphSAGE

    sampler = st.sampling.NeighborSampler(ds.graph, FANOUTS, seed=0)
    loader = st.engine.Loader(
        sampler,
        features,
        ds.labels,
        ds.split["train"],
        batch_size=BATCH,
        seed=0,
        prefetch=prefetch,
        loader_threads=loader_threads,
        retain_host_memory=True,
    )  # what Trainer and the CLI apply
    model = GraphSAGE(ds.num_features, HIDDEN, ds.num_classes, num_layers=3, spmm=spmm)

    def forward(model, mb):
        return model(mb.x, mb.to_pyg()), mb.y

    epoch = loader.epoch(0)
    start = time.perf_counter()
    step, load = _train_steps(model, epoch, forward, warmup, count, precision)
    stats = loader.last_epoch_stats
    elapsed = time.perf_counter() - start
    epoch.close()
    return {"system": label, "precision": precision, "ms_per_batch": 1e3 * step, "loader_wait_ms": 1e3 * load,
            "stall_fraction": stats.wait_seconds / elapsed, "batches_per_epoch": len(loader)}


def run_pyg(ds, x, warmup: int, count: int, block_wise: bool) -> dict:
    """PyG with torch-sparse. ``block_wise``: the legacy ``NeighborSampler`` giving per-layer bipartite
    adjacencies (each layer computed only for the nodes the next needs). ``trim_to_layer`` would be the
    NeighborLoader way, but it needs per-hop counts that only pyg-lib (not on PyPI) reports."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader, NeighborSampler
    from torch_geometric.nn import SAGEConv

    g = ds.graph
    col = torch.repeat_interleave(torch.arange(g.num_nodes), g.in_degrees())
    edge_index = torch.stack([g.indices.long(), col])
    dims = [ds.num_features, HIDDEN, HIDDEN, ds.num_classes]

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))

        def forward(self, x, layers):
            for i, conv in enumerate(self.convs):
                edge_index, size = layers[i]
                x = conv((x, x[: size[1]]), edge_index) if size else conv(x, edge_index)
                if i < 2:
                    x = F.dropout(F.relu(x), 0.5, self.training)
            return x

    if block_wise:
        loader = NeighborSampler(
            edge_index, sizes=FANOUTS, node_idx=ds.split["train"], batch_size=BATCH, shuffle=True, num_nodes=g.num_nodes
        )

        def forward(model, item):
            batch_size, n_id, adjs = item
            out = model(x[n_id], [(adj.edge_index, adj.size) for adj in adjs])
            return out, ds.labels[n_id[:batch_size]]

        name = "PyG legacy NeighborSampler (block by block)"
    else:
        data = Data(x=x, y=ds.labels, edge_index=edge_index, num_nodes=g.num_nodes)
        loader = NeighborLoader(
            data, num_neighbors=FANOUTS, batch_size=BATCH, input_nodes=ds.split["train"], shuffle=True
        )

        def forward(model, batch):
            out = model(batch.x, [(batch.edge_index, None)] * 3)
            return out[: batch.batch_size], batch.y[: batch.batch_size]

        name = "PyG NeighborLoader (plain 3-layer model)"
    step, load = _train_steps(SAGE(), loader, forward, warmup, count)
    return {
        "system": name,
        "precision": "fp32",
        "ms_per_batch": 1e3 * step,
        "loader_wait_ms": 1e3 * load,
        "stall_fraction": load / step,
    }


def run_dgl(name: str, data_dir: Path, warmup: int, count: int) -> dict:
    """Runs inside the DGL environment. ``-same-allocator`` in ``name``: the glibc settings sparsetrain's Trainer
    applies (sparsetrain is installed there without dependencies), so the comparison is not only about page
    faults; ``-bf16``: bfloat16 autocast, as for sparsetrain's bf16 row."""
    import dgl
    import dgl.nn as dglnn

    if "same-allocator" in name:
        from sparsetrain.engine.host_memory import retain_freed_host_memory

        assert retain_freed_host_memory(), "glibc mallopt unavailable"

    meta = json.loads((data_dir / "meta.json").read_text())
    indptr = torch.from_numpy(np.load(data_dir / "indptr.npy"))
    indices = torch.from_numpy(np.load(data_dir / "indices.npy").astype(np.int64))
    g = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int64))), num_nodes=len(indptr) - 1)
    g.ndata["feat"] = torch.from_numpy(np.load(data_dir / "features.npy"))
    g.ndata["label"] = torch.from_numpy(np.load(data_dir / "labels.npy"))
    train = torch.from_numpy(np.load(data_dir / "train_idx.npy"))
    num_classes = meta["labels"]["_N"]["num_classes"] if meta["format_version"] >= 3 else meta["num_classes"]
    sampler = dgl.dataloading.NeighborSampler(list(reversed(FANOUTS)))  # DGL lists fanouts from the input layer
    loader = dgl.dataloading.DataLoader(
        g, train, sampler, batch_size=BATCH, shuffle=True, drop_last=False, num_workers=0
    )

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            dims = [g.ndata["feat"].shape[1], HIDDEN, HIDDEN, num_classes]
            self.layers = torch.nn.ModuleList(dglnn.SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:]))

        def forward(self, blocks, x):
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                x = layer(block, x)
                if i < 2:
                    x = F.dropout(F.relu(x), 0.5, self.training)
            return x

    def forward(model, item):
        _, _, blocks = item
        return model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"]

    step, load = _train_steps(SAGE(), loader, forward, warmup, count, _precision(name))
    label = SYSTEMS[name]
    return {"system": label + f" (DGL {dgl.__version__})", "precision": _precision(name), "ms_per_batch": 1e3 * step,
            "loader_wait_ms": 1e3 * load, "stall_fraction": load / step}


def _precision(name: str) -> str:
    return "bf16" if "bf16" in name else "fp32"


SYSTEMS = {
    "sparsetrain": "sparsetrain Loader, features in RAM",
    "sparsetrain-1-loader-thread": "sparsetrain, features in RAM, 1 loader thread",
    "sparsetrain-scatter": "sparsetrain, features in RAM, scatter aggregation",
    "sparsetrain-no-overlap": "sparsetrain, features in RAM, prefetch=0 (no overlap)",
    "sparsetrain-mmap-cache": "sparsetrain Loader, mmap features + 10% hybrid cache",
    "sparsetrain-bf16": "sparsetrain, features in RAM, bf16 autocast",
    "dgl": "DGL DataLoader + NeighborSampler",
    "dgl-same-allocator": "DGL, with sparsetrain's allocator settings",
    "dgl-bf16": "DGL, bf16 autocast",
    "dgl-bf16-same-allocator": "DGL, bf16 autocast + sparsetrain's allocator settings",
    "pyg-blocks": "PyG legacy NeighborSampler (block by block)",
    "pyg-plain": "PyG NeighborLoader (plain 3-layer model)",
}


def run_system(name: str, data: Path, warmup: int, count: int) -> dict:
    """One system, in this process (the parent runs each in a child so memory and timings stay apart)."""
    if name.startswith("dgl"):
        return run_dgl(name, data, warmup, count)
    import sparsetrain as st

    ds = st.datasets.load(data)
    in_ram = torch.from_numpy(np.load(data / "features.npy"))
    if name == "sparsetrain":
        return run_sparsetrain(ds, in_ram, SYSTEMS[name], warmup, count)
    if name == "sparsetrain-1-loader-thread":
        return run_sparsetrain(ds, in_ram, SYSTEMS[name], warmup, count, loader_threads=1)
    if name == "sparsetrain-no-overlap":
        return run_sparsetrain(ds, in_ram, SYSTEMS[name], warmup, count, prefetch=0)
    if name == "sparsetrain-bf16":
        return run_sparsetrain(ds, in_ram, SYSTEMS[name], warmup, count, precision="bf16")
    if name == "sparsetrain-scatter":
        return run_sparsetrain(ds, in_ram, SYSTEMS[name], warmup, count, spmm=False)
    if name == "sparsetrain-mmap-cache":
        del in_ram
        backing = st.storage.MmapFeatures(data / "features.npy")
        cache = st.storage.CachedFeatures(backing, capacity_bytes=int(0.1 * backing.nbytes), policy="hybrid",
                                          hotness=ds.graph.in_degrees().numpy())
        return run_sparsetrain(ds, cache, SYSTEMS[name], warmup, count)
    return run_pyg(ds, in_ram, warmup, count, block_wise=name == "pyg-blocks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=HERE / "out" / "products")
    parser.add_argument("--batches", type=int, default=20, help="timed batches per system (after warm-up)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pyg-plain-batches", type=int, default=2, help="the plain PyG model takes seconds a batch")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {', '.join(SYSTEMS)}")
    parser.add_argument("--dgl-python", default=DGL_PYTHON)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=HERE / "out" / "train_epoch.json")
    args = parser.parse_args()

    if args.child:
        print(json.dumps(run_system(args.child, args.data, args.warmup, args.batches)))
        return

    import sparsetrain as st

    if not (args.data / "meta.json").exists():
        st.datasets.synthesize(args.data, 2_400_000, 120_000_000, feature_dim=100, num_classes=47)
    ds = st.datasets.load(args.data)
    rows = []
    for name in args.systems.split(","):
        python = args.dgl_python if name.startswith("dgl") else sys.executable
        why = dgl_missing(python) if name.startswith("dgl") else (
            pyg_sampler_missing("torch_sparse") if name.startswith("pyg") else None)
        if why is not None:
            say_missing(name, why)
            continue
        warmup, count = (1, args.pyg_plain_batches) if name == "pyg-plain" else (args.warmup, args.batches)
        row = run_json(
            [
                python, __file__, "--child", name, "--data",
                str(args.data),
                "--warmup",
                str(warmup),
                "--batches",
                str(count),
            ]
        )
        if "error" in row:
            print(f"({name} failed: {row['error']})")
            continue
        rows.append(row)
        print(f"{rows[-1]['system']}: {rows[-1]['ms_per_batch']:.1f} ms/batch", flush=True)

    # each row against sparsetrain at the same precision
    ours_at = {
        r["precision"]: r["ms_per_batch"]
        for r in rows
        if r["system"] in (SYSTEMS["sparsetrain"], SYSTEMS["sparsetrain-bf16"])
    }
    ours = ours_at.get("fp32", ours_at.get("bf16"))
    print(f"\n{ds.num_nodes:,} nodes, {ds.num_edges:,} edges, fanouts {FANOUTS}, batch {BATCH}, hidden {HIDDEN}, "
          f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}")
    print(f"{'system':<56} {'ms/batch':>9} {'loader wait ms':>15} {'stall':>7} {'ours faster by (same precision)':>32}")
    for r in rows:
        r["sparsetrain_speedup"] = r["ms_per_batch"] / ours_at.get(r["precision"], ours)
        print(
            f"{r['system']:<56} {r['ms_per_batch']:>9.1f} {r['loader_wait_ms']:>15.1f} "
            f"{r['stall_fraction']:>7.1%} {r['sparsetrain_speedup']:>31.2f}x"
        )
    batches = -(-len(ds.split["train"]) // BATCH)
    print(
        f"\nepoch = {batches} batches: sparsetrain ~{ours * batches / 1e3:.0f} s (extrapolated from the timed batches)"
    )
    cached = next((r for r in rows if r["system"] == SYSTEMS["sparsetrain-mmap-cache"]), None)
    if cached:
        print(f"mmap + 10% cache vs in RAM: {cached['ms_per_batch'] / ours:.2f}x")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"graph": str(args.data), "num_nodes": ds.num_nodes, "num_edges": ds.num_edges, "rows": rows}, indent=2
        )
    )


if __name__ == "__main__":
    main()
