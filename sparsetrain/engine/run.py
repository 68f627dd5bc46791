"""One training run from settings: what ``sparsetrain train`` (and torchrun) executes, for every dataset.

:func:`train` goes down once: the device (:func:`~sparsetrain.engine.distributed.init_from_env`), the dataset, the
plan (:func:`~sparsetrain.engine.plan.plan` of the dataset's description: every decision and check, before anything is
built), the dataset's checks, then the builders below, each taking the plan's fields it follows: the feature stores
(one per node type, each behind its share of the cache), the sampler over the graph, the loader, the model, the
evaluation and the :class:`~sparsetrain.engine.trainer.Trainer`. A homogeneous dataset is the one-type case (node
type ``_N``): on a typed graph the batches' fields are dicts by node / edge type and the model is the R-GCN.
"""

from __future__ import annotations

import numpy as np
import torch

from sparsetrain.collective import ShardedFeatures, new_group
from sparsetrain.datasets import load_clusters
from sparsetrain.datasets.clustering import cluster_order
from sparsetrain.datasets.csc import RawCSC
from sparsetrain.datasets.format import NODE, of_node_type
from sparsetrain.engine.dataset_checks import check_for_training
from sparsetrain.engine.dataset_meta import DatasetMeta
from sparsetrain.engine.default_data import open_dataset
from sparsetrain.engine.distributed import (
    DistContext,
    caused_by_another_rank,
    describe_failure,
    init_from_env,
    shutdown,
    wrap_model,
)
from sparsetrain.engine.evaluate import full_graph_evaluator, sampled_evaluator
from sparsetrain.engine.host_memory import retain_freed_host_memory
from sparsetrain.engine.link_task import LINK_TASK, link_parts, ranking_negatives
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.partitioned import is_partitioned, partitioned_parts
from sparsetrain.engine.plan import RANDOM_SPLIT, RunPlan, cache_budgets, model_options, plan
from sparsetrain.engine.run_config import config_of
from sparsetrain.engine.settings import FeatureSettings, ModelSettings, SamplingSettings, TrainSettings
from sparsetrain.engine.static.sampled_loader import sampled_loader
from sparsetrain.engine.static.step import StaticStep
from sparsetrain.engine.trainer import Task, Trainer
from sparsetrain.errors import TrainingOutOfMemoryError
from sparsetrain.nn.models import build_model
from sparsetrain.nn.rgat import RGAT
from sparsetrain.nn.rgcn import RGCN
from sparsetrain.sampling import ClusterSampler, CSCGraph, NeighborSampler
from sparsetrain.sampling.temporal import SeedNodeTimes
from sparsetrain.storage import CachedFeatures, PinnedFeatures, TensorFeatures

# bytes of one layer's embeddings kept in memory by layer-wise evaluation; larger ones go to disk
LAYER_TABLE_BUDGET = 4 << 30
ONLINE_CLUSTER_MAX_NODES = 1_000_000


def train(settings: TrainSettings) -> dict | None:
    """Train and return the summary on the main rank (``None`` on the others)."""
    retain_freed_host_memory()  # before the first large allocation; the Trainer would do it only after set-up
    ctx = init_from_env(settings.run.device)
    try:
        quiet = settings.report.quiet or not ctx.is_main
        if is_partitioned(settings.data.path):
            return _train_partitioned(settings, ctx)
        ds = open_dataset(settings.data.path, quiet=quiet, task=settings.data.task)
        meta = DatasetMeta.of(ds)
        run = plan(settings, meta, ctx.device, ctx.world_size)
        check_for_training(ds, verify=settings.data.verify, task=run.task, target_type=run.target_type,
                           times=run.times is not None)
        torch.manual_seed(run.run.seed)
        config = config_of(settings)
        features = feature_stores(ds, run.features, ctx)
        if run.task == "link":
            loader, model, evaluate = link_parts(ds, run.sampling, run.model, run.run.seed, ctx, features,
                                                 ds.graph.to(run.device) if run.graph_on_device else ds.graph)
            task = LINK_TASK
        else:
            loader, model, evaluate = _node_parts(ds, meta, run, features, ctx)
            task = Task()
        if not quiet:  # the node type only when it has a user's name (a homogeneous dataset's _N has none)
            print(f"training {run.model.name}{of_node_type(run.target_type, ' on ')}", flush=True)
        summary = _fit(_trainer(run, ctx, model, loader, evaluate, task, config), ctx)
        summary.update({"model": run.model.name, "dataset": str(ds.path), "world_size": ctx.world_size,
                        "config": config})
        if run.task == "link":
            summary.update({"task": "link", "decoder": run.model.decoder,
                            "negatives_per_positive": ranking_negatives(ds.edge_split)})
        return summary if ctx.is_main else None
    except RuntimeError as exc:  # set-up's collectives (groups, caches, DDP) fail as _fit's do: one line
        if ctx.enabled and caused_by_another_rank(exc):
            raise describe_failure(exc, ctx) from None
        raise
    finally:
        shutdown(ctx)


def _train_partitioned(settings: TrainSettings, ctx: DistContext) -> dict | None:
    """A run on a partitioned folder: the parts built by :mod:`sparsetrain.engine.partitioned`, this module's
    Trainer."""
    run, loader, model, evaluate, task = partitioned_parts(settings, ctx, _node_model)
    config = config_of(settings)
    summary = _fit(_trainer(run, ctx, model, loader, evaluate, task, config), ctx)
    summary.update({"model": run.model.name, "dataset": str(settings.data.path), "world_size": ctx.world_size,
                    "config": config})
    return summary if ctx.is_main else None


# ---------------------------------------------------------------- feature stores


def feature_stores(ds, features: FeatureSettings, ctx: DistContext):
    """One feature store per node type with features, placed as ``features.placement`` says (the plan resolved
    ``auto``): memory-mapped (ranks share the page cache), read from disk with O_DIRECT (files larger than memory), in
    host memory, in GPU memory, pinned host memory read zero-copy by the GPU, or (homogeneous) sharded across ranks;
    behind a cache when ``cache_gb`` asks (split by the types' feature bytes). A dict by node type (a homogeneous
    dataset's one type ``_N``), what the loader takes."""
    if features.placement == "sharded":
        # a group of its own (with the library's timeout): the loader thread's collectives never interleave with DDP's
        group = new_group() if ctx.enabled else None
        return {NODE: ShardedFeatures.from_table(ds.features_by_type[NODE], group=group, device=ctx.device)}
    budgets = cache_budgets(ds.features_by_type, features.cache_gb)
    stores = {}
    for node_type, table in ds.features_by_type.items():
        store = _placed(ds, node_type, table, features.placement, ctx.device)
        if features.cache_gb > 0:
            hotness = _cache_hotness(ds.graph, node_type) if features.cache_policy in ("static", "hybrid") else None
            store = CachedFeatures(store, budgets[node_type], policy=features.cache_policy, device=ctx.device,
                                   hotness=hotness)
        stores[node_type] = store
    return stores


def _placed(ds, node_type: str, table, placement: str, device: torch.device):
    """One feature table where ``placement`` puts it."""
    if placement == "memory":
        return TensorFeatures(table.clone())
    if placement == "device":
        return TensorFeatures(table.to(device))
    if placement == "pinned":
        return PinnedFeatures(table.numpy(), device=device, copy=True)
    if placement == "disk":
        return ds.feature_store(node_type, mode="direct")
    return ds.feature_store(node_type)  # mmap: a store of its own (its own read statistics), checked against meta.json


def _cache_hotness(graph: CSCGraph, node_type: str = NODE) -> np.ndarray:
    """The cache's hot set ranking: each ``node_type`` row's out-degree, how many in-neighbor lists can draw it (over
    every edge type whose source is ``node_type``). On the papers100M-scale graph it beat counts of 8 pre-sampled
    batches (which see 4% of the rows) by 15-37 points of hit rate at 2-8 GiB (benchmarks/RESULTS.md)."""
    layout = graph.type_layout
    num_rows = layout.num_nodes[node_type]
    degrees = None
    for et in layout.edge_types:
        if et[0] != node_type:
            continue
        edges = graph.relation(et)  # a homogeneous graph's one edge type: the graph itself
        counts = (edges.out_degrees() if et[2] == node_type  # as many columns as sources: the Numba count
                  else torch.bincount(edges.indices.long(), minlength=num_rows))
        degrees = counts if degrees is None else degrees + counts
    return (torch.zeros(num_rows, dtype=torch.int64) if degrees is None else degrees).numpy()


# ---------------------------------------------------------------- node classification


def _node_parts(ds, meta: DatasetMeta, run: RunPlan, features, ctx: DistContext):
    """``(loader, model, evaluate)`` of a node classification run on ``run.target_type``'s nodes."""
    seed, target = run.run.seed, run.target_type
    labels = ds.labels_by_type[target]
    split = _random_split(meta.num_nodes[target], seed) if run.random_split else ds.split
    graph = ds.graph.to(run.device) if run.graph_on_device else ds.graph
    host_labels = labels
    if run.graph_on_device:
        labels = labels.to(run.device)  # indexed by GPU-sampled seeds
    clusters = _clusters(ds) if run.clusters else None
    times = {} if run.times is None else {run.times: getattr(ds, run.times)}  # the plan chose edge or node times
    sampler = _sampler(graph, run.sampling, times, ds.node_time, seed, target, clusters,
                       fuse_last_hop=run.sampling.fuse_last_hop)
    loader = Loader(sampler, features, labels, split["train"], batch_size=run.sampling.batch_size, device=run.device,
                    seed=seed, rank=ctx.rank, world_size=ctx.world_size)
    network = _node_model(meta, run.model, run.sampling.fanouts.num_hops, target)
    eval_split = {k: v for k, v in split.items() if k != "train"}
    if not eval_split:
        return loader, network, None
    if run.full_eval:
        evaluate = full_graph_evaluator(features[target], host_labels, ds.graph, eval_split, device=run.device,
                                        memory_budget=LAYER_TABLE_BUDGET)
    else:
        eval_sampler = _sampler(graph, run.sampling, times, ds.node_time, seed + 1, target, clusters)
        evaluate = sampled_evaluator(eval_sampler, features, labels, eval_split, batch_size=run.sampling.batch_size,
                                     device=run.device)
    return loader, network, evaluate


def _random_split(num_nodes: int, seed: int) -> dict[str, torch.Tensor]:
    """A 60/20/20 split of ``num_nodes`` nodes drawn from ``seed`` (a typed dataset's node type without a split)."""
    # a negative seed is a valid run seed; numpy's generators take its 64-bit pattern
    perm = torch.from_numpy(np.random.default_rng(seed % 2**64).permutation(num_nodes))
    a, b = (int(f * len(perm)) for f in RANDOM_SPLIT)
    return {"train": perm[:a].sort().values, "val": perm[a:b].sort().values, "test": perm[b:].sort().values}


def _sampler(graph, sampling: SamplingSettings, times: dict, node_time, seed: int, target: str,
             clusters: torch.Tensor | None, fuse_last_hop: bool = False):
    """The run's ``NeighborSampler`` of ``target`` seeds (temporal with ``times``, ``{"edge_time": ...}`` or
    ``{"node_time": ...}``: no neighbor later than its seed's time, a seed's time being its ``node_time``); the graph
    transformer's batches carry cluster ids; training batches leave their last hop to the fetch stage with
    ``fuse_last_hop``."""
    strategy = {"temporal_strategy": sampling.temporal_strategy} if times else {}
    sampler = NeighborSampler(graph, sampling.fanouts, seed=seed, seed_type=target, fuse_last_hop=fuse_last_hop,
                              **times, **strategy)
    if "edge_time" in times:
        sampler = SeedNodeTimes(sampler, node_time)
    return sampler if clusters is None else ClusterSampler(sampler, clusters)


def _clusters(ds) -> torch.Tensor | None:
    """The graph transformer's cluster per node: the dataset's clusters.npy; else, up to ``ONLINE_CLUSTER_MAX_NODES``
    nodes, a partition made now like ``--reorder cluster``'s (METIS when installed, else BFS; Cora: +0.8 points of test
    accuracy over none); else None (each sampled subgraph is one cluster)."""
    clusters = load_clusters(ds)
    if clusters is not None or ds.num_nodes > ONLINE_CLUSTER_MAX_NODES:
        return clusters
    order, ordered, _ = cluster_order(RawCSC(ds.graph.indptr.numpy(), ds.graph.indices.numpy(), None))
    clusters = torch.empty(ds.num_nodes, dtype=torch.int64)
    clusters[torch.from_numpy(order)] = torch.from_numpy(ordered)
    return clusters


def _node_model(meta: DatasetMeta, model: ModelSettings, layers: int, target: str):
    """The model ``model.name`` names (checked against the graph by the plan), classifying ``target`` nodes."""
    num_classes = meta.num_classes[target]
    if model.name == "rgcn":
        return RGCN(meta.node_types, meta.edge_types, meta.num_features, model.hidden, num_classes, layers, target,
                    num_nodes=meta.num_nodes, dropout=model.dropout)
    if model.name == "rgat":
        return RGAT(meta.node_types, meta.edge_types, meta.num_features, model.hidden, num_classes, layers, target,
                    num_nodes=meta.num_nodes, dropout=model.dropout, **model_options("rgat", model.heads))
    return build_model(model.name, meta.num_features[target], model.hidden, num_classes, layers, model.dropout,
                       **model_options(model.name, model.heads))


# ---------------------------------------------------------------- the loop


def _trainer(run: RunPlan, ctx: DistContext, model, loader: Loader, evaluate, task: Task, config: dict) -> Trainer:
    """The one Trainer of a run: ``model`` wrapped for the ranks, Adam, the plan's epochs, checkpoints and reports
    (``config``, the run's settings, written as ``config.json`` beside each checkpoint)."""
    model = wrap_model(model, ctx)
    captured = run.capture is not None  # the plan's: a CUDA graph replays the optimizer step
    optimizer = torch.optim.Adam(model.parameters(), lr=run.optim.lr, weight_decay=run.optim.weight_decay,
                                 capturable=captured)
    static = None
    if run.step_shapes is not None:
        static = StaticStep(model, optimizer, run.step_shapes, loader.features.shape[1], device=run.device,
                            precision=run.run.precision, dtype=loader.features.dtype,
                            mode="graph" if captured else "eager")
        if run.capture == "sampling+step":  # batches sampled into the step's buffers, that sampling captured too
            loader = sampled_loader(loader, static, capture=True)
    return Trainer(model, loader, optimizer, epochs=run.optim.epochs, max_steps=run.optim.max_steps,
                   evaluate=evaluate, task=task, checkpoints=run.checkpoint, report=run.report,
                   precision=run.run.precision, record=run.record, hyperparameters={"dropout": run.model.dropout},
                   is_main=ctx.is_main, static_step=static, patience=run.optim.patience, config=config)


def _fit(trainer: Trainer, ctx: DistContext) -> dict:
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
