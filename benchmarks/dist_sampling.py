"""Distributed sampling cost: `DistNeighborSampler` on W gloo ranks (processes on this machine, one Numba thread
each) against the single-process `NeighborSampler` on the whole graph, same seeds and keys, measured in the same run.

Like with like: the single-process sampler runs as W processes side by side (one thread each, rank r's batches in
process r), so both sides have W processes on the machine's cores at the same time; then alone on every core.
Per process: wall and CPU ms per batch, the wall ms in the exchanges (moving bytes, waiting for the peers), the same
exchanges replayed with no sampling between them (the transport floor), batches/s, bytes sent per batch (request ids,
served rows, headers); batches/s of the W processes together. The batches are checked equal to the single-process
ones. Prints a table and writes JSON.

    python benchmarks/dist_sampling.py PARTITIONED_DIR DATA --batches 20 --batch-size 1024 --fanouts 15,10,5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from gloo_ranks import free_port, join, spawn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _timed(sample, batches: list, warm_up: bool = True) -> tuple[list, dict]:
    """Each batch's digest (of its input nodes and edges), and the seconds and CPU seconds per batch. A batch is
    dropped once digested, as a training loop drops it: holding them all would give every batch fresh pages."""
    if warm_up:
        sample(batches[0])  # compile, fault the pages in
    digests, seconds, cpu = [], 0.0, 0.0
    for b in batches:
        start, start_cpu = time.perf_counter(), time.process_time()
        mb = sample(b)
        seconds, cpu = seconds + time.perf_counter() - start, cpu + time.process_time() - start_cpu
        digests.append(_digest(mb))
    return digests, {"s_per_batch": seconds / len(batches), "cpu_s_per_batch": cpu / len(batches)}


def _digest(mb) -> str:
    h = hashlib.sha256(mb.input_nodes.numpy().tobytes())
    for block in mb.blocks:
        h.update(block.edge_index.numpy().tobytes())
        h.update(block.edge_ids.numpy().tobytes())
    return h.hexdigest()


def _rank(rank: int, world: int, port: int, folder: str, args: dict, out: str) -> None:
    from sparsetrain.partition import load_partition
    from sparsetrain.partitioned import DistNeighborSampler, rank_batches

    join(rank, world, port, 120)
    part = load_partition(folder, rank)
    sampler = DistNeighborSampler(part, args["fanouts"], seed=1)
    batches = rank_batches(part, "train", args["batch_size"], seed=2)[: args["batches"]]
    sampler.sample(batches[0])  # compile, fault the pages in
    sampler.sent_bytes, sampler.exchange_s = 0, 0.0
    calls = _recording_all_to_alls()
    dist.barrier()
    digests, summary = _timed(sampler.sample, batches, warm_up=False)
    dist.all_to_all_single = calls.original
    summary.update(rank=rank, peak_rss_mib=_peak_rss_mib(), exchange_s_per_batch=sampler.exchange_s / len(batches),
                   floor_s_per_batch=_replay(calls, len(batches)),
                   bytes_per_batch=sampler.sent_bytes / len(batches),
                   batches=[(b.key, b.seeds, digest) for b, digest in zip(batches, digests)])
    torch.save(summary, Path(out) / f"{rank}.pt")
    dist.barrier()


class _Calls(list):
    original = None


def _recording_all_to_alls() -> _Calls:
    """Record the shapes and splits of every all-to-all from now on (the sampler's, through torch.distributed)."""
    calls, original = _Calls(), dist.all_to_all_single
    calls.original = original

    def recording(output, input, output_split_sizes=None, input_split_sizes=None, **kwargs):
        calls.append((tuple(output.shape), tuple(input.shape), list(output_split_sizes), list(input_split_sizes)))
        return original(output, input, output_split_sizes, input_split_sizes, **kwargs)

    dist.all_to_all_single = recording
    return calls


def _replay(calls: _Calls, batches: int) -> float:
    """The transport floor: the recorded all-to-alls again, same sizes, no sampling between them; seconds per batch."""
    buffers = [(torch.zeros(out, dtype=torch.int64), torch.zeros(inp, dtype=torch.int64), o, i)
               for out, inp, o, i in calls]
    dist.barrier()
    start = time.perf_counter()
    for out, inp, o, i in buffers:
        dist.all_to_all_single(out, inp, o, i)
    return (time.perf_counter() - start) / batches


def _single(index: int, data: str, args: dict, out: str) -> None:
    """Process ``index`` of the side-by-side single-process runs: rank ``index``'s batches on the whole graph."""
    import numba

    from sparsetrain.datasets import load
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    batches = [SamplerInput(seeds, key=key) for key, seeds, _ in torch.load(Path(out) / f"{index}.pt")["batches"]
               if seeds.numel()]
    sampler = NeighborSampler(load(data).graph, args["fanouts"], seed=1)
    digests, summary = _timed(sampler.sample, batches)
    torch.save({**summary, "peak_rss_mib": _peak_rss_mib(), "digests": digests}, Path(out) / f"single-{index}.pt")


def _peak_rss_mib() -> float:
    """This process's peak resident set (it counts the pages of memory-mapped files it touched)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    from dist_train import topology_bytes

    from sparsetrain.datasets import load
    from sparsetrain.partition.manifest import read_manifest
    from sparsetrain.sampling import NeighborSampler, SamplerInput

    world = read_manifest(a.folder)["num_parts"]
    args = {"fanouts": [int(f) for f in a.fanouts.split(",")], "batch_size": a.batch_size, "batches": a.batches}
    out = a.folder.parent / f".dist-bench-{os.getpid()}"
    out.mkdir()
    spawn(_rank, world, world, free_port(), str(a.folder), args, str(out))
    spawn(_single, world, str(a.data), args, str(out))
    ranks = [torch.load(out / f"{r}.pt") for r in range(world)]
    side_by_side = [torch.load(out / f"single-{r}.pt") for r in range(world)]
    for f in out.iterdir():
        f.unlink()
    out.rmdir()
    reference = NeighborSampler(load(a.data).graph, args["fanouts"], seed=1)
    inputs = [SamplerInput(seeds, key=key) for r in ranks for key, seeds, _ in r["batches"] if seeds.numel()]
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    want, alone = _timed(reference.sample, inputs)
    got = [digest for r in ranks for _, seeds, digest in r["batches"] if seeds.numel()]
    assert got == want == [d for r in side_by_side for d in r.pop("digests")], "batches differ from the single process"

    part_topology = topology_bytes(a.data, a.folder, "partitioned", world)
    whole_topology = topology_bytes(a.data, a.folder, "single", 1)[0]
    for r in ranks:
        r["topology_mb"] = part_topology[r["rank"]] / 1e6
    for r in side_by_side:
        r["topology_mb"] = whole_topology / 1e6

    def row(who: str, r: dict, exchange: str = "", floor: str = "", sent: float = 0.0) -> None:
        rss = f"{r['peak_rss_mib']:.0f}" if "peak_rss_mib" in r else ""
        topology = f"{r['topology_mb']:.0f}" if "topology_mb" in r else ""
        print(f"{who:<34} {1000 * r['s_per_batch']:>9.1f} {1000 * r['cpu_s_per_batch']:>9.1f} {exchange:>13} "
              f"{floor:>15} {1 / r['s_per_batch']:>10.2f} {sent / 1024:>15.0f} {rss:>13} {topology:>12}")

    print(f"{'who':<34} {'ms/batch':>9} {'CPU ms':>9} {'in exchanges':>13} {'exchanges only':>15} {'batches/s':>10} "
          f"{'KiB sent/batch':>15} {'peak RSS MiB':>13} {'topology MB':>12}")
    for r in ranks:
        row(f"rank {r['rank']}", r, f"{1000 * r['exchange_s_per_batch']:.1f}", f"{1000 * r['floor_s_per_batch']:.1f}",
            r["bytes_per_batch"])
    for i, r in enumerate(side_by_side):
        row(f"single process {i} of {world}, 1 thread", r)
    row(f"single process alone, {numba.config.NUMBA_NUM_THREADS} threads", alone)
    together = {"ranks": sum(1 / r["s_per_batch"] for r in ranks),
                "single_side_by_side": sum(1 / r["s_per_batch"] for r in side_by_side)}
    print(f"batches/s of the {world} processes together: ranks {together['ranks']:.2f}, single-process samplers "
          f"{together['single_side_by_side']:.2f}")
    a.json.write_text(json.dumps({
        "ranks": [{k: v for k, v in r.items() if k != "batches"} for r in ranks], "single_side_by_side": side_by_side,
        "single_alone": {"threads": numba.config.NUMBA_NUM_THREADS, **alone}, "batches_per_s_together": together},
        indent=2))


if __name__ == "__main__":
    main()
