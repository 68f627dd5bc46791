"""One training run on a typed dataset: what ``sparsetrain train`` runs when ``--data`` is heterogeneous.

The same stages as the homogeneous run (seed batches -> typed sample -> fetch one store per node type -> device),
an :class:`~sparsetrain.nn.RGCN` over every edge type, trained on the target node type's labels.
"""

from __future__ import annotations

import numpy as np
import torch

from sparsetrain.engine.evaluate import sampled_evaluator
from sparsetrain.engine.loader import Loader
from sparsetrain.errors import DatasetError

TYPED_MODELS = ("rgcn",)


def _target(ds, settings) -> tuple[str, torch.Tensor, dict[str, torch.Tensor]]:
    """The node type to train on, its labels and its split (a random 60/20/20 one for a type the dataset has no split for)."""
    target = settings.target_type or ds.target_type
    if target is None:
        raise DatasetError(f"{ds.path}: the dataset names no target node type; pass --target-type (one of {', '.join(ds.node_types)})")
    if target not in ds.num_nodes:
        raise DatasetError(f"--target-type {target}: {ds.path} has no such node type; choose one of {', '.join(ds.node_types)}")
    if target not in ds.labels:
        labelled = ", ".join(ds.labels) or "none"
        raise DatasetError(f"{ds.path}: node type {target!r} has no labels to train on (labelled types: {labelled}); pass another --target-type")
    if target == ds.target_type and "train" in ds.split:
        return target, ds.labels[target], ds.split
    perm = torch.from_numpy(np.random.default_rng(settings.seed).permutation(ds.num_nodes[target]))
    a, b = int(0.6 * len(perm)), int(0.8 * len(perm))
    return target, ds.labels[target], {"train": perm[:a].sort().values, "val": perm[a:b].sort().values, "test": perm[b:].sort().values}


def typed_features(ds, settings, device: torch.device) -> dict:
    """One store per node type with features (``--features``: mmap or memory), each behind its own cache when ``--cache-gb``
    asks (the budget split by the types' feature bytes)."""
    from sparsetrain.storage import CachedFeatures, TensorFeatures

    if settings.features not in ("auto", "mmap", "memory"):
        raise DatasetError(f"--features {settings.features}: a typed dataset supports auto, mmap or memory")
    stores = {t: (TensorFeatures(f.clone()) if settings.features == "memory" else f) for t, f in ds.features.items()}
    if settings.cache_gb > 0:
        total = sum(f.nbytes for f in ds.features.values())
        stores = {t: CachedFeatures(s, max(int(settings.cache_gb * 2**30 * ds.features[t].nbytes / total), ds.features[t].row_bytes),
                                    policy="hybrid", device=device) for t, s in stores.items()}
    return stores


def typed_parts(ds, settings, ctx):
    """``(loader, model, evaluate)`` of a typed run."""
    from sparsetrain.nn.rgcn import RGCN
    from sparsetrain.sampling.hetero import HeteroNeighborSampler

    if settings.model not in ("sage", *TYPED_MODELS):
        raise DatasetError(f"--model {settings.model}: a typed dataset trains {' or '.join(TYPED_MODELS)}; drop --model or pass --model rgcn")
    target, labels, split = _target(ds, settings)
    if ds.num_classes is None and target == ds.target_type:
        raise DatasetError(f"{ds.path}: node type {target!r} has labels but no class count; re-import the dataset")
    num_classes = ds.num_classes_of(target)
    features = typed_features(ds, settings, ctx.device)
    sampler = HeteroNeighborSampler(ds.graph, settings.fanout, seed_type=target, seed=settings.seed)
    loader = Loader(sampler, features, labels, split["train"], batch_size=settings.batch_size, device=ctx.device,
                    seed=settings.seed, rank=ctx.rank, world_size=ctx.world_size)
    model = RGCN(ds.node_types, ds.edge_types, ds.num_features, settings.hidden, num_classes,
                 len(settings.fanout), target, num_nodes=ds.num_nodes, dropout=settings.dropout)
    eval_split = {k: v for k, v in split.items() if k != "train"}
    eval_sampler = HeteroNeighborSampler(ds.graph, settings.fanout, seed_type=target, seed=settings.seed + 1)
    evaluate = sampled_evaluator(eval_sampler, features, labels, eval_split, batch_size=settings.batch_size, device=ctx.device) if eval_split else None
    return loader, model, evaluate
