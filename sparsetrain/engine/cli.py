"""The ``sparsetrain train`` verb: the main job."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from sparsetrain.engine.precision import PRECISIONS
from sparsetrain.engine.settings import (
    EVALUATIONS,
    EXCLUDE_CHOICES,
    FEATURE_PLACEMENTS,
    STEPS,
    TASKS,
    TYPED_MODELS,
    CheckpointSettings,
    DataSettings,
    FeatureSettings,
    ModelSettings,
    OptimSettings,
    ReportSettings,
    RunSettings,
    SamplingSettings,
    TrainSettings,
)
from sparsetrain.nn.link import DECODERS
from sparsetrain.nn.models import MODELS
from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.storage.policies import POLICIES


def _fanouts(text: str) -> Fanouts:
    """``--fanout``'s argparse type: :meth:`Fanouts.parse`, its error as argparse's."""
    try:
        return Fanouts.parse(text)
    except SamplingError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ranged(cast, low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = False, rule: str):
    """An argparse type: ``cast(text)`` checked to be finite and within [low, high] (ends open as asked)."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {rule}") from None
        too_low = value < low or (low_open and value == low)
        too_high = value > high or (high_open and value == high)
        if not math.isfinite(value) or too_low or too_high:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {rule}")
        return value

    return parse


_POSITIVE_INT = _ranged(int, 1, rule="a positive integer")
_COUNT = _ranged(int, 0, rule="an integer >= 0")
_POSITIVE = _ranged(float, 0, low_open=True, rule="a positive number")
_NON_NEGATIVE = _ranged(float, 0, rule="a number >= 0")
_PROBABILITY = _ranged(float, 0, 1, high_open=True, rule="a probability in [0, 1)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a GNN or graph transformer with sampled minibatches (no arguments: GraphSAGE on Cora)",
        description="Train GraphSAGE / GCN / GAT / a graph transformer (gt) on a dataset folder with fused neighbor "
                    "sampling and an overlapped "
        "loader; prints per-epoch accuracy and the final test accuracy. Under torchrun it runs DDP.",
    )
    p.add_argument("--data", type=Path,
                   help="dataset folder, or a built-in dataset: cora (the default; Planetoid's public split, shipped "
                        "with the package) or synthetic (20K nodes); built-ins are built on first use into "
                        "$SPARSETRAIN_CACHE, else $XDG_CACHE_HOME/sparsetrain, else ~/.cache/sparsetrain")
    p.add_argument("--verify", action="store_true",
                   help="check every file's sha256 and the graph's structure before training (reads the whole dataset "
                        "once); without it, file sizes and the sha256 of files up to 64 MiB are checked, and every "
                        "batch's features for NaN/inf")
    p.add_argument("--target-type", help="typed (heterogeneous) datasets: the node type to train on (default: the "
                                         "dataset's target type)")
    p.add_argument("--task", choices=TASKS, default="node",
                   help="node classification (default) or link prediction: train on the dataset's link split "
                        "(`preprocess --link-split`; --data cora builds one with 0.85,0.05,0.10), report val/test AUC, "
                        "MRR and Hits@K (per positive among its own negatives: hits@1/3/10_per_positive, as "
                        "ogbl-citation2; against a shared pool: hits@10/50/100_shared_pool)")
    p.add_argument("--decoder", choices=DECODERS, default="dot",
                   help="link task: score a pair by the dot product of its embeddings or an MLP")
    p.add_argument("--exclude", choices=EXCLUDE_CHOICES, default="auto",
                   help="link task: leave the batch's seed edges out of its blocks: self, reverse (also v->u), none; "
                        "auto (default) = reverse on symmetric graphs, else self")
    p.add_argument("--model", choices=(*MODELS, *TYPED_MODELS),
                   help="model (default sage, rgcn on a typed dataset, which trains only rgcn or rgat (MLPerf's R-GAT: "
                        "a 4-head GAT per relation); gt = graph transformer "
                        "with sparse + cluster attention; a graph without clusters.npy is partitioned at start, up to "
                        "1M nodes)")
    p.add_argument("--fanout", dest="fanouts", type=_fanouts, default=Fanouts([10, 10]),
                   help="neighbors per hop from the seeds outward, as PyG's num_neighbors; -1 = all (default 10,10)")
    p.add_argument("--temporal", action="store_true",
                   help="temporal sampling (PyG's rule): no neighbor later than its seed's time, a seed's time being "
                        "its node time; reads the dataset's edge times, else its node times (`preprocess --node-time`, "
                        "`--edge-time-column`); evaluation is sampled the same way")
    p.add_argument("--temporal-strategy", choices=("uniform", "last"),
                   help="with --temporal: draw uniformly among the allowed neighbors (default) or take the most recent")
    p.add_argument("--fuse-last-hop", action="store_true",
                   help="GraphSAGE node classification: draw the outermost hop and average its features in one pass "
                        "(same draws; no dedupe or gather of that hop's nodes); features in memory, mmap or device")
    p.add_argument("--batch-size", type=_POSITIVE_INT, default=1024,
                   help="seed nodes (link task: seed edges) per minibatch (default 1024)")
    p.add_argument("--epochs", type=_POSITIVE_INT,
                   help="epochs to train (default: about 2000 optimizer steps, at most 200 epochs: 200 full-batch "
                        "epochs on Cora, ~11 on products; the test accuracy reported is the one at the best validation "
                        "epoch)")
    p.add_argument("--max-steps", type=_POSITIVE_INT, help="stop after this many optimizer steps, mid-epoch if need be "
                                                           "(a partial epoch is not evaluated)")
    p.add_argument("--lr", type=_POSITIVE, help="Adam learning rate (default 0.01; gt 0.005)")
    p.add_argument("--weight-decay", type=_NON_NEGATIVE, help="L2 weight decay (default 5e-4; gt 5e-3)")
    p.add_argument("--hidden", type=_POSITIVE_INT, help="hidden size (default 128; gt 64)")
    p.add_argument("--dropout", type=_PROBABILITY, default=0.5,
                   help="dropout probability between layers, in [0, 1) (default 0.5)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: a GPU when one is visible)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32 (default) or bf16 mixed precision (autocast, weights and optimizer in fp32): ~1.4x a "
                        "step on CPUs with AVX-512 BF16 (benchmarks/RESULTS.md); GPUs need bfloat16 support")
    p.add_argument("--features", choices=FEATURE_PLACEMENTS, default="auto",
                   help="feature placement: auto (default: on a GPU, in its memory when they fit, else pinned host "
                        "memory read zero-copy; on a CPU, mmap), mmap (ranks share the page cache), disk (O_DIRECT "
                        "reads of the rows a batch needs, "
                        "for features larger than memory; give it a --cache-gb), memory, device, pinned, or sharded "
                        "across ranks")
    p.add_argument("--cache-gb", type=_NON_NEGATIVE, default=0.0,
                   help="GiB of feature cache in front of the features, at most the memory available; on a GPU the "
                        "cache is in GPU memory in front of pinned host features (mmap when they do not fit in host "
                        "memory), and the progress bar shows its hit rate and the PCIe MB read a batch (default 0: no "
                        "cache)")
    p.add_argument("--cache-policy", choices=POLICIES, default="hybrid",
                   help="the cache's replacement policy (default hybrid: the rows most often drawn as neighbors "
                        "(out-degree) plus a scored dynamic part)")
    p.add_argument("--step", choices=STEPS, default="eager",
                   help="eager (default), or static: batches padded to their bounds from --batch-size and --fanout so "
                        "every step has the same shapes, replayed as one CUDA graph on a GPU, where each batch's "
                        "sampling is captured and replayed too (GraphSAGE, node task)")
    p.add_argument("--eval", choices=EVALUATIONS, default="auto",
                   help="evaluation after each epoch: full = exact, every neighbor (layer-wise inference); sampled = "
                        "the training fanouts; auto (default) = full on graphs up to 100K nodes or where it visits "
                        "fewer edges than sampled, else sampled (gt always sampled)")
    p.add_argument("--checkpoint-dir", type=Path,
                   help="write checkpoints here (every --checkpoint-every steps and each epoch; the newest 3 are "
                        "kept). One folder per run: a run without --resume refuses a folder that already holds "
                        "checkpoints")
    p.add_argument("--checkpoint-every", type=_COUNT, default=0, help="steps between checkpoints (0 = epoch ends only)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest intact checkpoint in --checkpoint-dir (start fresh if it has none); "
                        "refused when that checkpoint belongs to another run (model, dataset, seed, batch size, fanout "
                        "or world size differ); a different --lr, --weight-decay or --dropout applies from the resumed "
                        "step on, and is reported")
    # not --log: torchrun reads any prefix of its own --log-dir/--logs-specs, so `torchrun ... train --log F` fails
    # there
    p.add_argument("--metrics-log", "--log", dest="log", type=Path,
                   help="append per-step and per-epoch metrics here as JSON lines (--log is the old name; it fails "
                        "under torchrun)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of every random choice (weights, shuffle, sampling): same seed, same run; its magnitude "
                        "below 2**43 (default 0)")
    p.add_argument("--summary-json", type=Path, help="write the final metrics (val_acc, test_acc, epochs, seconds; "
                                                     "link task: "
                   "val_auc, test_auc, test_mrr, test_hits@K_per_positive or _shared_pool, "
                   "negatives_per_positive) here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=_train)


def _ranking(summary: dict) -> str:
    """The test split's ranking metrics, the Hits@K definition said once: ``mrr 0.45  hits@10 0.71 (per ...)``."""
    names = {k: k[5:].removesuffix("_per_positive").removesuffix("_shared_pool") for k in summary}
    shown = "  ".join(f"{names[k]} {v:.4f}" for k, v in summary.items()
                      if k.startswith("test_") and k != "test_auc" and v is not None)
    per_positive = (summary.get("negatives_per_positive") or {}).get("test")
    if per_positive:
        return f"{shown} (hits@K per positive: its rank among its own {per_positive} negatives <= K)"
    return f"{shown} (hits@K against the shared pool of negatives)" if shown else ""


def settings_of(args: argparse.Namespace) -> TrainSettings:
    """The run's settings, each part from its flags."""
    return TrainSettings(
        data=DataSettings(path=args.data, task=args.task, target_type=args.target_type, verify=args.verify),
        sampling=SamplingSettings(fanouts=args.fanouts, batch_size=args.batch_size, exclude=args.exclude,
                                  temporal=args.temporal, temporal_strategy=args.temporal_strategy,
                                  fuse_last_hop=args.fuse_last_hop),
        features=FeatureSettings(placement=args.features, cache_gb=args.cache_gb, cache_policy=args.cache_policy),
        model=ModelSettings(name=args.model, hidden=args.hidden, dropout=args.dropout, decoder=args.decoder),
        optim=OptimSettings(lr=args.lr, weight_decay=args.weight_decay, epochs=args.epochs, max_steps=args.max_steps),
        run=RunSettings(device=args.device, precision=args.precision, seed=args.seed, eval=args.eval,
                        step=args.step),
        checkpoint=CheckpointSettings(dir=args.checkpoint_dir, every=args.checkpoint_every, resume=args.resume),
        report=ReportSettings(log=args.log, summary_json=args.summary_json, quiet=args.quiet),
    )


def _train(args: argparse.Namespace) -> int:
    # imported when the verb runs: the model and training stack is not needed to parse flags or run other verbs
    from sparsetrain.engine.run import train

    summary = train(settings_of(args))
    if summary is None:  # not the main rank
        return 0
    _print_summary(summary)  # before the summary file is written: a write that fails cannot lose the result
    if args.summary_json is not None:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def _print_summary(summary: dict) -> None:
    if summary.get("task") == "link":
        print(f"test AUC {summary['test_auc']:.4f} (val {summary['val_auc']:.4f}, epoch {summary['best_epoch']})  "
              f"{_ranking(summary)}  after {summary['epochs']} epochs in {summary['seconds']:.1f} s", flush=True)
        return
    if summary["test_acc"] is None:
        print(f"{summary['steps']} steps in {summary['seconds']:.1f} s (no epoch finished, so no accuracy)")
    else:
        print(f"test accuracy {summary['test_acc']:.4f} (val {summary['val_acc']:.4f}, epoch {summary['best_epoch']}) "
              f"after {summary['epochs']} epochs in {summary['seconds']:.1f} s")
    if summary.get("disk_mb") is not None or summary.get("hit_rate") is not None:
        hit = "n/a" if summary.get("hit_rate") is None else f"{summary['hit_rate']:.1%}"
        print(f"features: cache hit rate {hit}, {summary['disk_mb']:.0f} MB read from disk")
    sys.stdout.flush()
