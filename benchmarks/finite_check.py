"""What the fetch stage's NaN/inf check costs a training step: the check timed beside the gather and the step it guards.

Each batch of a 3-layer GraphSAGE (hidden 256, fanouts 15,10,5, batch 1024, as benchmarks/train_epoch.py) is
gathered, checked with :func:`sparsetrain.engine.stages.fetch.check_finite` (one min/max pass) and, as the peer,
with ``torch.isfinite(x).all()``, then trained on; all in one loop, so the ratios share the machine's load.

    python benchmarks/finite_check.py                              # synthetic 400K nodes, 8M edges, 100 features
    python benchmarks/finite_check.py --data DIR --batches 20      # e.g. a products-scale folder
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
FANOUTS = [15, 10, 5]
HIDDEN = 256
BATCH = 1024
CHECK, PEER = "check (one min/max pass)", "peer: isfinite().all()"


def _timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=HERE / "out" / "finite_check")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--feature-dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--json", type=Path, default=HERE / "out" / "finite_check.json")
    args = parser.parse_args()

    import sparsetrain as st
    from sparsetrain.engine.stages.fetch import check_finite
    from sparsetrain.nn.models import GraphSAGE
    from sparsetrain.sampling import SamplerInput

    if not (args.data / "meta.json").is_file():
        st.datasets.synthesize(args.data, 400_000, 8_000_000, feature_dim=100, num_classes=47,
                               feature_dtype=args.feature_dtype)
    ds = st.datasets.load(args.data)
    features = st.storage.TensorFeatures(torch.from_numpy(np.load(args.data / "features.npy")))
    sampler = st.sampling.NeighborSampler(ds.graph, FANOUTS, seed=0)
    model = GraphSAGE(ds.num_features, HIDDEN, ds.num_classes, num_layers=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    seeds = ds.split["train"][torch.randperm(len(ds.split["train"]), generator=torch.Generator().manual_seed(0))]
    rows = {"gather": [], CHECK: [], PEER: [], "step": []}
    input_rows = []
    for i in range(args.warmup + args.batches):
        mb = sampler.sample(SamplerInput(seeds[i * BATCH:(i + 1) * BATCH]))
        x, t_gather = _timed(lambda: features.gather(mb.input_nodes))
        _, t_check = _timed(lambda: check_finite(x, mb.input_nodes, features))
        _, t_peer = _timed(lambda: bool(torch.isfinite(x).all()))
        mb.x, mb.y = x.float(), ds.labels[mb.seeds]

        def step():
            optimizer.zero_grad()
            F.cross_entropy(model(mb.x, mb.to_pyg()), mb.y).backward()
            optimizer.step()

        _, t_step = _timed(step)
        if i >= args.warmup:
            for key, t in zip(rows, (t_gather, t_check, t_peer, t_step)):
                rows[key].append(t)
            input_rows.append(len(mb.input_nodes))
    ms = {key: 1e3 * float(np.mean(v)) for key, v in rows.items()}
    step = ms["gather"] + ms["step"]
    result = {"data": str(args.data), "feature_dtype": str(features.dtype),
              "input_rows_per_batch": float(np.mean(input_rows)),
              "ms": ms, "check_vs_gather": ms[CHECK] / ms["gather"], "check_vs_step": ms[CHECK] / step,
              "peer_vs_check": ms[PEER] / ms[CHECK]}
    print(f"{result['input_rows_per_batch']:,.0f} input rows x {ds.num_features} {features.dtype} a batch, "
          f"{args.batches} batches")
    print("| part | ms / batch | vs gather + step |\n| --- | ---: | ---: |")
    for key, value in ms.items():
        print(f"| {key} | {value:.2f} | {value / step:.2%} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
