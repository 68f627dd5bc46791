"""The link-prediction task of ``sparsetrain train --task link``: edge-seed loader, model, loss and ranking evaluation.

Training: the dataset's train positives as edge seeds, one uniform negative per positive (PyG's
binary mode), the seed edges excluded from the blocks (their reverses too on a symmetric graph), and
binary cross-entropy on the decoder's logits. Evaluation: exact node embeddings by layer-wise
full-graph inference over the message-passing graph (which holds no val/test edge), then AUC,
MRR and Hits@K (:mod:`sparsetrain.engine.metrics`) on each split's fixed positives and negatives.
Hits@K follows the split's negatives and its key says which: negatives per positive (a random split,
ogbl-citation2) give ``<split>_hits@K_per_positive`` (rank among its own negatives <= K, K = 1, 3, 10 as
ogbl-citation2) and MRR; a shared pool (ogbl-collab's ``edge_neg``) gives ``<split>_hits@K_shared_pool``
(above the K-th best negative of the pool, K = 10, 50, 100) and no MRR.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparsetrain.datasets.edge_split import EdgeSplit
from sparsetrain.datasets.format import NODE
from sparsetrain.engine.inference import infer_layers
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.metrics import hits_at_k, mrr, roc_auc
from sparsetrain.engine.settings import ModelSettings, SamplingSettings
from sparsetrain.engine.trainer import Task
from sparsetrain.nn.link import LinkPredictor, build_link_model
from sparsetrain.sampling import EdgeSeeds, LinkNeighborSampler, NeighborSampler

PER_POSITIVE_HITS_AT = (1, 3, 10)  # ogbl-citation2's
SHARED_POOL_HITS_AT = (10, 50, 100)  # ogbl-collab reports 50; ogbl-ddi 20, ogbl-ppa 100
SCORE_CHUNK = 1 << 20  # pairs scored at once in evaluation


def link_forward(model: LinkPredictor, mb) -> tuple[torch.Tensor, torch.Tensor]:
    """``Trainer(batch_forward=...)`` for link batches: logits of the label edges and their 0/1 labels."""
    return model(mb.x, mb.to_pyg(), mb.edge_label_index), mb.edge_label.float()


def link_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits, labels)


LINK_TASK = Task(loss_fn=link_loss, batch_forward=link_forward, select_metric="val_auc")
"""``Trainer(task=LINK_TASK)``: binary cross-entropy on the label edges' logits; the best val AUC epoch is reported."""


@torch.no_grad()
def score_pairs(model: LinkPredictor, h: torch.Tensor, pairs: torch.Tensor, device="cpu") -> torch.Tensor:
    """The decoder's logits for ``pairs`` [2, M] of node ids, given every node's embedding ``h``."""
    out = []
    for lo in range(0, pairs.shape[1], SCORE_CHUNK):
        part = pairs[:, lo : lo + SCORE_CHUNK]
        out.append(model.decoder(h[part[0]].to(device), h[part[1]].to(device)).float().cpu())
    return torch.cat(out) if out else torch.zeros(0)


def split_metrics(pos: torch.Tensor, neg: torch.Tensor, neg_per_pos: int | None, prefix: str) -> dict:
    """``<prefix>_auc``, ``_mrr`` (None for a shared pool) and ``_hits@K_per_positive`` or ``_hits@K_shared_pool``."""
    result = {f"{prefix}_auc": roc_auc(pos, neg)}
    if neg_per_pos:
        rows = neg.view(-1, neg_per_pos)
        result[f"{prefix}_mrr"] = mrr(pos, rows)
        result.update({f"{prefix}_hits@{k}_per_positive": hits_at_k(pos, rows, k)
                       for k in PER_POSITIVE_HITS_AT if k <= neg_per_pos})
    else:
        result[f"{prefix}_mrr"] = None
        result.update({f"{prefix}_hits@{k}_shared_pool": hits_at_k(pos, neg, k) for k in SHARED_POOL_HITS_AT})
    return result


def ranking_negatives(edge_split: dict[str, EdgeSplit]) -> dict[str, int | None]:
    """Per evaluated split, the negatives each positive is ranked among (None: a shared pool), for the run's summary."""
    return {name: split.neg_per_pos for name, split in edge_split.items() if name != "train" and split.neg is not None}


def link_evaluator(features, graph, edge_split: dict[str, EdgeSplit], device="cpu"):
    """``evaluate(model) -> {val_auc, val_mrr, val_hits@K_per_positive, test_...}`` from exact full-graph embeddings."""
    evaluated = {name: split for name, split in edge_split.items() if name != "train" and split.neg is not None}

    def evaluate(model: LinkPredictor) -> dict:
        was_training = model.training
        h = infer_layers(model.encoder, features, graph, 4096, torch.device(device), None, None)
        model.eval()
        result = {}
        for name, split in evaluated.items():
            result.update(split_metrics(score_pairs(model, h, split.pos, device),
                                        score_pairs(model, h, split.neg, device), split.neg_per_pos, name))
        model.train(was_training)
        return result

    return evaluate


def link_parts(ds, sampling: SamplingSettings, model: ModelSettings, seed: int, ctx, features, graph):
    """What ``train`` needs for the link task: ``(loader, model, evaluate)``; ``sampling.exclude`` resolved (the
    run's plan checked the split and the features and chose ``exclude``); ``features``: by node type, the one
    ``_N``."""
    sampler = LinkNeighborSampler(NeighborSampler(graph, sampling.fanouts, seed=seed), neg_sampling="binary",
                                  exclude=sampling.exclude)
    seeds = EdgeSeeds.from_edge_index(ds.edge_split["train"].pos)
    loader = Loader(sampler, features, None, seeds, batch_size=sampling.batch_size, device=ctx.device, seed=seed,
                    rank=ctx.rank, world_size=ctx.world_size)
    network = build_link_model(ds.num_features, model.hidden, sampling.fanouts.num_hops, model.decoder, model.dropout)
    return loader, network, link_evaluator(features[NODE], ds.graph, ds.edge_split, device=ctx.device)
