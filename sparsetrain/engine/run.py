"""One training run from settings: what ``sparsetrain train`` (and torchrun) executes, for every dataset.

A homogeneous dataset and a typed one go through the same steps: the model chosen from the graph and ``--model``
(:func:`chosen_model`), the feature stores placed (one, or one per node type, each behind its share of the cache),
the sampler over the graph, the loader, evaluation and the Trainer. What differs is data, not code: on a typed graph
the batches' fields are dicts by node / edge type and the model is the R-GCN.

:func:`train` takes a :class:`~sparsetrain.engine.settings.TrainSettings`, one small settings object per concern, and
hands each step the part it uses (the feature stores :class:`FeatureSettings`, the model :class:`ModelSettings`, ...).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

import numpy as np
import torch

from sparsetrain.engine.distributed import caused_by_another_rank, describe_failure, init_from_env, shutdown, wrap_model
from sparsetrain.engine.evaluate import full_graph_evaluator, sampled_evaluator
from sparsetrain.engine.dataset_checks import check_for_training
from sparsetrain.engine.host_memory import available_host_memory, retain_freed_host_memory
from sparsetrain.engine.inference import layerwise_cost, sampled_cost
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.settings import (TYPED_MODELS, DataSettings, FeatureSettings, ModelSettings, SamplingSettings,
                                        TrainSettings)
from sparsetrain.engine.trainer import Trainer
from sparsetrain.errors import DatasetError, SettingError, SparsetrainError
from sparsetrain.nn.models import build_model
from sparsetrain.sampling.fanouts import Fanouts

# bytes of one layer's embeddings kept in memory by layer-wise evaluation; larger ones go to disk
LAYER_TABLE_BUDGET = 4 << 30


class TrainingOutOfMemoryError(SparsetrainError, RuntimeError):
    """This rank ran out of (GPU or host) memory while training."""


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
"""``--task link`` epochs when ``--epochs`` is not given: about this many steps (Cora: 150 epochs); the best val AUC
epoch is reported."""

AUTO_STEPS = 2000
AUTO_MAX_EPOCHS = 200


def auto_epochs(steps_per_epoch: int, steps: int = AUTO_STEPS) -> int:
    """Epochs when ``--epochs`` is not given: about ``AUTO_STEPS`` optimizer steps, at most ``AUTO_MAX_EPOCHS`` epochs.

    A fixed epoch count means 1 step an epoch on a small train set (Cora: 140 seeds) and hundreds on a large one
    (products: 193); counting steps gives both enough training (Cora 200 epochs, arxiv 23, products 11), and the
    reported test accuracy is the one at the best validation epoch."""
    return max(1, min(AUTO_MAX_EPOCHS, math.ceil(steps / max(steps_per_epoch, 1))))


def chosen_model(ds, model: ModelSettings, task: str) -> str:
    """The model this run trains: ``--model``, else sage (rgcn on a typed dataset); one the graph cannot train is a
    one-line :class:`SettingError` naming the ones it can, never replaced by another."""
    if model.name is None:
        return "rgcn" if ds.is_typed and task == "node" else "sage"
    if ds.is_typed and model.name not in TYPED_MODELS:
        raise SettingError(f"--model {model.name}: a typed dataset trains {', '.join(TYPED_MODELS)} (an R-GCN: one "
                           "convolution per edge type); drop --model or pass --model rgcn")
    if not ds.is_typed and model.name in TYPED_MODELS:
        raise SettingError(f"--model {model.name}: {ds.path} is a homogeneous dataset (one edge type); "
                           "pass --model sage, gcn, gat or gt")
    return model.name


def resolved(settings: TrainSettings) -> TrainSettings:
    """``settings`` with the model's defaults filled in where a field is None (``epochs`` stays None: it needs the
    loader)."""
    task, model, optim = settings.data.task, settings.model, settings.optim
    defaults = LINK_DEFAULTS if task == "link" else MODEL_DEFAULTS.get(model.name, MODEL_DEFAULTS["sage"])
    model = replace(model, hidden=defaults["hidden"]) if model.hidden is None else model
    optim = replace(optim, **{k: defaults[k] for k in ("lr", "weight_decay") if getattr(optim, k) is None})
    return replace(settings, model=model, optim=optim)


# of the GPU's free memory that the features, and then the graph, may each take to live there
GPU_RESIDENT_FRACTION = 0.4
PINNED_HOST_FRACTION = 0.5  # of the host's free memory that a pinned copy of the features may take behind a GPU cache


def _fits_on_gpu(nbytes: int, device: torch.device) -> bool:
    return nbytes <= GPU_RESIDENT_FRACTION * torch.cuda.mem_get_info(device)[0]


def _feature_tables(ds) -> dict:
    """The dataset's feature tables by node type (None for a homogeneous dataset's one table)."""
    return dict(ds.features) if ds.is_typed else {None: ds.features}


def _placement(ds, features: FeatureSettings, ctx) -> str:
    """``--features auto``: on a GPU, the features in device memory when they fit, else in pinned host memory read
    zero-copy by the GPU; behind a GPU cache (``--cache-gb``), pinned host memory when it fits in what the host has
    free (GraphBolt's two levels: the cache's misses cross PCIe without a CPU gather), else memory-mapped; on a CPU,
    memory-mapped."""
    if features.placement != "auto":
        return features.placement
    if ctx.device.type != "cuda":
        return "mmap"
    nbytes = sum(table.nbytes for table in _feature_tables(ds).values())
    if features.cache_gb > 0:
        return "pinned" if nbytes <= PINNED_HOST_FRACTION * available_host_memory()[0] else "mmap"
    return "device" if _fits_on_gpu(nbytes, ctx.device) else "pinned"


def _graph(ds, ctx):
    """The sampler's topology: in GPU memory when it fits (sampling then runs on the GPU), else the host's (always
    for a typed graph: typed sampling runs on the CPU)."""
    graph = ds.graph
    if graph.is_typed:
        return graph
    nbytes = sum(t.numel() * t.element_size() for t in (graph.indptr, graph.indices, graph.weights) if t is not None)
    return graph.to(ctx.device) if ctx.device.type == "cuda" and _fits_on_gpu(nbytes, ctx.device) else graph


def _features(ds, settings: FeatureSettings, ctx):
    """The feature store (see ``--features``), or on a typed dataset one per node type with features, each placed the
    same way: memory-mapped (ranks share the page cache), read from disk with O_DIRECT (files larger than memory), in
    host memory, in GPU memory, pinned host memory read zero-copy by the GPU, or (homogeneous) sharded across ranks;
    behind a cache when --cache-gb asks (on a typed dataset the budget is split by the types' feature bytes)."""
    from sparsetrain.storage import CachedFeatures

    placement = _placement(ds, settings, ctx)
    if placement == "sharded":
        return _sharded(ds, settings, ctx)
    if placement in ("device", "pinned") and ctx.device.type != "cuda":
        raise DatasetError(f"--features {placement} needs a CUDA device (this run is on {ctx.device}); use --features "
                           "mmap or memory")
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


def _sharded(ds, settings: FeatureSettings, ctx):
    """``--features sharded``: each rank holds a share of the rows and the rest comes through a collective."""
    if ds.is_typed:
        raise SettingError("--features sharded: typed datasets are not sharded yet; pass --features mmap, disk, "
                           "memory, device or pinned")
    if settings.cache_gb > 0:
        raise DatasetError("--cache-gb cannot front sharded features (a cache hit would skip the collective the other "
                           "ranks wait in); drop one of them")
    from sparsetrain.collective import ShardedFeatures, new_group

    # a group of its own (with the library's timeout): the loader thread's collectives never interleave with DDP's
    group = new_group() if ctx.enabled else None
    return ShardedFeatures.from_table(ds.features, group=group, device=ctx.device)


EXACT_EVAL_MAX_NODES = 100_000  # below this both evaluations take seconds; the exact one is preferred
# a layer-wise edge costs ~16 sampled ones on 2 CPU cores (chunks re-gather their neighbors; RESULTS.md)
LAYERWISE_EDGE_COST = 16


def _full_eval(ds, evaluation: str, model: str, sampling: SamplingSettings, eval_split: dict) -> bool:
    """Whether this run evaluates with exact layer-wise inference (``--eval``) rather than on sampled batches."""
    fanouts = sampling.fanouts
    if sampling.temporal:  # exact inference would read every neighbor, later ones too
        if evaluation == "full":
            raise SettingError("--eval full reads every neighbor, later ones too; --temporal evaluates on temporally "
                               "sampled batches: pass --eval sampled or auto")
        return False
    if ds.is_typed:
        if evaluation == "full":
            raise SettingError("--eval full: typed datasets evaluate on sampled batches (no layer-wise R-GCN inference "
                               "yet); pass --eval sampled or auto")
        return False
    if model == "gt":  # evaluated on sampled batches, like it trains (its cluster attention is per batch)
        return False
    return evaluation == "full" or (evaluation == "auto" and _full_eval_is_cheaper(ds, fanouts, eval_split))


def _full_eval_is_cheaper(ds, fanouts: Fanouts, eval_split: dict) -> bool:
    """``--eval auto``: exact layer-wise inference on small graphs (Cora), and on larger ones when its edges, weighted
    by their measured cost, are fewer than those of sampled evaluation of the val/test nodes (never on papers100M,
    1% labelled; on a 200K-node graph with 40% of nodes to evaluate it lost 93 s to 66 s, so sampled there too)."""
    if ds.num_nodes <= EXACT_EVAL_MAX_NODES:
        return True
    eval_nodes = sum(len(idx) for idx in eval_split.values())
    layerwise = LAYERWISE_EDGE_COST * layerwise_cost(ds.num_edges, fanouts.num_hops)
    return layerwise <= sampled_cost(eval_nodes, fanouts)


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


def _model_sampler(sampler, clusters: torch.Tensor | None, model: str):
    """The graph transformer's batches carry cluster ids (see ``_clusters``)."""
    if model != "gt":
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
    info = {"model": settings.model.name, "dataset": {"path": str(ds.path), "sha256": meta},
            "fanout": settings.sampling.fanouts.as_list()}
    if settings.data.task != "node":
        info.update(task=settings.data.task, decoder=settings.model.decoder, exclude=settings.sampling.exclude)
    if settings.sampling.temporal:
        info.update(temporal=settings.sampling.temporal_strategy or "uniform")
    return info


def _check_cache_fits(settings: FeatureSettings, ctx) -> None:
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


def _node_target(ds, data: DataSettings, seed: int) -> tuple[str | None, torch.Tensor, dict[str, torch.Tensor], int]:
    """The node type to train on (None: the homogeneous graph's nodes), its labels, its split and class count. A typed
    dataset's type without a split gets a random 60/20/20 one."""
    if not ds.is_typed:
        if ds.features is None or ds.labels is None or "train" not in ds.split:
            raise DatasetError(f"{ds.path}: training needs features, labels and a train split; "
                               "re-import with --features and --labels")
        return None, ds.labels, ds.split, ds.num_classes
    target = data.target_type or ds.target_type
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
        perm = torch.from_numpy(np.random.default_rng(seed).permutation(ds.num_nodes[target]))
        a, b = int(0.6 * len(perm)), int(0.8 * len(perm))
        split = {"train": perm[:a].sort().values, "val": perm[a:b].sort().values, "test": perm[b:].sort().values}
    return target, ds.labels[target], split, ds.num_classes_of(target)


def _node_model(ds, model: ModelSettings, layers: int, target: str | None, num_classes: int):
    """The model ``model.name`` names (already checked against the graph by :func:`chosen_model`)."""
    if model.name == "rgcn":
        from sparsetrain.nn.rgcn import RGCN

        return RGCN(ds.node_types, ds.edge_types, ds.num_features, model.hidden, num_classes, layers, target,
                    num_nodes=ds.num_nodes, dropout=model.dropout)
    extra = {k: v for k, v in MODEL_DEFAULTS.get(model.name, {}).items() if k not in ("lr", "weight_decay", "hidden")}
    return build_model(model.name, ds.num_features, model.hidden, num_classes, layers, model.dropout, **extra)


def _temporal(ds, sampling: SamplingSettings, model: str, target: str | None) -> dict:
    """``NeighborSampler``'s temporal keywords for ``--temporal`` (empty without it): the dataset's edge times when it
    has them, else its node times; a seed's time is its node time (PyG's rule: no neighbor later than it)."""
    if not sampling.temporal:
        return {}
    if not ds.has_times:
        raise DatasetError(f"--temporal: {ds.path} stores no node or edge times; re-import it with `sparsetrain "
                           "preprocess ... --node-time FILE` (and --edge-time-column NAME for edge times)")
    if model == "gt":
        raise SettingError("--temporal with --model gt is not supported (its cluster attention spans the batch's "
                           "subgraphs); pass --model sage, gcn or gat")
    node_time = (ds.node_time or {}).get(target) if ds.is_typed else ds.node_time
    if node_time is None:
        name = f"node type {target!r}" if ds.is_typed else "its nodes"
        raise DatasetError(f"--temporal: a seed's time is its node time, but {ds.path} has no node times for {name}; "
                           "re-import it with --node-time")
    strategy = sampling.temporal_strategy or "uniform"
    has_edge_time = bool(ds.edge_time) if ds.is_typed else ds.edge_time is not None
    timed = {"edge_time": ds.edge_time} if has_edge_time else {"node_time": ds.node_time}
    return {**timed, "temporal_strategy": strategy}


def _neighbor_sampler(ds, graph, sampling: SamplingSettings, model: str, seed: int, target: str | None):
    """The run's ``NeighborSampler`` (temporal with ``--temporal``: seeds timed by their node times)."""
    from sparsetrain.sampling import NeighborSampler
    from sparsetrain.sampling.temporal import SeedNodeTimes

    seed_type = {"seed_type": target} if ds.is_typed else {}
    temporal = _temporal(ds, sampling, model, target)
    sampler = NeighborSampler(graph, sampling.fanouts, seed=seed, **seed_type, **temporal)
    return SeedNodeTimes(sampler, ds.node_time) if "edge_time" in temporal else sampler


def _node_parts(ds, settings: TrainSettings, ctx):
    """``(loader, model, evaluate)`` of a node classification run, homogeneous or typed."""
    sampling, model, seed = settings.sampling, settings.model, settings.run.seed
    target, labels, split, num_classes = _node_target(ds, settings.data, seed)
    features = _features(ds, settings.features, ctx)
    graph = ds.graph if sampling.temporal else _graph(ds, ctx)  # temporal sampling runs on the CPU
    host_labels = labels
    if graph.device.type == "cuda":
        labels = labels.to(ctx.device)  # indexed by GPU-sampled seeds
    clusters = _clusters(ds) if model.name == "gt" else None
    sampler = _model_sampler(_neighbor_sampler(ds, graph, sampling, model.name, seed, target), clusters, model.name)
    loader = Loader(sampler, features, labels, split["train"], batch_size=sampling.batch_size, device=ctx.device,
                    seed=seed, rank=ctx.rank, world_size=ctx.world_size)
    network = _node_model(ds, model, sampling.fanouts.num_hops, target, num_classes)
    eval_split = {k: v for k, v in split.items() if k != "train"}
    if not eval_split:
        return loader, network, None
    if _full_eval(ds, settings.run.eval, model.name, sampling, eval_split):
        evaluate = full_graph_evaluator(features, host_labels, ds.graph, eval_split, device=ctx.device,
                                        memory_budget=LAYER_TABLE_BUDGET)
    else:
        eval_sampler = _model_sampler(_neighbor_sampler(ds, graph, sampling, model.name, seed + 1, target), clusters,
                                      model.name)
        evaluate = sampled_evaluator(eval_sampler, features, labels, eval_split, batch_size=sampling.batch_size,
                                     device=ctx.device)
    return loader, network, evaluate


def train(settings: TrainSettings) -> dict | None:
    """Train and return the summary on the main rank (``None`` on the others)."""
    from sparsetrain.engine.default_data import open_dataset

    retain_freed_host_memory()  # before the first large allocation; the Trainer would do it only after set-up
    data, run = settings.data, settings.run
    ctx = init_from_env(run.device)
    try:
        ds = open_dataset(data.path, quiet=run.quiet or not ctx.is_main, task=data.task)
        if data.target_type is not None and not ds.is_typed:
            raise DatasetError(f"--target-type {data.target_type}: {ds.path} is a homogeneous dataset (one node type); "
                               "drop --target-type")
        if data.task == "link" and settings.sampling.temporal:
            raise SettingError("--temporal samples node classification batches; --task link does not sample "
                               "temporally yet: drop one of them")
        if data.task == "link" and ds.is_typed:
            raise DatasetError(f"--task link: {ds.path} is a typed (heterogeneous) dataset; link prediction trains on "
                               "homogeneous datasets made with --link-split")
        model = replace(settings.model, name=chosen_model(ds, settings.model, data.task))
        settings = resolved(replace(settings, model=model))
        check_for_training(ds, verify=data.verify, task=data.task, target_type=data.target_type)
        _check_cache_fits(settings.features, ctx)
        if data.task == "link":
            return _train_link(ds, settings, ctx)
        torch.manual_seed(run.seed)
        loader, model, evaluate = _node_parts(ds, settings, ctx)
        if ds.is_typed and ctx.is_main and not run.quiet:
            target = data.target_type or ds.target_type
            print(f"training {settings.model.name} on node type {target!r} of a typed dataset", flush=True)
        summary = _fit(_trainer(ds, settings, ctx, model, loader, evaluate, AUTO_STEPS), ctx)
        summary.update({"model": settings.model.name, "dataset": str(ds.path), "world_size": ctx.world_size})
        return summary if ctx.is_main else None
    finally:
        shutdown(ctx)


def _trainer(ds, settings: TrainSettings, ctx, model, loader: Loader, evaluate, auto_steps: int, **task) -> Trainer:
    """The one Trainer of a run: ``model`` wrapped for the ranks, Adam, the epochs (``auto_steps`` optimizer steps
    when not given), checkpoints and logs as ``settings.run`` says; ``task``: the task's hooks (link: its loss,
    batch forward and metric)."""
    optim, run = settings.optim, settings.run
    model = wrap_model(model, ctx)
    optimizer = torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)
    epochs = optim.epochs if optim.epochs is not None else auto_epochs(len(loader), auto_steps)
    return Trainer(model, loader, optimizer, epochs=epochs, evaluate=evaluate, checkpoint_dir=run.checkpoint_dir,
                   checkpoint_every=run.checkpoint_every, resume=run.resume, log_path=run.log, quiet=run.quiet,
                   is_main=ctx.is_main, precision=run.precision, run_info=_run_info(ds, settings),
                   max_steps=optim.max_steps, hyperparameters={"dropout": settings.model.dropout}, **task)


def _fit(trainer: Trainer, ctx) -> dict:
    """``trainer.fit()`` with out-of-memory and peer-rank failures as one-line errors."""
    try:
        return trainer.fit()
    except torch.OutOfMemoryError as exc:
        where = f"rank {ctx.rank} of {ctx.world_size}: " if ctx.enabled else ""
        raise TrainingOutOfMemoryError(
            f"{where}out of memory on {ctx.device} ({str(exc).strip().splitlines()[0]}); lower --batch-size, --fanout "
            "or --hidden, or keep the features off the GPU (--features pinned or mmap)"
        ) from None
    except RuntimeError as exc:  # a rank's own failure (a bad input, a damaged checkpoint) is reported as itself
        if ctx.enabled and caused_by_another_rank(exc):
            raise describe_failure(exc, ctx) from None
        raise


def _train_link(ds, settings: TrainSettings, ctx) -> dict | None:
    """``--task link``: edge-seed batches, a GraphSAGE encoder with a dot or MLP decoder, AUC/MRR/Hits@K (see
    ``link_task``)."""
    from sparsetrain.engine.link_task import link_forward, link_loss, link_parts, ranking_negatives

    if settings.model.name != "sage":
        raise DatasetError(f"--task link trains the GraphSAGE encoder; drop --model {settings.model.name}")
    torch.manual_seed(settings.run.seed)
    features = _features(ds, settings.features, ctx)
    loader, model, evaluate = link_parts(ds, settings.sampling, settings.model, settings.run.seed, ctx, features,
                                         _graph(ds, ctx))
    trainer = _trainer(ds, settings, ctx, model, loader, evaluate, LINK_AUTO_STEPS, loss_fn=link_loss,
                       batch_forward=link_forward, select_metric="val_auc")
    summary = _fit(trainer, ctx)
    summary.update({"task": "link", "model": settings.model.name, "decoder": settings.model.decoder,
                    "dataset": str(ds.path), "world_size": ctx.world_size,
                    "negatives_per_positive": ranking_negatives(ds.edge_split)})
    return summary if ctx.is_main else None
