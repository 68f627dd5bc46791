"""The link-prediction task of ``sparsetrain train --task link``: edge-seed loader, model, loss and ranking evaluation.

Training: the dataset's train positives as edge seeds, one uniform negative per positive (PyG's
binary mode), the seed edges excluded from the blocks (their reverses too on a symmetric graph), and
binary cross-entropy on the decoder's logits. Evaluation: exact node embeddings by layer-wise
full-graph inference over the message-passing graph (which holds no val/test edge), then AUC,
MRR and Hits@K (:mod:`sparsetrain.engine.metrics`) on each split's fixed positives and negatives.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparsetrain.datasets.edge_split import EdgeSplit
from sparsetrain.engine.inference import full_graph_inference
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.metrics import hits_at_k, mrr, roc_auc
from sparsetrain.errors import DatasetError
from sparsetrain.nn.link import LinkPredictor, build_link_model
from sparsetrain.sampling import EdgeSeeds, LinkNeighborSampler, NeighborSampler

HITS_AT = (10, 50, 100)
SCORE_CHUNK = 1 << 20  # pairs scored at once in evaluation


def link_forward(model: LinkPredictor, mb) -> tuple[torch.Tensor, torch.Tensor]:
    """``Trainer(batch_forward=...)`` for link batches: logits of the label edges and their 0/1 labels."""
    return model(mb.x, mb.to_pyg(), mb.edge_label_index), mb.edge_label.float()


def link_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits, labels)


@torch.no_grad()
def score_pairs(model: LinkPredictor, h: torch.Tensor, pairs: torch.Tensor, device="cpu") -> torch.Tensor:
    """The decoder's logits for ``pairs`` [2, M] of node ids, given every node's embedding ``h``."""
    out = []
    for lo in range(0, pairs.shape[1], SCORE_CHUNK):
        part = pairs[:, lo : lo + SCORE_CHUNK]
        out.append(model.decoder(h[part[0]].to(device), h[part[1]].to(device)).float().cpu())
    return torch.cat(out) if out else torch.zeros(0)


def split_metrics(pos: torch.Tensor, neg: torch.Tensor, neg_per_pos: int | None, prefix: str) -> dict:
    """``<prefix>_auc``, ``_mrr`` (None without per-positive negatives) and ``_hits@K`` of one split's scores."""
    result = {f"{prefix}_auc": roc_auc(pos, neg),
              f"{prefix}_mrr": mrr(pos, neg.view(-1, neg_per_pos)) if neg_per_pos else None}
    result.update({f"{prefix}_hits@{k}": hits_at_k(pos, neg, k) for k in HITS_AT})
    return result


def link_evaluator(features, graph, edge_split: dict[str, EdgeSplit], device="cpu"):
    """``evaluate(model) -> {val_auc, val_mrr, val_hits@K, test_...}`` from exact full-graph embeddings."""
    evaluated = {name: split for name, split in edge_split.items() if name != "train" and split.neg is not None}

    def evaluate(model: LinkPredictor) -> dict:
        was_training = model.training
        h = full_graph_inference(model.encoder, features, graph, device=device)
        model.eval()
        result = {}
        for name, split in evaluated.items():
            result.update(split_metrics(score_pairs(model, h, split.pos, device), score_pairs(model, h, split.neg, device),
                                        split.neg_per_pos, name))
        model.train(was_training)
        return result

    return evaluate


def link_parts(ds, settings, ctx, features, graph):
    """What ``train`` needs for the link task: ``(loader, model, evaluate)``."""
    if "train" not in ds.edge_split:
        raise DatasetError(f"{ds.path}: --task link needs link splits; re-import with `sparsetrain preprocess ... --link-split 0.85,0.05,0.10`")
    if ds.features is None:
        raise DatasetError(f"{ds.path}: --task link needs node features; re-import with --features")
    exclude = settings.exclude if settings.exclude != "auto" else ("self" if ds.directed else "reverse")
    sampler = LinkNeighborSampler(NeighborSampler(graph, settings.fanout, seed=settings.seed), neg_sampling="binary", exclude=exclude)
    seeds = EdgeSeeds.from_edge_index(ds.edge_split["train"].pos)
    loader = Loader(sampler, features, None, seeds, batch_size=settings.batch_size, device=ctx.device, seed=settings.seed,
                    rank=ctx.rank, world_size=ctx.world_size)
    model = build_link_model(ds.num_features, settings.hidden, len(settings.fanout), settings.decoder, settings.dropout)
    return loader, model, link_evaluator(features, ds.graph, ds.edge_split, device=ctx.device)
