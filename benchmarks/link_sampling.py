"""Edge-seed sampling for link prediction: sparsetrain vs DGL vs PyG's LinkNeighborLoader, and a training step vs DGL.

    python benchmarks/link_sampling.py --data /path/to/products     # a products-scale dataset folder
    python benchmarks/link_sampling.py --small                       # a 200K-node synthetic graph (made if missing)

Batches of 1024 seed edges (the same edges for every library: random CSC positions from a NumPy
generator), 1 uniform negative per positive, fanouts [15, 10, 5] from the seeds outwards, the
endpoints of positives and negatives sampled as one batch:

* sparsetrain: ``LinkNeighborSampler`` (binary negatives) with the seed edges excluded
  (``exclude="self"``) and without exclusion;
* DGL: ``as_edge_prediction_sampler(NeighborSampler, exclude="self",
  negative_sampler=Uniform(1))`` in the DGL environment (a subprocess, ``--peer dgl``);
* PyG: ``LinkNeighborLoader(neg_sampling="binary")`` over the same CSC (given as ``adj_t``, so
  torch-sparse samples it without a conversion); PyG has no seed-edge exclusion.

The training step: the same batches, features gathered, a 3-layer GraphSAGE (hidden 256, mean
aggregation) with a dot-product decoder, BCE, Adam; sparsetrain (PyG's SAGEConv on its blocks) vs
DGL (DGL's SAGEConv on its blocks), in the same run. Writes benchmarks/out/link_sampling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from dgl_peer import add_peer_flag, run_in_dgl_env
from peers import pyg_sampler_missing, say_missing

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
HIDDEN = 256


def edge_batches(indptr: np.ndarray, batch_size: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` batches of random CSC edge positions (identical in every environment)."""
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(int(indptr[-1]), batch_size, replace=False)) for _ in range(count)]


def endpoints(indptr: np.ndarray, indices: np.ndarray, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) of the edges at CSC ``positions``."""
    dst = np.searchsorted(indptr, positions, side="right") - 1
    return torch.from_numpy(indices[positions].astype(np.int64)), torch.from_numpy(dst.astype(np.int64))


def timed(run, batches, rounds: int, warmup: int = 2) -> dict:
    """Median over ``rounds`` of one pass over ``batches`` (``run(batch)`` returns the sampled edge count)."""
    for b in batches[:warmup]:
        run(b)
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        edges = sum(run(b) for b in batches)
        elapsed = time.perf_counter() - start
        results.append(
            {
                "seconds": elapsed,
                "edges_per_s": edges / elapsed,
                "seed_edges_per_s": sum(len(b) for b in batches) / elapsed,
                "ms_per_batch": 1000 * elapsed / len(batches),
            }
        )
    return min(results, key=lambda r: abs(r["seconds"] - statistics.median(x["seconds"] for x in results)))


# ---------------- sparsetrain ----------------
def ours(ds, batches, args, exclude: str) -> dict:
    from sparsetrain.sampling import EdgeSamplerInput, LinkNeighborSampler, NeighborSampler

    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    sampler = LinkNeighborSampler(
        NeighborSampler(ds.graph, args.fanouts, seed=0), neg_sampling="binary", exclude=exclude
    )
    inputs = [EdgeSamplerInput(*endpoints(indptr, indices, b), key=i) for i, b in enumerate(batches)]
    return timed(lambda inp: sampler.sample(inp).num_sampled_edges, inputs, args.rounds)


def ours_step(ds, batches, args) -> dict:
    from sparsetrain.engine.link_task import link_loss
    from sparsetrain.nn.link import build_link_model
    from sparsetrain.sampling import EdgeSamplerInput, LinkNeighborSampler, NeighborSampler
    from sparsetrain.storage.rows import gather_rows

    torch.manual_seed(0)
    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    sampler = LinkNeighborSampler(
        NeighborSampler(ds.graph, args.fanouts, seed=0), neg_sampling="binary", exclude="self"
    )
    model = build_link_model(ds.num_features, HIDDEN, len(args.fanouts), "dot", dropout=0.0, normalize_rows=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = [EdgeSamplerInput(*endpoints(indptr, indices, b), key=i) for i, b in enumerate(batches[: args.steps])]

    def step(inp):
        mb = sampler.sample(inp)
        x = gather_rows(ds.features, mb.input_nodes)
        opt.zero_grad()
        loss = link_loss(model(x, mb.to_pyg(), mb.edge_label_index), mb.edge_label)
        loss.backward()
        opt.step()
        return mb.num_sampled_edges

    return timed(step, inputs, 1, warmup=1)


# ---------------- PyG ----------------
def pyg(ds, batches, args) -> dict:
    from torch_geometric.data import Data
    from torch_geometric.loader import LinkNeighborLoader
    from torch_sparse import SparseTensor

    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    n = ds.num_nodes
    # adj_t row v lists v's in-neighbors: exactly the CSC, handed over without a sort
    adj_t = SparseTensor(
        rowptr=ds.graph.indptr,
        col=torch.from_numpy(indices.astype(np.int64)),
        sparse_sizes=(n, n),
        is_sorted=True,
        trust_data=True,
    )
    data = Data(adj_t=adj_t, num_nodes=n)
    pairs = [torch.stack(endpoints(indptr, indices, b)) for b in batches]
    loader = LinkNeighborLoader(
        data,
        num_neighbors=args.fanouts,
        edge_label_index=torch.cat(pairs, 1),
        neg_sampling="binary",
        batch_size=args.batch_size,
        shuffle=False,
    )
    index_batches = [torch.arange(i * args.batch_size, (i + 1) * args.batch_size) for i in range(len(batches))]
    torch.set_num_threads(args.threads)
    return timed(lambda idx: int(loader.collate_fn(idx).num_edges), index_batches, args.rounds)


# ---------------- DGL (in the DGL environment) ----------------
def dgl_peer(args) -> None:
    """``--peer dgl``: time DGL's edge-prediction sampler (and a training step) on the dataset."""
    import dgl
    import dgl.nn as dglnn
    import torch.nn.functional as F

    from sparsetrain.datasets import load

    torch.set_num_threads(args.threads)
    ds = load(args.data)
    indptr, indices = ds.graph.indptr.to(torch.int64), ds.graph.indices.to(torch.int64)
    # edge id = CSC position
    g = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int64))), num_nodes=ds.num_nodes)
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(list(reversed(args.fanouts))), exclude="self",
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(1))
    batches = [torch.from_numpy(b) for b in edge_batches(ds.graph.indptr.numpy(), args.batch_size, args.batches)]

    def run(eids):
        return sum(b.num_edges() for b in sampler.sample(g, eids)[3])

    result = {"sampling": timed(run, batches, args.rounds), "dgl": dgl.__version__, "torch": torch.__version__}
    if args.steps:
        torch.manual_seed(0)
        dims = [ds.num_features] + [HIDDEN] * len(args.fanouts)
        convs = torch.nn.ModuleList([dglnn.SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:])])
        opt = torch.optim.Adam(convs.parameters(), lr=1e-3)
        feats = ds.features

        def step(eids):
            input_nodes, pair, neg, blocks = sampler.sample(g, eids)
            h = torch.from_numpy(np.asarray(feats.numpy()[input_nodes.numpy()]))
            for i, (conv, block) in enumerate(zip(convs, blocks)):
                h = conv(block, h)
                h = h.relu() if i < len(convs) - 1 else h
            score = lambda pg: (h[pg.edges()[0]] * h[pg.edges()[1]]).sum(-1)  # noqa: E731
            pos, negs = score(pair), score(neg)
            loss = F.binary_cross_entropy_with_logits(
                torch.cat([pos, negs]), torch.cat([torch.ones_like(pos), torch.zeros_like(negs)])
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            return sum(b.num_edges() for b in blocks)

        result["step"] = timed(step, batches[: args.steps], 1, warmup=1)
    print(json.dumps(result))


def dgl_run(args, threads: int) -> dict:
    return run_in_dgl_env(
        __file__,
        [
            "--data", args.data, "--batches", args.batches, "--rounds", args.rounds, "--batch-size", args.batch_size,
            "--threads", threads, "--steps", args.steps, "--fanouts", *args.fanouts,
        ],
        threads,
    )


def small_dataset() -> Path:
    from sparsetrain.datasets import synthesize

    path = OUT / "synthetic-200k"
    if not (path / "meta.json").is_file():
        synthesize(path, 200_000, 10_000_000, feature_dim=100, num_classes=47, seed=0, overwrite=True, quiet=True)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("SPARSETRAIN_PRODUCTS", HERE / "out" / "products")),
        help="products-scale dataset folder (default benchmarks/out/products or $SPARSETRAIN_PRODUCTS)",
    )
    parser.add_argument("--small", action="store_true", help="a 200K-node / 10M-edge synthetic graph instead")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=10, help="batches per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="training steps timed per library (0: none)")
    parser.add_argument("--threads", type=int, default=2, help="torch/OpenMP threads of the peers")
    parser.add_argument("--skip-dgl", action="store_true")
    parser.add_argument("--skip-pyg", action="store_true")
    add_peer_flag(parser)
    args = parser.parse_args(argv)
    if args.peer == "dgl":
        dgl_peer(args)
        return
    from sparsetrain.datasets import load

    if args.small:
        args.data = small_dataset()
    if not (args.data / "meta.json").is_file():
        sys.exit(
            f"{args.data}: no dataset; make one with `sparsetrain synth --nodes 2400000 --edges 120000000 "
            f"--out {args.data}` or pass --small"
        )
    ds = load(args.data)
    batches = edge_batches(ds.graph.indptr.numpy(), args.batch_size, args.batches)
    rows = {
        "sparsetrain (exclude self)": ours(ds, batches, args, "self"),
        "sparsetrain (no exclusion)": ours(ds, batches, args, "none"),
    }
    dgl = {} if args.skip_dgl else dgl_run(args, args.threads)
    if "sampling" in dgl:
        rows["DGL (exclude self)"] = dgl["sampling"]
    if not args.skip_pyg:
        why = pyg_sampler_missing("torch_sparse")
        if why is None:
            rows["PyG LinkNeighborLoader (torch-sparse)"] = pyg(ds, batches, args)
        else:
            say_missing("PyG LinkNeighborLoader", why)
    steps = {}
    if args.steps:
        steps["sparsetrain"] = ours_step(ds, batches, args)
        if "step" in dgl:
            steps["DGL"] = dgl["step"]
    ours_ms = rows["sparsetrain (exclude self)"]["ms_per_batch"]
    print(
        f"{args.data.name}: {ds.num_nodes:,} nodes, {ds.num_edges:,} edges; {args.batch_size} seed edges + "
        f"1 uniform negative each, fanouts {args.fanouts}"
    )
    print(f"{'sampler':42s} {'ms/batch':>9s} {'seed edges/s':>13s} {'sampled edges/s':>16s} {'vs sparsetrain':>15s}")
    for name, r in rows.items():
        print(
            f"{name:42s} {r['ms_per_batch']:9.1f} {r['seed_edges_per_s']:13,.0f} {r['edges_per_s']:16,.0f} "
            f"{r['ms_per_batch'] / ours_ms:14.2f}x"
        )
    for name, r in steps.items():
        print(f"training step {name:28s} {r['ms_per_batch']:9.1f} ms")
    if "error" in dgl:
        print(f"DGL peer failed: {dgl['error']}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "link_sampling.json").write_text(
        json.dumps(
            {
                "dataset": str(args.data),
                "fanouts": args.fanouts,
                "batch_size": args.batch_size,
                "sampling": rows,
                "step": steps,
                "dgl": {k: v for k, v in dgl.items() if k not in ("sampling", "step")},
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
