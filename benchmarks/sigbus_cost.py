"""Cost of the SIGBUS handler (``sparsetrain._sigbus``) on the hot path: gathers and training steps from a memory-mapped
dataset with the handler installed (every mapping registered) and with the previous SIGBUS action back, alternating
in one process (each gather timed on and off back to back; training steps in rounds, round r on/off, r + 1 off/on),
plus what one registration costs when a file is mapped.

    python benchmarks/sigbus_cost.py                        # a synthetic graph made in a temp folder
    python benchmarks/sigbus_cost.py --data DIR --rounds 8 --steps 20

Prints a table, writes benchmarks/out/sigbus_cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import sparsetrain as st
from sparsetrain import _sigbus
from sparsetrain.nn.models import GraphSAGE

OUT = Path(__file__).resolve().parent / "out"
FANOUTS = [15, 10, 5]
BATCH = 1024


def handler(on: bool) -> None:
    """Handler installed (the registry is read on a fault) or the previous action back (the registry is inert)."""
    if on:
        _sigbus.install()
    else:
        _sigbus.uninstall()
    assert _sigbus.installed() == on


def time_gather_pairs(features, batches: list[torch.Tensor], first_on: bool) -> list[tuple[float, float]]:
    """``(on, off)`` milliseconds of ``features.gather`` of each batch's input nodes, the two back to back (the load of
    a shared machine changes slower than that), the first of each pair alternating."""
    pairs = []
    for i, ids in enumerate(batches):
        times = {}
        for on in ((first_on, not first_on) if i % 2 == 0 else (not first_on, first_on)):
            handler(on)
            start = time.perf_counter()
            features.gather(ids)
            times[on] = 1e3 * (time.perf_counter() - start)
        pairs.append((times[True], times[False]))
    return pairs


def time_steps(loader, model, optimizer, warmup: int, steps: int) -> float:
    """Mean milliseconds per training step (next batch: sample + gather on the loader's thread; forward, backward)."""
    epoch = loader.epoch(0)
    it = iter(epoch)
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        mb = next(it)
        optimizer.zero_grad()
        F.cross_entropy(model(mb.x, mb.to_pyg()), mb.y).backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    epoch.close()
    return 1e3 * elapsed / steps


def registration_cost(path: Path, reps: int) -> dict:
    """Microseconds to map a file with ``np.load``, with and without ``watch`` (once per mapping, never per read)."""
    times = {"np.load mmap": [], "np.load mmap + watch": []}
    for _ in range(reps):
        for label in times:
            start = time.perf_counter()
            array = np.load(path, mmap_mode="r")
            if label.endswith("watch"):
                _sigbus.watch(array, path)
            times[label].append(time.perf_counter() - start)
            del array
    return {label: 1e6 * statistics.median(t) for label, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="a dataset folder (default: a synthetic graph in a temp folder)")
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=6, help="on/off pairs (default 6)")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per round (default 10)")
    parser.add_argument("--gathers", type=int, default=20, help="batches gathered per round (default 20)")
    args = parser.parse_args()
    if not _sigbus.supported():
        raise SystemExit("the SIGBUS handler is not installed on this platform (Linux x86-64 only)")
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory(prefix="sparsetrain-sigbus-") as tmp:
        folder = Path(args.data) if args.data else st.datasets.synthesize(
            Path(tmp) / "ds", args.nodes, args.edges, feature_dim=args.dim, num_classes=10, quiet=True).path
        ds = st.datasets.load(folder)  # graph arrays and features mapped, each registered
        sampler = st.sampling.NeighborSampler(ds.graph, FANOUTS, seed=0)
        loader = st.engine.Loader(sampler, ds.features, ds.labels, ds.split["train"], batch_size=BATCH, seed=0,
                                  retain_host_memory=True)
        batches = [mb.input_nodes for _, mb in zip(range(args.gathers), loader.epoch(1))]
        model = GraphSAGE(ds.num_features, 256, ds.num_classes, num_layers=3)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
        registered = len(_sigbus.registered())

        time_steps(loader, model, optimizer, 2, 2)  # warm-up: kernels, page cache, allocator
        results = {"gather_ms": [], "step_ms": []}  # (on, off) pairs
        for r in range(args.rounds):
            results["gather_ms"] += time_gather_pairs(ds.features, batches, first_on=r % 2 == 0)
            steps = {}
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                handler(on)
                steps[on] = time_steps(loader, model, optimizer, 1, args.steps)
            results["step_ms"].append((steps[True], steps[False]))
        handler(True)
        registration = registration_cost(folder / "features.npy", 200)

    rows = []
    for metric, pairs in results.items():
        on, off = [p[0] for p in pairs], [p[1] for p in pairs]
        pair_ratios = [a / b for a, b in pairs]
        rows.append({"metric": metric, "on_median": statistics.median(on), "off_median": statistics.median(off),
                     "ratio_median": statistics.median(pair_ratios),
                     "ratio_min": min(pair_ratios), "ratio_max": max(pair_ratios)})
    print(f"{registered} ranges registered; {args.rounds} rounds; batch {BATCH}, fanouts {FANOUTS}; gathers timed in "
          f"on/off pairs ({len(results['gather_ms'])}), steps in rounds of {args.steps} ({args.rounds} pairs)")
    print(f"{'':10} {'handler on':>12} {'off':>12} {'on/off (median of pairs)':>26} {'range':>16}")
    for row in rows:
        print(f"{row['metric']:10} {row['on_median']:12.2f} {row['off_median']:12.2f} {row['ratio_median']:26.3f} "
              f"{row['ratio_min']:7.3f}-{row['ratio_max']:.3f}")
    for label, us in registration.items():
        print(f"{label}: {us:.1f} us per mapping")
    OUT.mkdir(exist_ok=True)
    report = {"args": vars(args), "registered": registered, "rows": rows, "pairs": results,
              "registration_us": registration}
    (OUT / "sigbus_cost.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {OUT / 'sigbus_cost.json'}")


if __name__ == "__main__":
    main()
