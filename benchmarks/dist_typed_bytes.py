"""What a typed partitioned step moves, measured: `DistNeighborSampler` and `PartitionedFeatures` on W gloo ranks over
a typed partitioned folder (`sparsetrain partition` of an IGBH-shaped graph), MLPerf's batch and fanouts by default.

Per rank and batch: bytes the sampler sent (request ids, served draws, headers), bytes the feature stores exchanged
(sent + received, every node type, the plan's default halo cache: a quarter of each type's halo), the halo cache's
hit rate, and per node type the input nodes and the share of them owned by another rank; per edge type the edges
sampled at each hop. These are the typed terms `benchmarks/dist_scale_model.py --typed` is calibrated on.

    python benchmarks/dist_typed_bytes.py PARTS --batch-size 1024 --fanouts 15,10,5 --batches 4 --json out.json

``--seed-batches global`` (the default, what `train` does): each rank's share of the one-process epoch's batches
(`global_rank_batches`, batch size x world size a step); ``part``: batches of each rank's own part (`rank_batches`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch.distributed as dist
from gloo_ranks import free_port, join, spawn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rank(rank: int, world: int, port: int, folder: str, args: dict, out: str) -> None:
    from sparsetrain.engine.partitioned import part_features
    from sparsetrain.engine.plan import HALO_CACHE_FRACTION
    from sparsetrain.partition import load_partition
    from sparsetrain.partitioned import DistNeighborSampler, global_rank_batches, global_split, rank_batches

    join(rank, world, port, 300)
    part = load_partition(folder, rank)
    types = part.types.node_types
    cache_rows = {t: int(int(part.types.num_halo[i]) * HALO_CACHE_FRACTION) for i, t in enumerate(types)}
    features = part_features(part, None, cache_rows)
    sampler = DistNeighborSampler(part, args["fanouts"], seed=1)
    if args["seed_batches"] == "global":
        split = global_split(part, "train")
        batches = global_rank_batches(part, split, part.split_global("train"), args["batch_size"], seed=2)
    else:
        batches = rank_batches(part, "train", args["batch_size"], seed=2)
    batches = batches[: args["batches"] + 1]
    inputs = {t: 0 for t in types}
    remote = {t: 0 for t in types}
    edges: dict[str, list[int]] = {}
    seeds, most = 0, 0
    for i, b in enumerate(batches):
        if i == 1:  # the first batch compiles and faults the pages in: counted from the second on
            sampler.sent_bytes = 0
            exchanged = {t: f.bytes_exchanged for t, f in features.items()}
            for f in features.values():
                f.stats.reset()
        mb = sampler.sample(b)
        for t in types:  # every rank gathers every type with features, in one order: the gathers are collective
            if t in features:
                features[t].gather(mb.input_nodes[t], owner=mb.node_owner[t])
        if i == 0:
            continue
        seeds += len(mb.seeds)
        most = max(most, len(mb.seeds))
        for t in types:
            inputs[t] += len(mb.input_nodes[t])
            remote[t] += int((mb.node_owner[t] != rank).sum())
        for et, per_hop in (mb.edges_per_hop or {}).items():
            key = "___".join(et)
            edges[key] = [a + int(c) for a, c in zip(edges.get(key, [0] * len(per_hop)), per_hop)]
    n = len(batches) - 1
    hits = sum(f.stats.hits for f in features.values())
    misses = sum(f.stats.misses for f in features.values())
    summary = {
        "rank": rank, "batches": n, "seeds_per_batch": seeds / n, "most_seeds_in_a_batch": most,
        "sampler_bytes_per_batch": sampler.sent_bytes / n,
        "feature_bytes_per_batch": sum(f.bytes_exchanged - exchanged[t] for t, f in features.items()) / n,
        "hit_rate": hits / (hits + misses) if hits + misses else None,
        "row_bytes": {t: f.row_bytes for t, f in features.items()},
        "inputs_per_batch": {t: v / n for t, v in inputs.items()},
        "remote_fraction": {t: remote[t] / inputs[t] if inputs[t] else None for t in types},
        "edges_per_batch_by_hop": {et: [v / n for v in per_hop] for et, per_hop in edges.items()},
    }
    (Path(out) / f"{rank}.json").write_text(json.dumps(summary))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import tempfile

    from sparsetrain.partition.manifest import read_manifest

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--seed-batches", choices=("global", "part"), default="global")
    a = ap.parse_args()
    manifest = read_manifest(a.folder)
    world = manifest["num_parts"]
    args = {"fanouts": [int(f) for f in a.fanouts.split(",")], "batch_size": a.batch_size, "batches": a.batches,
            "seed_batches": a.seed_batches}
    with tempfile.TemporaryDirectory() as out:
        spawn(_rank, world, world, free_port(), str(a.folder), args, out)
        ranks = [json.loads((Path(out) / f"{r}.json").read_text()) for r in range(world)]
    quality = manifest["quality"]
    result = {"folder": str(a.folder), "parts": world, "edge_cut_fraction": quality["edge_cut_fraction"],
              "halo_fraction": quality.get("halo_fraction"), **args, "ranks": ranks}
    print(f"{a.folder}: {world} parts, edge cut {quality['edge_cut_fraction']:.3f}, batch {a.batch_size} a rank, "
          f"fanouts {a.fanouts}, {a.seed_batches} seed batches")
    for r in ranks:
        inputs = ", ".join(f"{t} {v:,.0f} ({r['remote_fraction'][t]:.0%} remote)"
                           for t, v in r["inputs_per_batch"].items())
        print(f"rank {r['rank']}: seeds {r['seeds_per_batch']:,.1f} a batch (most {r['most_seeds_in_a_batch']}), "
              f"sampler {r['sampler_bytes_per_batch'] / 1024:,.0f} KiB, features "
              f"{r['feature_bytes_per_batch'] / 1024:,.0f} KiB a batch (hit rate {r['hit_rate']:.0%}); inputs {inputs}")
    if a.json is not None:
        a.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
