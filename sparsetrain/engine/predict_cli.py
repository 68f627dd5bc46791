"""The ``sparsetrain predict`` verb: a trained run's predictions (or embeddings) for every target node, to a file."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="write a trained model's prediction (or last hidden layer) for every node to .npy or .parquet",
        description="Rebuild the model a `sparsetrain train` run saved in --checkpoint (its best epoch's weights, "
                    "best.pt) and write every target node's class scores, or with --embeddings its last hidden layer, "
                    "to --out: .npy (float32 [nodes, width], row = node id) or .parquet (columns node, class, scores "
                    "or node, embedding). GraphSAGE / GCN / GAT and link models run layer-wise over the whole graph "
                    "(exact, each layer's table spilled beside the output above 4 GiB); the R-GCN of a typed graph "
                    "and the graph transformer on the run's sampled evaluation batches. Prints the test metric of the "
                    "written predictions where the dataset has a test split.",
    )
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="the run's --checkpoint-dir (or one checkpoint file in it)")
    p.add_argument("--data",
                   help="the dataset to predict on (default: the one the run trained on; a partitioned run's: the "
                        "dataset its parts were cut from); a folder or a built-in name (cora, synthetic)")
    p.add_argument("--out", type=Path, required=True,
                   help="output file, .npy or .parquet (written atomically; not inside the dataset folder)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--embeddings", action="store_true",
                   help="write the last hidden layer instead of the class scores (layer-wise models)")
    p.add_argument("--last", action="store_true",
                   help="use the newest step checkpoint instead of the best epoch's weights (best.pt)")
    p.add_argument("--batch-size", type=int, default=4096, help="nodes computed at once in a layer-wise pass")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.set_defaults(run=_predict)


def _predict(args: argparse.Namespace) -> int:
    from sparsetrain.engine.predict import predict
    from sparsetrain.errors import SettingError

    if args.batch_size < 1:
        raise SettingError(f"--batch-size {args.batch_size}: must be a positive integer")
    result = predict(args.checkpoint, args.out, args.data, embeddings=args.embeddings,
                     which="last" if args.last else "best", batch_size=args.batch_size, device=args.device,
                     overwrite=args.overwrite)
    line = (f"wrote {result['what']} of {result['rows']:,} nodes ({result['width']} values each, "
            f"{result['method']}, epoch {result['epoch']}) to {result['out']}")
    metric = next(((k, v) for k, v in result.items() if k.startswith("test_")), None)
    if metric is not None and metric[1] is not None and not math.isnan(metric[1]):
        line += f"; {metric[0].replace('_', ' ')} {metric[1]:.4f}"
    print(line, flush=True)
    return 0
