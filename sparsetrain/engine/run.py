"""One training run from settings: what ``sparsetrain train`` (and torchrun) executes, for every dataset.

A homogeneous dataset and a typed one go through the same steps: the model chosen from the graph and ``--model``
(:func:`chosen_model`), the feature stores placed (one, or one per node type, each behind its share of the cache),
the sampler over the graph, the loader, evaluation and the Trainer. What differs is data, not code: on a typed graph
the batches' fields are dicts by node / edge type and the model is the R-GCN.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from sparsetrain.engine.distributed import caused_by_another_rank, describe_failure, init_from_env, shutdown, wrap_model
from sparsetrain.engine.evaluate import full_graph_evaluator, sampled_evaluator
from sparsetrain.engine.dataset_checks import check_for_training
from sparsetrain.engine.host_memory import available_host_memory, retain_freed_host_memory
from sparsetrain.engine.inference import layerwise_cost, sampled_cost
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.trainer import Trainer
from sparsetrain._deprecation import renamed_keyword
from sparsetrain.errors import DatasetError, SettingError, SparsetrainError
from sparsetrain.nn.models import build_model
from sparsetrain.sampling.fanouts import Fanouts

LAYER_TABLE_BUDGET = 4 << 30  # bytes of one layer's embeddings kept in memory by layer-wise evaluation; larger ones go to disk


class TrainingOutOfMemoryError(SparsetrainError, RuntimeError):
    """This rank ran out of (GPU or host) memory while training."""


TASKS = ("node", "link")
TYPED_MODELS = ("rgcn",)
"""Models that train on a typed (heterogeneous) dataset."""
EXCLUDE_CHOICES = ("auto", "none", "self", "reverse")


@dataclass
class TrainSettings:
    data: Path | None = None
    task: str = "node"  # "link": sparsetrain.engine.link_task
    decoder: str = "dot"  # link task: "dot" or "mlp"
    exclude: str = "auto"  # link task: seed edges left out of the blocks; auto = reverse on symmetric graphs, else self
    model: str | None = None  # None: chosen_model() (sage; rgcn on a typed dataset)
    fanouts: Fanouts = field(default_factory=lambda: Fanouts([10, 10]))  # --fanout
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
    verify: bool = False  # check every file's sha256 and the structure before training (see engine.dataset_checks)
    fanout: InitVar[list[int] | None] = None  # the old name of ``fanouts``, kept for one release

    def __post_init__(self, fanout: list[int] | None) -> None:
        if fanout is not None:
            renamed_keyword("TrainSettings", "fanout", "fanouts", stacklevel=4)
            self.fanouts = fanout
        self.fanouts = Fanouts.of(self.fanouts)


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


def chosen_model(ds, settings: TrainSettings) -> str:
    """The model this run trains: ``--model``, else sage (rgcn on a typed dataset); one the graph cannot train is a
    one-line :class:`SettingError` naming the ones it can, never replaced by another."""
    if settings.model is None:
        return "rgcn" if ds.is_typed and settings.task == "node" else "sage"
    if ds.is_typed and settings.model not in TYPED_MODELS:
        raise SettingError(f"--model {settings.model}: a typed dataset trains {', '.join(TYPED_MODELS)} (an R-GCN: one "
                           "convolution per edge type); drop --model or pass --model rgcn")
    if not ds.is_typed and settings.model in TYPED_MODELS:
        raise SettingError(f"--model {settings.model}: {ds.path} is a homogeneous dataset (one edge type); "
                           "pass --model sage, gcn, gat or gt")
    return settings.model


def resolved(settings: TrainSettings) -> TrainSettings:
    """``settings`` with the model's defaults filled in where a field is None (``epochs`` stays None: it needs the loader)."""
    defaults = LINK_DEFAULTS if settings.task == "link" else MODEL_DEFAULTS.get(settings.model, MODEL_DEFAULTS["sage"])
    return replace(settings, **{k: defaults[k] for k in ("lr", "weight_decay", "hidden") if getattr(settings, k) is None})


FEATURE_PLACEMENTS = ("auto", "mmap", "disk", "memory", "device", "pinned", "sharded")
GPU_RESIDENT_FRACTION = 0.4  # of the GPU's free memory that the features, and then the graph, may each take to live there


def _fits_on_gpu(nbytes: int, device: torch.device) -> bool:
    return nbytes <= GPU_RESIDENT_FRACTION * torch.cuda.mem_get_info(device)[0]


def _feature_tables(ds) -> dict:
    """The dataset's feature tables by node type (None for a homogeneous dataset's one table)."""
    return dict(ds.features) if ds.is_typed else {None: ds.features}


def _placement(ds, settings: TrainSettings, ctx) -> str:
    """``--features auto``: on a GPU, the features in device memory when they fit, else in pinned host memory read
    zero-copy by the GPU; on a CPU, or in front of a cache, memory-mapped."""
    if settings.features != "auto":
        return settings.features
    if ctx.device.type != "cuda" or settings.cache_gb > 0:
        return "mmap"
    nbytes = sum(table.nbytes for table in _feature_tables(ds).values())
    return "device" if _fits_on_gpu(nbytes, ctx.device) else "pinned"


def _graph(ds, ctx):
    """The sampler's topology: in GPU memory when it fits (sampling then runs on the GPU), else the host's (always
    for a typed graph: typed sampling runs on the CPU)."""
    graph = ds.graph
    if graph.is_typed:
        return graph
    nbytes = sum(t.numel() * t.element_size() for t in (graph.indptr, graph.indices, graph.weights) if t is not None)
    return graph.to(ctx.device) if ctx.device.type == "cuda" and _fits_on_gpu(nbytes, ctx.device) else graph


def _features(ds, settings: TrainSettings, ctx):
    """The feature store (see ``--features``), or on a typed dataset one per node type with features, each placed the
    same way: memory-mapped (ranks share the page cache), read from disk with O_DIRECT (files larger than memory), in
    host memory, in GPU memory, pinned host memory read zero-copy by the GPU, or (homogeneous) sharded across ranks;
    behind a cache when --cache-gb asks (on a typed dataset the budget is split by the types' feature bytes)."""
    from sparsetrain.storage import CachedFeatures

    placement = _placement(ds, settings, ctx)
    if placement not in FEATURE_PLACEMENTS:
        raise DatasetError(f"--features {settings.features!r}: choose one of {', '.join(FEATURE_PLACEMENTS)}")
    if placement == "sharded":
        return _sharded(ds, settings, ctx)
    if placement in ("device", "pinned") and ctx.device.type != "cuda":
        raise DatasetError(f"--features {placement} needs a CUDA device (this run is on {ctx.device}); use --features mmap or memory")
    tables = _feature_tables(ds)
    total = sum(table.nbytes for table in tables.values())
    stores = {}
    for node_type, table in tables.items():
        store = _placed(ds, node_type, table, placement, ctx)
        if settings.cache_gb > 0:
            budget = max(int(settings.cache_gb * 2**30 * table.nbytes / max(total, 1)), table.row_bytes)
            hotness = _cache_hotness(ds, node_type) if settings.cache_policy in ("static", "hybrid") else None
            store = CachedFeatures(store, budget, policy=settings.cache_policy, device=ctx.device, hotness=hotness)
        stores[node_type] = store
    return stores if ds.is_typed else stores[None]


def _placed(ds, node_type: str | None, table, placement: str, ctx):
    """One feature table (``node_type`` None: the homogeneous one) where ``placement`` puts it."""
    from sparsetrain.storage import PinnedFeatures, TensorFeatures

    if placement == "memory":
        return TensorFeatures(table.clone())
    if placement == "device":
        return TensorFeatures(table.to(ctx.device))
    if placement == "pinned":
        return PinnedFeatures(table.numpy(), device=ctx.device, copy=True)
    if placement == "disk":
        return ds.feature_store(node_type, mode="direct")
    return ds.feature_store(node_type)  # mmap: a store of its own (its own read statistics), checked against meta.json


def _sharded(ds, settings: TrainSettings, ctx):
    """``--features sharded``: each rank holds a share of the rows and the rest comes through a collective."""
    if ds.is_typed:
        raise SettingError("--features sharded: typed datasets are not sharded yet; pass --features mmap, disk, memory, "
                           "device or pinned")
    if settings.cache_gb > 0:
        raise DatasetError("--cache-gb cannot front sharded features (a cache hit would skip the collective the other "
                           "ranks wait in); drop one of them")
    from sparsetrain.collective import ShardedFeatures, new_group

    # a group of its own (with the library's timeout): the loader thread's collectives never interleave with DDP's
    group = new_group() if ctx.enabled else None
    return ShardedFeatures.from_table(ds.features, group=group, device=ctx.device)


EXACT_EVAL_MAX_NODES = 100_000  # below this both evaluations take seconds; the exact one is preferred
LAYERWISE_EDGE_COST = 16  # a layer-wise edge costs ~16 sampled ones on 2 CPU cores (chunks re-gather their neighbors; RESULTS.md)


def _full_eval(ds, settings: TrainSettings, eval_split: dict) -> bool:
    """Whether this run evaluates with exact layer-wise inference (``--eval``) rather than on sampled batches."""
    if ds.is_typed:
        if settings.eval == "full":
            raise SettingError("--eval full: typed datasets evaluate on sampled batches (no layer-wise R-GCN inference "
                               "yet); pass --eval sampled or auto")
        return False
    if settings.model == "gt":  # evaluated on sampled batches, like it trains (its cluster attention is per batch)
        return False
    return settings.eval == "full" or (settings.eval == "auto" and _full_eval_is_cheaper(ds, settings, eval_split))


def _full_eval_is_cheaper(ds, settings: TrainSettings, eval_split: dict) -> bool:
    """``--eval auto``: exact layer-wise inference on small graphs (Cora), and on larger ones when its edges, weighted
    by their measured cost, are fewer than those of sampled evaluation of the val/test nodes (never on papers100M,
    1% labelled; on a 200K-node graph with 40% of nodes to evaluate it lost 93 s to 66 s, so sampled there too)."""
    if ds.num_nodes <= EXACT_EVAL_MAX_NODES:
        return True
    eval_nodes = sum(len(idx) for idx in eval_split.values())
    fanouts = settings.fanouts
    return LAYERWISE_EDGE_COST * layerwise_cost(ds.num_edges, fanouts.num_hops) <= sampled_cost(eval_nodes, fanouts.as_list())


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


def _cache_hotness(ds, node_type: str | None = None) -> np.ndarray:
    """The cache's hot set ranking: each row's out-degree, how many in-neighbor lists can draw it (on a typed graph:
    over every edge type whose source is ``node_type``). On the papers100M-scale graph it beat counts of 8 pre-sampled
    batches (which see 4% of the rows) by 15-37 points of hit rate at 2-8 GiB (benchmarks/RESULTS.md)."""
    if not ds.is_typed:
        return ds.graph.out_degrees().numpy()
    degrees = torch.zeros(ds.num_nodes[node_type], dtype=torch.int64)
    for et in ds.edge_types:
        if et[0] == node_type:
            degrees += torch.bincount(ds.graph.relation(et).indices.long(), minlength=len(degrees))
    return degrees.numpy()


def _run_info(ds, settings: TrainSettings) -> dict:
    """What, beyond the Trainer's own view (parameters, seed, batching), makes a checkpoint this run's."""
    meta = hashlib.sha256((ds.path / "meta.json").read_bytes()).hexdigest()  # meta.json holds every array's sha256
    info = {"model": settings.model, "dataset": {"path": str(ds.path), "sha256": meta}, "fanout": settings.fanouts.as_list()}
    if settings.task != "node":
        info.update(task=settings.task, decoder=settings.decoder, exclude=settings.exclude)
    return info


def _check_cache_fits(settings: TrainSettings, ctx) -> None:
    """``--cache-gb`` within the memory the cache would live in: the GPU's free memory on CUDA, else the host's."""
    if settings.cache_gb <= 0:
        return
    if ctx.device.type == "cuda":
        free, where = torch.cuda.mem_get_info(ctx.device)[0], f"free memory of {ctx.device}"
    else:
        free, where = available_host_memory()
    if settings.cache_gb * 2**30 > free:
        raise SettingError(f"--cache-gb {settings.cache_gb:g}: only {free / 2**30:.1f} GiB are available ({where}); "
                           f"pass a --cache-gb below {free / 2**30:.1f}")


def _node_target(ds, settings: TrainSettings) -> tuple[str | None, torch.Tensor, dict[str, torch.Tensor], int]:
    """The node type to train on (None: the homogeneous graph's nodes), its labels, its split and class count. A typed
    dataset's type without a split gets a random 60/20/20 one."""
    if not ds.is_typed:
        if ds.features is None or ds.labels is None or "train" not in ds.split:
            raise DatasetError(f"{ds.path}: training needs features, labels and a train split; "
                               "re-import with --features and --labels")
        return None, ds.labels, ds.split, ds.num_classes
    target = settings.target_type or ds.target_type
    if target is None:
        raise DatasetError(f"{ds.path}: the dataset names no target node type; "
                           f"pass --target-type (one of {', '.join(ds.node_types)})")
    if target not in ds.num_nodes:
        raise DatasetError(f"--target-type {target}: {ds.path} has no such node type; "
                           f"choose one of {', '.join(ds.node_types)}")
    if target not in ds.labels:
        labelled = ", ".join(ds.labels) or "none"
        raise DatasetError(f"{ds.path}: node type {target!r} has no labels to train on (labelled types: {labelled}); "
                           "pass another --target-type")
    if ds.num_classes is None and target == ds.target_type:
        raise DatasetError(f"{ds.path}: node type {target!r} has labels but no class count; re-import the dataset")
    split = ds.split
    if target != ds.target_type or "train" not in split:
        perm = torch.from_numpy(np.random.default_rng(settings.seed).permutation(ds.num_nodes[target]))
        a, b = int(0.6 * len(perm)), int(0.8 * len(perm))
        split = {"train": perm[:a].sort().values, "val": perm[a:b].sort().values, "test": perm[b:].sort().values}
    return target, ds.labels[target], split, ds.num_classes_of(target)


def _node_model(ds, settings: TrainSettings, target: str | None, num_classes: int):
    """The model ``settings.model`` names (already checked against the graph by :func:`chosen_model`)."""
    layers = settings.fanouts.num_hops
    if settings.model == "rgcn":
        from sparsetrain.nn.rgcn import RGCN

        return RGCN(ds.node_types, ds.edge_types, ds.num_features, settings.hidden, num_classes, layers, target,
                    num_nodes=ds.num_nodes, dropout=settings.dropout)
    extra = {k: v for k, v in MODEL_DEFAULTS.get(settings.model, {}).items()
             if k not in ("lr", "weight_decay", "hidden")}
    return build_model(settings.model, ds.num_features, settings.hidden, num_classes, layers, settings.dropout, **extra)


def _node_parts(ds, settings: TrainSettings, ctx):
    """``(loader, model, evaluate)`` of a node classification run, homogeneous or typed."""
    from sparsetrain.sampling import NeighborSampler

    target, labels, split, num_classes = _node_target(ds, settings)
    features = _features(ds, settings, ctx)
    graph = _graph(ds, ctx)
    host_labels = labels
    if graph.device.type == "cuda":
        labels = labels.to(ctx.device)  # indexed by GPU-sampled seeds
    clusters = _clusters(ds) if settings.model == "gt" else None
    seed_type = {"seed_type": target} if ds.is_typed else {}
    sampler = _model_sampler(NeighborSampler(graph, settings.fanouts, seed=settings.seed, **seed_type), clusters,
                             settings)
    loader = Loader(sampler, features, labels, split["train"], batch_size=settings.batch_size, device=ctx.device,
                    seed=settings.seed, rank=ctx.rank, world_size=ctx.world_size)
    model = _node_model(ds, settings, target, num_classes)
    eval_split = {k: v for k, v in split.items() if k != "train"}
    if not eval_split:
        return loader, model, None
    if _full_eval(ds, settings, eval_split):
        evaluate = full_graph_evaluator(features, host_labels, ds.graph, eval_split, device=ctx.device,
                                        memory_budget=LAYER_TABLE_BUDGET)
    else:
        eval_sampler = _model_sampler(NeighborSampler(graph, settings.fanouts, seed=settings.seed + 1, **seed_type),
                                      clusters, settings)
        evaluate = sampled_evaluator(eval_sampler, features, labels, eval_split, batch_size=settings.batch_size, device=ctx.device)
    return loader, model, evaluate


def train(settings: TrainSettings) -> dict | None:
    """Train and return the summary on the main rank (``None`` on the others)."""
    from sparsetrain.engine.default_data import open_dataset

    retain_freed_host_memory()  # before the first large allocation; the Trainer would do it only after set-up
    ctx = init_from_env(settings.device)
    try:
        ds = open_dataset(settings.data, quiet=settings.quiet or not ctx.is_main, task=settings.task)
        if settings.target_type is not None and not ds.is_typed:
            raise DatasetError(f"--target-type {settings.target_type}: {ds.path} is a homogeneous dataset (one node type); drop --target-type")
        if settings.task == "link" and ds.is_typed:
            raise DatasetError(f"--task link: {ds.path} is a typed (heterogeneous) dataset; link prediction trains on homogeneous datasets made with --link-split")
        settings = resolved(replace(settings, model=chosen_model(ds, settings)))
        check_for_training(ds, verify=settings.verify, task=settings.task, target_type=settings.target_type)
        _check_cache_fits(settings, ctx)
        if settings.task == "link":
            return _train_link(ds, settings, ctx)
        torch.manual_seed(settings.seed)
        loader, model, evaluate = _node_parts(ds, settings, ctx)
        if ds.is_typed and ctx.is_main and not settings.quiet:
            target = settings.target_type or ds.target_type
            print(f"training {settings.model} on node type {target!r} of a typed dataset", flush=True)
        model = wrap_model(model, ctx)
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
        epochs = settings.epochs if settings.epochs is not None else auto_epochs(len(loader))
        trainer = Trainer(model, loader, optimizer, epochs=epochs, evaluate=evaluate,
                          checkpoint_dir=settings.checkpoint_dir, checkpoint_every=settings.checkpoint_every,
                          resume=settings.resume, log_path=settings.log, quiet=settings.quiet, is_main=ctx.is_main,
                          precision=settings.precision, run_info=_run_info(ds, settings), max_steps=settings.max_steps,
                          hyperparameters={"dropout": settings.dropout})
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
                      precision=settings.precision, run_info=_run_info(ds, settings), max_steps=settings.max_steps,
                      hyperparameters={"dropout": settings.dropout})
    summary = _fit(trainer, ctx)
    summary.update({"task": "link", "model": settings.model, "decoder": settings.decoder, "dataset": str(ds.path),
                    "world_size": ctx.world_size, "negatives_per_positive": ranking_negatives(ds.edge_split)})
    return summary if ctx.is_main else None
