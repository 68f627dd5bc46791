"""One training run from settings: what ``sparsetrain train`` (and torchrun) executes."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from sparsetrain.engine.distributed import caused_by_another_rank, describe_failure, init_from_env, shutdown, wrap_model
from sparsetrain.engine.evaluate import full_graph_evaluator, sampled_evaluator
from sparsetrain.datasets.hetero_dataset import HeteroGraphDataset
from sparsetrain.engine.hetero_run import typed_parts
from sparsetrain.engine.host_memory import retain_freed_host_memory
from sparsetrain.engine.inference import layerwise_cost, sampled_cost
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.trainer import Trainer
from sparsetrain.errors import DatasetError, SparsetrainError
from sparsetrain.nn.models import build_model

LAYER_TABLE_BUDGET = 4 << 30  # bytes of one layer's embeddings kept in memory by layer-wise evaluation; larger ones go to disk


class TrainingOutOfMemoryError(SparsetrainError, RuntimeError):
    """This rank ran out of (GPU or host) memory while training."""


TASKS = ("node", "link")
EXCLUDE_CHOICES = ("auto", "none", "self", "reverse")


@dataclass
class TrainSettings:
    data: Path | None = None
    task: str = "node"  # "link": sparsetrain.engine.link_task
    decoder: str = "dot"  # link task: "dot" or "mlp"
    exclude: str = "auto"  # link task: seed edges left out of the blocks; auto = reverse on symmetric graphs, else self
    model: str = "sage"
    fanout: list[int] = field(default_factory=lambda: [10, 10])
    batch_size: int = 1024
    epochs: int | None = None  # None: auto_epochs()
    max_steps: int | None = None
    lr: float | None = None  # None: the model's entry in MODEL_DEFAULTS (and weight_decay, hidden likewise)
    weight_decay: float | None = None
    hidden: int | None = None
    dropout: float = 0.5
    device: str = "auto"
    cache_gb: float = 0.0
    cache_policy: str = "hybrid"
    features: str = "auto"
    eval: str = "auto"
    checkpoint_dir: Path | None = None
    checkpoint_every: int = 0
    resume: bool = False
    log: Path | None = None
    seed: int = 0
    summary_json: Path | None = None
    quiet: bool = False
    precision: str = "fp32"
    target_type: str | None = None  # typed datasets: the node type to train on (default: the dataset's target type)


MODEL_DEFAULTS = {
    "sage": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 128},
    "gcn": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 128},
    "gat": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 128},
    # small and with strong input dropout: attention overfits few labels (Cora: 140) otherwise
    "gt": {"lr": 0.005, "weight_decay": 5e-3, "hidden": 64, "input_dropout": 0.8},
    "rgcn": {"lr": 0.01, "weight_decay": 0.0, "hidden": 64},
}
"""Per-model optimizer and size defaults (PyG's and DGL's Cora and products settings for the GNNs)."""
LINK_DEFAULTS = {"lr": 0.01, "weight_decay": 0.0, "hidden": 128}
"""``--task link`` defaults (PyG's link_pred example): weight decay shrinks the embeddings a dot product compares."""
LINK_AUTO_STEPS = 750
"""``--task link`` epochs when ``--epochs`` is not given: about this many steps (Cora: 150 epochs); the best val AUC epoch is reported."""

AUTO_STEPS = 2000
AUTO_MAX_EPOCHS = 200


def auto_epochs(steps_per_epoch: int, steps: int = AUTO_STEPS) -> int:
    """Epochs when ``--epochs`` is not given: about ``AUTO_STEPS`` optimizer steps, at most ``AUTO_MAX_EPOCHS`` epochs.

    A fixed epoch count means 1 step an epoch on a small train set (Cora: 140 seeds) and hundreds on a large one
    (products: 193); counting steps gives both enough training (Cora 200 epochs, arxiv 23, products 11), and the
    reported test accuracy is the one at the best validation epoch."""
    return max(1, min(AUTO_MAX_EPOCHS, math.ceil(steps / max(steps_per_epoch, 1))))


def resolved(settings: TrainSettings) -> TrainSettings:
    """``settings`` with the model's defaults filled in where a field is None (``epochs`` stays None: it needs the loader)."""
    defaults = LINK_DEFAULTS if settings.task == "link" else MODEL_DEFAULTS.get(settings.model, MODEL_DEFAULTS["sage"])
    return replace(settings, **{k: defaults[k] for k in ("lr", "weight_decay", "hidden") if getattr(settings, k) is None})


FEATURE_PLACEMENTS = ("auto", "mmap", "disk", "memory", "device", "pinned", "sharded")
GPU_RESIDENT_FRACTION = 0.4  # of the GPU's free memory that the features, and then the graph, may each take to live there


def _fits_on_gpu(nbytes: int, device: torch.device) -> bool:
    return nbytes <= GPU_RESIDENT_FRACTION * torch.cuda.mem_get_info(device)[0]


def _placement(ds, settings: TrainSettings, ctx) -> str:
    """``--features auto``: on a GPU, the features in device memory when they fit, else in pinned host memory read
    zero-copy by the GPU; on a CPU, or in front of a cache, memory-mapped."""
    if settings.features != "auto":
        return settings.features
    if ctx.device.type != "cuda" or settings.cache_gb > 0:
        return "mmap"
    return "device" if _fits_on_gpu(ds.features.nbytes, ctx.device) else "pinned"


def _graph(ds, ctx):
    """The sampler's topology: in GPU memory when it fits (sampling then runs on the GPU), else the host's."""
    graph = ds.graph
    nbytes = sum(t.numel() * t.element_size() for t in (graph.indptr, graph.indices, graph.weights) if t is not None)
    return graph.to(ctx.device) if ctx.device.type == "cuda" and _fits_on_gpu(nbytes, ctx.device) else graph


def _features(ds, settings: TrainSettings, ctx):
    """The feature store (see ``--features``): memory-mapped (ranks share the page cache), read from disk with O_DIRECT
    (files larger than memory), in host memory, in GPU memory, pinned host memory read zero-copy by the GPU, or sharded
    across ranks; behind a cache when --cache-gb asks."""
    from sparsetrain.storage import CachedFeatures, MmapFeatures, PinnedFeatures, TensorFeatures

    placement = _placement(ds, settings, ctx)
    if placement == "sharded":
        if settings.cache_gb > 0:
            raise DatasetError("--cache-gb cannot front sharded features (a cache hit would skip the collective the other ranks wait in); drop one of them")
        from sparsetrain.collective import ShardedFeatures, new_group

        # a group of its own (with the library's timeout): the loader thread's collectives never interleave with DDP's
        group = new_group() if ctx.enabled else None
        return ShardedFeatures.from_table(ds.features, group=group, device=ctx.device)
    if placement in ("device", "pinned") and ctx.device.type != "cuda":
        raise DatasetError(f"--features {placement} needs a CUDA device (this run is on {ctx.device}); use --features mmap or memory")
    if placement == "memory":
        store = TensorFeatures(ds.features.clone())
    elif placement == "device":
        store = TensorFeatures(ds.features.to(ctx.device))
    elif placement == "pinned":
        store = PinnedFeatures(ds.features.numpy(), device=ctx.device, copy=True)
    elif placement == "mmap":
        store = MmapFeatures(ds.path / "features.npy")
    elif placement == "disk":
        store = ds.feature_store(mode="direct")
    else:
        raise DatasetError(f"--features {settings.features!r}: choose one of {', '.join(FEATURE_PLACEMENTS)}")
    if settings.cache_gb > 0:
        hotness = _cache_hotness(ds) if settings.cache_policy in ("static", "hybrid") else None
        store = CachedFeatures(store, int(settings.cache_gb * 2**30), policy=settings.cache_policy, device=ctx.device, hotness=hotness)
    return store


EXACT_EVAL_MAX_NODES = 100_000  # below this both evaluations take seconds; the exact one is preferred
LAYERWISE_EDGE_COST = 16  # a layer-wise edge costs ~16 sampled ones on 2 CPU cores (chunks re-gather their neighbors; RESULTS.md)


def _full_eval_is_cheaper(ds, settings: TrainSettings, eval_split: dict) -> bool:
    """``--eval auto``: exact layer-wise inference on small graphs (Cora), and on larger ones when its edges, weighted
    by their measured cost, are fewer than those of sampled evaluation of the val/test nodes (never on papers100M,
    1% labelled; on a 200K-node graph with 40% of nodes to evaluate it lost 93 s to 66 s, so sampled there too)."""
    if ds.num_nodes <= EXACT_EVAL_MAX_NODES:
        return True
    eval_nodes = sum(len(idx) for idx in eval_split.values())
    return LAYERWISE_EDGE_COST * layerwise_cost(ds.num_edges, len(settings.fanout)) <= sampled_cost(eval_nodes, settings.fanout)


ONLINE_CLUSTER_MAX_NODES = 1_000_000


def _clusters(ds) -> torch.Tensor | None:
    """The graph transformer's cluster per node: the dataset's clusters.npy; else, up to ``ONLINE_CLUSTER_MAX_NODES``
    nodes, a partition made now like ``--reorder cluster``'s (METIS when installed, else BFS; Cora: +0.8 points of test
    accuracy over none); else None (each sampled subgraph is one cluster)."""
    from sparsetrain.datasets import load_clusters

    clusters = load_clusters(ds)
    if clusters is not None or ds.num_nodes > ONLINE_CLUSTER_MAX_NODES:
        return clusters
    from sparsetrain.datasets.clustering import cluster_order
    from sparsetrain.datasets.csc import RawCSC

    order, ordered, _ = cluster_order(RawCSC(ds.graph.indptr.numpy(), ds.graph.indices.numpy(), None))
    clusters = torch.empty(ds.num_nodes, dtype=torch.int64)
    clusters[torch.from_numpy(order)] = torch.from_numpy(ordered)
    return clusters


def _model_sampler(sampler, clusters: torch.Tensor | None, settings: TrainSettings):
    """The graph transformer's batches carry cluster ids (see ``_clusters``)."""
    if settings.model != "gt":
        return sampler
    from sparsetrain.sampling import ClusterSampler

    return ClusterSampler(sampler, clusters)


def _cache_hotness(ds) -> np.ndarray:
    """The cache's hot set ranking: each row's out-degree, how many in-neighbor lists can draw it. On the
    papers100M-scale graph it beat counts of 8 pre-sampled batches (which see 4% of the rows) by 15-37 points of
    hit rate at 2-8 GiB (benchmarks/RESULTS.md)."""
    return ds.graph.out_degrees().numpy()


def _run_info(ds, settings: TrainSettings) -> dict:
    """What, beyond the Trainer's own view (parameters, seed, batching), makes a checkpoint this run's."""
    meta = hashlib.sha256((ds.path / "meta.json").read_bytes()).hexdigest()  # meta.json holds every array's sha256
    info = {"model": settings.model, "dataset": {"path": str(ds.path), "sha256": meta}, "fanout": list(settings.fanout)}
    if settings.task != "node":
        info.update(task=settings.task, decoder=settings.decoder, exclude=settings.exclude)
    return info


def _homogeneous_parts(ds, settings: TrainSettings, ctx):
    """``(loader, model, evaluate)`` of a run on a homogeneous dataset."""
    from sparsetrain.sampling import NeighborSampler

    if ds.features is None or ds.labels is None or "train" not in ds.split:
        raise DatasetError(f"{ds.path}: training needs features, labels and a train split; re-import with --features and --labels")
    features = _features(ds, settings, ctx)
    graph = _graph(ds, ctx)
    labels = ds.labels.to(ctx.device) if graph.device.type == "cuda" else ds.labels  # indexed by GPU-sampled seeds
    clusters = _clusters(ds) if settings.model == "gt" else None
    sampler = _model_sampler(NeighborSampler(graph, settings.fanout, seed=settings.seed), clusters, settings)
    loader = Loader(sampler, features, labels, ds.split["train"], batch_size=settings.batch_size, device=ctx.device,
                    seed=settings.seed, rank=ctx.rank, world_size=ctx.world_size)
    extra = {k: v for k, v in MODEL_DEFAULTS.get(settings.model, {}).items() if k not in ("lr", "weight_decay", "hidden")}
    model = build_model(settings.model, ds.num_features, settings.hidden, ds.num_classes, len(settings.fanout), settings.dropout, **extra)
    eval_split = {k: v for k, v in ds.split.items() if k != "train"}
    # the graph transformer evaluates on sampled batches, like it trains (its cluster attention is per batch)
    full = settings.model != "gt" and (settings.eval == "full" or (settings.eval == "auto" and _full_eval_is_cheaper(ds, settings, eval_split)))
    if full:
        evaluate = full_graph_evaluator(features, ds.labels, ds.graph, eval_split, device=ctx.device, memory_budget=LAYER_TABLE_BUDGET)
    else:
        eval_sampler = _model_sampler(NeighborSampler(graph, settings.fanout, seed=settings.seed + 1), clusters, settings)
        evaluate = sampled_evaluator(eval_sampler, features, labels, eval_split, batch_size=settings.batch_size, device=ctx.device)
    return loader, model, (evaluate if eval_split else None)


def train(settings: TrainSettings) -> dict | None:
    """Train and return the summary on the main rank (``None`` on the others)."""
    from sparsetrain.engine.default_data import open_dataset

    retain_freed_host_memory()  # before the first large allocation; the Trainer would do it only after set-up
    ctx = init_from_env(settings.device)
    try:
        ds = open_dataset(settings.data, quiet=settings.quiet or not ctx.is_main, task=settings.task)
        if isinstance(ds, HeteroGraphDataset) and settings.model == "sage":  # the default model; a typed graph trains an R-GCN
            settings = replace(settings, model="rgcn")
        elif settings.target_type is not None and not isinstance(ds, HeteroGraphDataset):
            raise DatasetError(f"--target-type {settings.target_type}: {ds.path} is a homogeneous dataset (one node type); drop --target-type")
        if settings.task == "link" and isinstance(ds, HeteroGraphDataset):
            raise DatasetError(f"--task link: {ds.path} is a typed (heterogeneous) dataset; link prediction trains on homogeneous datasets made with --link-split")
        settings = resolved(settings)
        if settings.task == "link":
            return _train_link(ds, settings, ctx)
        torch.manual_seed(settings.seed)
        if isinstance(ds, HeteroGraphDataset):
            loader, model, evaluate = typed_parts(ds, settings, ctx)
        else:
            loader, model, evaluate = _homogeneous_parts(ds, settings, ctx)
        model = wrap_model(model, ctx)
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
        epochs = settings.epochs if settings.epochs is not None else auto_epochs(len(loader))
        trainer = Trainer(model, loader, optimizer, epochs=epochs, evaluate=evaluate,
                          checkpoint_dir=settings.checkpoint_dir, checkpoint_every=settings.checkpoint_every,
                          resume=settings.resume, log_path=settings.log, quiet=settings.quiet, is_main=ctx.is_main,
                          precision=settings.precision, run_info=_run_info(ds, settings), max_steps=settings.max_steps)
        summary = _fit(trainer, ctx)
        summary.update({"model": settings.model, "dataset": str(ds.path), "world_size": ctx.world_size})
        return summary if ctx.is_main else None
    finally:
        shutdown(ctx)


def _fit(trainer: Trainer, ctx) -> dict:
    """``trainer.fit()`` with out-of-memory and peer-rank failures as one-line errors."""
    try:
        return trainer.fit()
    except torch.OutOfMemoryError as exc:
        where = f"rank {ctx.rank} of {ctx.world_size}: " if ctx.enabled else ""
        raise TrainingOutOfMemoryError(
            f"{where}out of memory on {ctx.device} ({str(exc).strip().splitlines()[0]}); lower --batch-size, --fanout or --hidden, "
            "or keep the features off the GPU (--features pinned or mmap)"
        ) from None
    except RuntimeError as exc:  # a rank's own failure (a bad input, a damaged checkpoint) is reported as itself
        if ctx.enabled and caused_by_another_rank(exc):
            raise describe_failure(exc, ctx) from None
        raise


def _train_link(ds, settings: TrainSettings, ctx) -> dict | None:
    """``--task link``: edge-seed batches, a GraphSAGE encoder with a dot or MLP decoder, AUC/MRR/Hits@K (see ``link_task``)."""
    from sparsetrain.engine.link_task import link_forward, link_loss, link_parts, ranking_negatives

    if settings.model != "sage":
        raise DatasetError(f"--task link trains the GraphSAGE encoder; drop --model {settings.model}")
    torch.manual_seed(settings.seed)
    loader, model, evaluate = link_parts(ds, settings, ctx, _features(ds, settings, ctx), _graph(ds, ctx))
    model = wrap_model(model, ctx)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    epochs = settings.epochs if settings.epochs is not None else auto_epochs(len(loader), LINK_AUTO_STEPS)
    trainer = Trainer(model, loader, optimizer, epochs=epochs, loss_fn=link_loss, evaluate=evaluate, batch_forward=link_forward,
                      select_metric="val_auc", checkpoint_dir=settings.checkpoint_dir, checkpoint_every=settings.checkpoint_every,
                      resume=settings.resume, log_path=settings.log, quiet=settings.quiet, is_main=ctx.is_main,
                      precision=settings.precision, run_info=_run_info(ds, settings), max_steps=settings.max_steps)
    summary = _fit(trainer, ctx)
    summary.update({"task": "link", "model": settings.model, "decoder": settings.decoder, "dataset": str(ds.path),
                    "world_size": ctx.world_size, "negatives_per_positive": ranking_negatives(ds.edge_split)})
    return summary if ctx.is_main else None
