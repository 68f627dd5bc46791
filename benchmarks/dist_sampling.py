"""Distributed sampling cost: `DistNeighborSampler` on W gloo ranks (processes on this machine) against the
single-process `NeighborSampler` on the whole graph, same seeds and keys, measured in the same run.

Per rank: seconds per batch and bytes sent per batch (request ids, served rows, headers). The batches are checked
equal to the single-process ones. Prints a table and writes JSON.

    python benchmarks/dist_sampling.py PARTITIONED_DIR DATA --batches 20 --batch-size 1024 --fanouts 15,10,5
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rank(rank: int, world: int, port: int, folder: str, args: dict, out: str) -> None:
    from sparsetrain.distributed import DistNeighborSampler, rank_batches
    from sparsetrain.partition import load_partition

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    part = load_partition(folder, rank)
    sampler = DistNeighborSampler(part, args["fanouts"], seed=1)
    batches = rank_batches(part, "train", args["batch_size"], seed=2)[: args["batches"]]
    sampler.sample(batches[0])  # compile and warm up
    sampler.sent_bytes = 0
    dist.barrier()
    start = time.perf_counter()
    results = [sampler.sample(b) for b in batches]
    seconds = time.perf_counter() - start
    summary = {"rank": rank, "s_per_batch": seconds / len(batches),
               "bytes_per_batch": sampler.sent_bytes / len(batches),
               "batches": [(b.key, b.seeds, r.input_nodes) for b, r in zip(batches, results)]}
    torch.save(summary, Path(out) / f"{rank}.pt")
    dist.barrier()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("data", type=Path)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--json", type=Path, default=Path("dist_sampling.json"))
    a = ap.parse_args()
    from sparsetrain.datasets import load
    from sparsetrain.partition.manifest import read_manifest
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    world = read_manifest(a.folder)["num_parts"]
    args = {"fanouts": [int(f) for f in a.fanouts.split(",")], "batch_size": a.batch_size, "batches": a.batches}
    out = a.folder.parent / f".dist-bench-{os.getpid()}"
    out.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_rank, args=(world, port, str(a.folder), args, str(out)), nprocs=world, start_method="spawn")
    ranks = [torch.load(out / f"{r}.pt") for r in range(world)]
    for f in out.iterdir():
        f.unlink()
    out.rmdir()
    reference = NeighborSampler(load(a.data).graph, args["fanouts"], seed=1)
    inputs = [SamplerInput(seeds, key=key) for r in ranks for key, seeds, _ in r["batches"] if seeds.numel()]
    reference.sample(inputs[0])
    start = time.perf_counter()
    want = [reference.sample(inp) for inp in inputs]
    single = (time.perf_counter() - start) / len(inputs)
    got = [nodes for r in ranks for _, seeds, nodes in r["batches"] if seeds.numel()]
    assert all(torch.equal(g, w.input_nodes) for g, w in zip(got, want)), "batches differ from the single process"
    print(f"{'who':<16} {'ms/batch':>9} {'KiB sent/batch':>15}")
    print(f"{'single process':<16} {1000 * single:>9.1f} {0:>15}")
    for r in ranks:
        print(f"{'rank ' + str(r['rank']):<16} {1000 * r['s_per_batch']:>9.1f} {r['bytes_per_batch'] / 1024:>15.0f}")
    a.json.write_text(json.dumps({"single_s_per_batch": single, "ranks": [
        {k: v for k, v in r.items() if k != "batches"} for r in ranks]}, indent=2))


if __name__ == "__main__":
    main()
