"""R-GAT (MLPerf's GNN) training seeds/s on CPU on the IGBH-tiny-shaped synthetic graph, side by side.

* sparsetrain: ``Loader`` (typed ``NeighborSampler``, features in RAM) + ``sparsetrain.nn.RGAT`` block by block;
* PyG: ``torch_geometric.loader.NeighborLoader`` (torch-sparse) on a ``HeteroData`` + ``HeteroConv`` of ``GATConv``
  over the whole sampled subgraph, as MLPerf's reference (graphlearn-for-pytorch's ``rgnn.py``) writes the model;
* the same PyG user's model over ``sparsetrain.pyg.NeighborLoader`` (the one-line swap);
* DGL 2.1: ``dgl.dataloading.NeighborSampler`` + ``DataLoader`` + ``HeteroGraphConv`` of ``dgl.nn.GATConv``, as a
  DGL user writes R-GAT (IGB's ``models.py`` RGAT), run in the DGL environment (``--dgl-python``) by a child process.

Same graph, fanouts [15, 10, 5], batch size, hidden width, 4 heads, dropout, Adam learning rate and epochs for all; the
test accuracy (sampled with the same fanouts) after those epochs says the runs are comparable. seeds/s counts the
epochs after the first (which pays JIT compiles and lazy initialisation); seeds per CPU-second (the process's CPU
time over the same epochs) is printed beside it, the steadier number on a shared machine. Each system runs in its own
process on ``--threads`` threads; with ``--repeats`` the systems alternate and the median is reported. A peer that is
missing or fails is one line and the rest still prints.

    python benchmarks/rgat.py                                  # IGBH-tiny shape x 0.25, 128 features
    python benchmarks/rgat.py --scale 1.0 --dgl-python DGL_ENV/bin/python   # DGL_ENV: a torch 2.2.1 + dgl 2.1.0 venv
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from dgl_peer import DGL_PYTHON, run_json

HERE = Path(__file__).resolve().parent
FANOUTS = [15, 10, 5]
HEADS = 4
SYSTEMS = {
    "sparsetrain": "sparsetrain Loader + RGAT (blocks)",
    "pyg-over-sparsetrain": "PyG user's HeteroConv(GATConv), sparsetrain.pyg.NeighborLoader",
    "pyg": "PyG user's HeteroConv(GATConv), PyG NeighborLoader (torch-sparse)",
    "dgl": "DGL NeighborSampler + DataLoader, HeteroGraphConv(GATConv)",
}


def _epochs(model, batches_of_epoch, step, evaluate, epochs: int, lr: float) -> dict:
    """Train ``epochs`` epochs; seeds/s over the epochs after the first; the test accuracy at the end."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    timed_seeds, timed_seconds, timed_cpu = 0, 0.0, 0.0
    for epoch in range(epochs):
        model.train()
        seeds = 0
        start, cpu = time.perf_counter(), time.process_time()
        for batch in batches_of_epoch(epoch):
            optimizer.zero_grad()
            out, y = step(model, batch)
            F.cross_entropy(out, y).backward()
            optimizer.step()
            seeds += len(y)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if epoch > 0 or epochs == 1:
            timed_seeds, timed_seconds, timed_cpu = timed_seeds + seeds, timed_seconds + seconds, timed_cpu + cpu
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for out, y in evaluate(model):
            correct += int((out.argmax(-1) == y).sum())
            total += len(y)
    return {"seeds_per_second": timed_seeds / timed_seconds, "seeds_per_cpu_second": timed_seeds / timed_cpu,
            "test_acc": correct / total}


def run_sparsetrain(data: Path, a) -> dict:
    import sparsetrain as st
    from sparsetrain.nn import RGAT
    from sparsetrain.storage.tensor import TensorFeatures

    ds = st.datasets.load(data)
    features = {t: TensorFeatures(f.tensor()) for t, f in ds.features.items()}
    labels = ds.labels["paper"]

    def loader(seeds, shuffle, seed):
        sampler = st.sampling.NeighborSampler(ds.graph, FANOUTS, seed=seed, seed_type="paper")
        return st.engine.Loader(sampler, features, labels, seeds, batch_size=a.batch_size, shuffle=shuffle, seed=seed,
                                retain_host_memory=True)

    train, test = loader(ds.split["train"], True, a.seed), loader(ds.split["test"], False, a.seed + 1)
    torch.manual_seed(a.seed)
    model = RGAT(ds.node_types, ds.edge_types, ds.num_features, a.hidden, ds.num_classes, len(FANOUTS), "paper",
                 heads=HEADS, dropout=a.dropout)

    def step(model, mb):
        return model(mb.x, mb.to_pyg()), mb.y

    def evaluate(model):
        return (step(model, mb) for mb in test.epoch(0))

    return _epochs(model, train.epoch, step, evaluate, a.epochs, a.lr)


def hetero_data(data: Path):
    """The dataset as a PyG user holds it: a ``HeteroData`` in memory, ``edge_index`` (src, dst) per edge type."""
    from torch_geometric.data import HeteroData

    import sparsetrain as st

    ds = st.datasets.load(data)
    hd = HeteroData()
    for t, f in ds.features.items():
        hd[t].x = f.tensor().clone()
        hd[t].num_nodes = ds.num_nodes[t]
    hd["paper"].y = ds.labels["paper"].clone()
    for et in ds.edge_types:
        csc = ds.graph.edges[et]
        dst = torch.repeat_interleave(torch.arange(csc.num_nodes), csc.in_degrees())
        hd[et].edge_index = torch.stack([csc.indices.long(), dst])
    return hd, ds.split


class UserRGAT(torch.nn.Module):
    """R-GAT as MLPerf's reference writes it with PyG: ``HeteroConv`` of ``GATConv`` per layer over the whole sampled
    subgraph, leaky ReLU and dropout between layers, a linear head on the papers."""

    def __init__(self, edge_types, hidden: int, classes: int, layers: int, dropout: float):
        super().__init__()
        from torch_geometric.nn import GATConv, HeteroConv

        self.convs = torch.nn.ModuleList(
            HeteroConv({et: GATConv((-1, -1), hidden // HEADS, heads=HEADS, add_self_loops=False) for et in edge_types})
            for _ in range(layers))
        self.dropout = torch.nn.Dropout(dropout)
        self.lin = torch.nn.Linear(hidden, classes)

    def forward(self, x_dict, edge_index_dict):
        for i, conv in enumerate(self.convs):
            x_dict = conv(x_dict, edge_index_dict)
            if i != len(self.convs) - 1:
                x_dict = {k: self.dropout(F.leaky_relu(v)) for k, v in x_dict.items()}
        return self.lin(x_dict["paper"])


def run_pyg(data: Path, a, over_sparsetrain: bool) -> dict:
    if over_sparsetrain:
        from sparsetrain.pyg import NeighborLoader
    else:
        from torch_geometric.loader import NeighborLoader

    hd, split = hetero_data(data)
    torch.manual_seed(a.seed)
    kwargs = {"num_neighbors": FANOUTS, "batch_size": a.batch_size}
    train = NeighborLoader(hd, input_nodes=("paper", split["train"]), shuffle=True, **kwargs)
    test = NeighborLoader(hd, input_nodes=("paper", split["test"]), **kwargs)
    model = UserRGAT(hd.edge_types, a.hidden, int(hd["paper"].y.max()) + 1, len(FANOUTS), a.dropout)
    with torch.no_grad():  # the lazy layers take their widths from a batch
        batch = next(iter(train))
        model(batch.x_dict, batch.edge_index_dict)

    def step(model, batch):
        size = batch["paper"].batch_size
        return model(batch.x_dict, batch.edge_index_dict)[:size], batch["paper"].y[:size]

    def evaluate(model):
        return (step(model, batch) for batch in test)

    return _epochs(model, lambda epoch: train, step, evaluate, a.epochs, a.lr)


def run_dgl(data: Path, a) -> dict:
    """Runs inside the DGL environment: the graph from the dataset's per-edge-type CSC, as a DGL user builds it."""
    import dgl
    import dgl.nn as dglnn

    import sparsetrain as st

    ds = st.datasets.load(data)
    empty = torch.tensor([], dtype=torch.int64)
    g = dgl.heterograph({et: ("csc", (ds.graph.edges[et].indptr.long(), ds.graph.edges[et].indices.long(), empty))
                         for et in ds.edge_types}, num_nodes_dict=dict(ds.num_nodes))
    for t, f in ds.features.items():
        g.nodes[t].data["feat"] = f.tensor().clone()
    g.nodes["paper"].data["label"] = ds.labels["paper"].clone()
    sampler = dgl.dataloading.NeighborSampler(list(reversed(FANOUTS)))  # DGL lists fanouts from the input layer
    torch.manual_seed(a.seed)
    train = dgl.dataloading.DataLoader(g, {"paper": ds.split["train"]}, sampler, batch_size=a.batch_size,
                                       shuffle=True)
    test = dgl.dataloading.DataLoader(g, {"paper": ds.split["test"]}, sampler, batch_size=a.batch_size)
    in_feats = {t: f.shape[1] for t, f in ds.features.items()}

    class RGAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(dglnn.HeteroGraphConv({
                et[1]: dglnn.GATConv((in_feats[et[0]], in_feats[et[2]]) if i == 0 else a.hidden, a.hidden // HEADS,
                                     HEADS, allow_zero_in_degree=True)
                for et in g.canonical_etypes}, aggregate="sum") for i in range(len(FANOUTS)))
            self.dropout = torch.nn.Dropout(a.dropout)
            self.linear = torch.nn.Linear(a.hidden, ds.num_classes)

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = {k: v.flatten(1) for k, v in layer(block, h).items()}  # concatenate the heads
                if i != len(self.layers) - 1:
                    h = {k: self.dropout(F.leaky_relu(v)) for k, v in h.items()}
            return self.linear(h["paper"])

    def step(model, item):
        _, _, blocks = item
        return model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"]["paper"]

    def evaluate(model):
        return (step(model, item) for item in test)

    row = _epochs(RGAT(), lambda epoch: train, step, evaluate, a.epochs, a.lr)
    row["version"] = dgl.__version__
    return row


def run_system(name: str, a) -> dict:
    torch.set_num_threads(a.threads)
    if name == "dgl":
        return run_dgl(a.data, a)
    if name == "sparsetrain":
        return run_sparsetrain(a.data, a)
    return run_pyg(a.data, a, over_sparsetrain=name == "pyg-over-sparsetrain")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="dataset folder (default: made under benchmarks/out)")
    parser.add_argument("--scale", type=float, default=0.25, help="of IGBH-tiny's counts (1.0: 550K nodes)")
    parser.add_argument("--feature-dim", type=int, default=128, help="IGBH has 1024; narrower for this machine")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs of every system; the median reported")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {', '.join(SYSTEMS)}")
    parser.add_argument("--dgl-python", default=DGL_PYTHON)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=HERE / "out" / "rgat.json")
    a = parser.parse_args()
    if a.data is None:
        a.data = HERE / "out" / f"igbh-tiny-x{a.scale:g}-d{a.feature_dim}"
    if a.child:
        print(json.dumps(run_system(a.child, a)))
        return

    import sparsetrain as st

    if not (a.data / "meta.json").exists():
        st.datasets.synthesize(a.data, preset="igbh-tiny", scale=a.scale, feature_dim=a.feature_dim, seed=0)
    ds = st.datasets.load(a.data)
    flags = ["--data", a.data, "--epochs", a.epochs, "--batch-size", a.batch_size, "--hidden", a.hidden, "--dropout",
             a.dropout, "--lr", a.lr, "--seed", a.seed, "--threads", a.threads]
    runs: dict[str, list[dict]] = {}
    for _ in range(a.repeats):
        for name in a.systems.split(","):
            python = a.dgl_python if name == "dgl" else sys.executable
            if not Path(python).exists():
                print(f"({name}: no interpreter at {python}; skipped)")
                continue
            env = None
            if name == "dgl":
                import os

                env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), PYTHONPATH=str(HERE.parent))
            row = run_json([python, __file__, "--child", name, *map(str, flags)], env)
            if "error" in row:
                print(f"({name} failed: {row['error']})")
                continue
            runs.setdefault(name, []).append(row)
            print(f"{name}: {row['seeds_per_second']:.0f} seeds/s ({row['seeds_per_cpu_second']:.0f} per CPU-second), "
                  f"test acc {row['test_acc']:.3f}", flush=True)
    rows = []
    for name, got in runs.items():
        label = SYSTEMS[name] + (f" (DGL {got[0]['version']})" if name == "dgl" else "")
        rows.append({"system": name, "label": label, "runs": got,
                     "seeds_per_second": statistics.median(r["seeds_per_second"] for r in got),
                     "seeds_per_cpu_second": statistics.median(r["seeds_per_cpu_second"] for r in got),
                     "test_acc": statistics.median(r["test_acc"] for r in got)})
    ours = next((r["seeds_per_second"] for r in rows if r["system"] == "sparsetrain"), None)
    print(f"\n{sum(ds.num_nodes.values()):,} nodes ({', '.join(f'{t} {n:,}' for t, n in ds.num_nodes.items())}), "
          f"{ds.graph.num_edges:,} edges of {len(ds.edge_types)} types, {a.feature_dim} features; fanouts {FANOUTS}, "
          f"batch {a.batch_size}, hidden {a.hidden}, {HEADS} heads, {a.epochs} epochs, {a.threads} threads, "
          f"{a.repeats} alternating run(s)")
    print(f"{'system':<72} {'seeds/s':>9} {'per CPU-s':>10} {'test acc':>9} {'sparsetrain faster by':>22}")
    for r in rows:
        r["sparsetrain_speedup"] = None if ours is None else ours / r["seeds_per_second"]
        ratio = "" if ours is None else f"{r['sparsetrain_speedup']:.2f}x"
        print(f"{r['label']:<72} {r['seeds_per_second']:>9.0f} {r['seeds_per_cpu_second']:>10.0f} "
              f"{r['test_acc']:>9.3f} {ratio:>22}")
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"graph": str(a.data), "num_nodes": ds.num_nodes, "num_edges": ds.graph.num_edges,
                                  "settings": {k: str(v) for k, v in vars(a).items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
