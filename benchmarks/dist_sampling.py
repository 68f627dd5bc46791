"""Distributed sampling cost: `DistNeighborSampler` on W gloo ranks (processes on this machine, one Numba thread
each) against the single-process `NeighborSampler` on the whole graph, same seeds and keys, measured in the same run,
on one thread (like with like: a rank's work per batch) and on every core (like the W ranks together).

Per rank: wall and CPU seconds per batch, the wall seconds in the exchanges (moving bytes, waiting for the peers),
batches/s, bytes sent per batch (request ids, served rows, headers); the aggregate batches/s of the ranks together.
The batches are checked equal to the single-process ones. Prints a table and writes JSON.

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
    import numba

    from sparsetrain.distributed import DistNeighborSampler, rank_batches
    from sparsetrain.partition import load_partition

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    part = load_partition(folder, rank)
    sampler = DistNeighborSampler(part, args["fanouts"], seed=1)
    batches = rank_batches(part, "train", args["batch_size"], seed=2)[: args["batches"]]
    sampler.sample(batches[0])  # compile and warm up
    sampler.sent_bytes, sampler.exchange_s = 0, 0.0
    dist.barrier()
    start, cpu = time.perf_counter(), time.process_time()
    results = [sampler.sample(b) for b in batches]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    summary = {"rank": rank, "s_per_batch": seconds / len(batches), "cpu_s_per_batch": cpu / len(batches),
               "exchange_s_per_batch": sampler.exchange_s / len(batches),
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
    import numba

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
    single = {}
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        start, cpu = time.perf_counter(), time.process_time()
        want = [reference.sample(inp) for inp in inputs]
        single[threads] = ((time.perf_counter() - start) / len(inputs), (time.process_time() - cpu) / len(inputs))
    got = [nodes for r in ranks for _, seeds, nodes in r["batches"] if seeds.numel()]
    assert all(torch.equal(g, w.input_nodes) for g, w in zip(got, want)), "batches differ from the single process"
    print(f"{'who':<26} {'ms/batch':>9} {'CPU ms/batch':>13} {'in exchanges':>13} {'batches/s':>10} "
          f"{'KiB sent/batch':>15}")
    for threads, (wall, cpu) in single.items():
        print(f"{f'single process, {threads} thread(s)':<26} {1000 * wall:>9.1f} {1000 * cpu:>13.1f} {'':>13} "
              f"{1 / wall:>10.2f} {0:>15}")
    for r in ranks:
        print(f"{'rank ' + str(r['rank']):<26} {1000 * r['s_per_batch']:>9.1f} {1000 * r['cpu_s_per_batch']:>13.1f} "
              f"{1000 * r['exchange_s_per_batch']:>13.1f} {1 / r['s_per_batch']:>10.2f} "
              f"{r['bytes_per_batch'] / 1024:>15.0f}")
    aggregate = sum(1 / r["s_per_batch"] for r in ranks)
    print(f"{f'{world} ranks together':<26} {'':>9} {'':>13} {'':>13} {aggregate:>10.2f}")
    a.json.write_text(json.dumps({
        "single": {str(t): {"s_per_batch": wall, "cpu_s_per_batch": cpu} for t, (wall, cpu) in single.items()},
        "ranks": [{k: v for k, v in r.items() if k != "batches"} for r in ranks], "aggregate_batches_per_s": aggregate},
        indent=2))


if __name__ == "__main__":
    main()
