"""The drop-in's host time per batch (issue 36, item 4): ``sparsetrain.pyg.NeighborLoader`` against PyG's own
``NeighborLoader`` (torch-sparse) and sparsetrain's ``Loader`` stages, on the CPU, where the device work is negligible.

    python benchmarks/dropin_host.py                      # 100K nodes, 2M edges, 16 features
    python benchmarks/dropin_host.py --batches 20 --rounds 3

On a GPU the host's Python sets a step's pace (the drop-in's step on an H200: 17.0 ms with the ``Data`` on the host,
``device="cuda"``); the Python each batch runs is the same code on a CPU, so it is measured here with features 16 wide
and fanouts small enough that the host's bookkeeping is a visible part of a batch. Two shapes: batch 1024 with
[15, 10, 5] and a tiny batch 64 with [5, 5]. Per batch, two halves, each timed with ``time.perf_counter``:

- sample: drop-in = what ``loader.collate_fn(index)`` runs before the filter (PyG's seed slice, our sampler,
  ``pyg_output``); PyG = the same calls on its loader (torch-sparse's C++ sampler); ``Loader`` = the ``Sample``
  stage on a ``SamplerInput``, with ``hop_nodes="new"`` (the drop-in's draws: the same batch, so drop-in minus
  ``Loader`` is the adapter's cost);
- fetch: drop-in and PyG = ``loader.filter_fn(out)`` (PyG's ``filter_data``: ``x``, ``y``, ``edge_index``, ids);
  ``Loader`` = the ``FetchFeatures`` stage (``x``, ``y``).

Then ``LinkNeighborLoader``, ours against PyG's: 64 seed edges a batch with as many binary negatives drawn by a
node weight (``NegativeSampling("binary", dst_weight=...)``), [5, 5]; sample = the seed slice and
``link_sampler.sample_from_edges``, fetch = ``filter_fn``.

Also counted, free of the machine's load: Python function calls (and calls into C) per batch, from
``sys.setprofile``. Loaders alternate within each round; medians over rounds of the per-batch mean. Numba and torch
run ``--threads`` threads (default 1: on a shared 2-core machine a parallel kernel's barrier stalls whenever one of its
threads is descheduled, 2 ms batches turning into 20 ms ones, which would bury the host's costs).
Writes benchmarks/out/dropin_host.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numba
import numpy as np
import torch
from peers import pyg_sampler_missing, say_missing

OUT = Path(__file__).resolve().parent / "out"
SHAPES = ((1024, [15, 10, 5]), (64, [5, 5]))
LINK_SHAPE = (64, [5, 5])  # seed edges a batch (and as many negatives), fanouts


def make_data(num_nodes: int, num_edges: int, features: int, seed: int):
    """A random graph as a PyG ``Data``: uniform edges, ``features`` float32 columns, 10 classes."""
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    edge_index = torch.from_numpy(rng.integers(0, num_nodes, (2, num_edges)))
    x = torch.from_numpy(rng.standard_normal((num_nodes, features), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 10, num_nodes))
    return Data(x=x, y=y, edge_index=edge_index, num_nodes=num_nodes)


class PygLike:
    """A PyG-style loader's two halves over its own index batches: its ``collate_fn`` less the filter (the seed slice
    and ``node_sampler.sample_from_nodes``) and ``filter_fn``."""

    def __init__(self, loader) -> None:
        self.loader = loader
        self.indices = list(loader._index_sampler)

    def batch(self, i: int):
        loader, inputs = self.loader, self.loader.input_data[self.indices[i]]
        if hasattr(loader, "link_sampler"):
            return loader.link_sampler.sample_from_edges(inputs, neg_sampling=loader.neg_sampling)
        return loader.node_sampler.sample_from_nodes(inputs)

    def fetch(self, out):
        return self.loader.filter_fn(out)


class Stages:
    """sparsetrain's ``Loader`` stages, ``Sample`` and ``FetchFeatures``, over the same seed batches."""

    def __init__(self, data, fanouts: list[int], seeds: torch.Tensor, batch_size: int) -> None:
        from sparsetrain.engine.stages import FetchFeatures, Sample
        from sparsetrain.sampling import CSCGraph, NeighborSampler

        graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
        self.sample_stage = Sample(NeighborSampler(graph, fanouts, seed=0, hop_nodes="new"))
        self.fetch_stage = FetchFeatures(data.x, data.y)
        self.seeds = list(seeds.split(batch_size))

    def batch(self, i: int):
        from sparsetrain.sampling import SamplerInput

        return self.sample_stage(SamplerInput(self.seeds[i], key=i))

    def fetch(self, mb):
        return self.fetch_stage(mb)


def runners(data, seeds: torch.Tensor, batch_size: int, fanouts: list[int]) -> dict:
    from torch_geometric.loader import NeighborLoader as PygLoader

    from sparsetrain.pyg import NeighborLoader

    common = dict(num_neighbors=fanouts, input_nodes=seeds, batch_size=batch_size, shuffle=False)
    found = {"sparsetrain.pyg (drop-in)": PygLike(NeighborLoader(data, **common, seed=0))}
    why = pyg_sampler_missing()
    if why is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG: sampling without pyg-lib is deprecated
            found["PyG + torch-sparse"] = PygLike(PygLoader(data, **common))
    else:
        say_missing("PyG's NeighborLoader", why)
    return {**found, "sparsetrain Loader stages": Stages(data, fanouts, seeds, batch_size)}


def link_runners(data, batch_size: int, fanouts: list[int], args) -> dict:
    """``LinkNeighborLoader``s, ours and PyG's, over the same seed edges with binary negatives weighted by node."""
    from torch_geometric.loader import LinkNeighborLoader as PygLoader
    from torch_geometric.sampler import NegativeSampling

    from sparsetrain.pyg import LinkNeighborLoader

    generator = torch.Generator().manual_seed(args.seed)
    dst_weight = torch.rand(data.num_nodes, generator=generator)
    label_index = data.edge_index[:, : batch_size * (1 + args.batches * (args.rounds + 1))]
    common = dict(num_neighbors=fanouts, edge_label_index=label_index, batch_size=batch_size, shuffle=False,
                  neg_sampling=NegativeSampling("binary", dst_weight=dst_weight))
    found = {"sparsetrain.pyg (drop-in)": PygLike(LinkNeighborLoader(data, **common, seed=0))}
    why = pyg_sampler_missing()
    if why is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found["PyG + torch-sparse"] = PygLike(PygLoader(data, **common))
    else:
        say_missing("PyG's LinkNeighborLoader", why)
    return found


def time_batches(runner, batches: range) -> dict:
    """Mean ms per batch of the sample and fetch halves over ``batches``."""
    sample = fetch = 0.0
    for i in batches:
        t0 = time.perf_counter()
        out = runner.batch(i)
        t1 = time.perf_counter()
        runner.fetch(out)
        t2 = time.perf_counter()
        sample, fetch = sample + t1 - t0, fetch + t2 - t1
    return {"sample_ms": 1e3 * sample / len(batches), "fetch_ms": 1e3 * fetch / len(batches)}


def count_calls(runner, batches: range) -> float:
    """Python function calls plus calls into C per batch (``sys.setprofile``'s call events)."""
    calls = 0

    def count(frame, event, arg) -> None:
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        for i in batches:
            runner.fetch(runner.batch(i))
    finally:
        sys.setprofile(None)
    return calls / len(batches)


def measure(data, batch_size: int, fanouts: list[int], args, link: bool = False) -> dict:
    need = batch_size * (1 + args.batches * (args.rounds + 1))
    seeds = torch.from_numpy(np.random.default_rng(args.seed).permutation(data.num_nodes)[:need])
    runs = link_runners(data, batch_size, fanouts, args) if link else runners(data, seeds, batch_size, fanouts)
    for runner in runs.values():  # warm-up: compile, first touches
        time_batches(runner, range(1))
    rounds = {name: [] for name in runs}
    for r in range(args.rounds):
        batches = range(1 + r * args.batches, 1 + (r + 1) * args.batches)
        for name, runner in runs.items():
            rounds[name].append(time_batches(runner, batches))
    calls_at = range(1 + args.rounds * args.batches, 1 + (args.rounds + 1) * args.batches)
    rows = {}
    for name, runner in runs.items():
        med = {k: statistics.median(x[k] for x in rounds[name]) for k in ("sample_ms", "fetch_ms")}
        rows[name] = {**med, "total_ms": med["sample_ms"] + med["fetch_ms"], "calls_per_batch":
                      count_calls(runner, calls_at), "rounds": rounds[name]}
    return {"batch_size": batch_size, "fanouts": fanouts, "link": link, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--batches", type=int, default=10, help="batches per loader per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="Numba's and torch's threads")
    args = parser.parse_args()
    numba.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    data = make_data(args.nodes, args.edges, args.features, args.seed)
    results = [measure(data, b, f, args) for b, f in SHAPES] + [measure(data, *LINK_SHAPE, args, link=True)]
    print(f"\n{args.nodes:,} nodes, {args.edges:,} edges, {args.features} features; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}, {args.threads} Numba and torch thread(s); ms per batch (perf_counter), median of "
          f"{args.rounds} rounds\n")
    print("| batch, fanouts | loader | sample ms | fetch ms | total ms | vs drop-in | Python calls a batch |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for res in results:
        ours = res["rows"]["sparsetrain.pyg (drop-in)"]["total_ms"]
        shape = f"{'link ' if res['link'] else ''}{res['batch_size']}, {res['fanouts']}"
        for name, row in res["rows"].items():
            print(f"| {shape} | {name} | {row['sample_ms']:.3f} | {row['fetch_ms']:.3f} "
                  f"| {row['total_ms']:.3f} | {row['total_ms'] / ours:.2f}x | {row['calls_per_batch']:.0f} |")
    OUT.mkdir(exist_ok=True)
    summary = {"graph": {"nodes": args.nodes, "edges": args.edges, "features": args.features},
               "cores": os.cpu_count(), "threads": args.threads, "timer": "time.perf_counter",
               "shapes": results}
    (OUT / "dropin_host.json").write_text(json.dumps(summary, indent=2))
    print(f"\nwrote {OUT / 'dropin_host.json'}")


if __name__ == "__main__":
    main()
