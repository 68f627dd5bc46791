"""Link-prediction metrics, computed as ``ogb.linkproppred.Evaluator`` defines them (``tests/test_link_metrics.py`` compares).

* :func:`roc_auc`: the area under the ROC curve of positives against negatives (ties count half), as
  ``sklearn.metrics.roc_auc_score`` on ``[1]*P + [0]*N`` (ogb's ``rocauc``).
* :func:`hits_at_k`: the fraction of positives scored above the K-th best negative of the shared pool
  (1.0 when there are fewer than K negatives), ogb's ``hits@K``.
* :func:`mrr`: the mean reciprocal rank of each positive among its own negatives ``[P, K]``, a tie
  counting as the mean of the optimistic and pessimistic rank (ogb's ``mrr``).
"""

from __future__ import annotations

import torch

from sparsetrain.errors import SettingError


def roc_auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC-AUC of scores ``pos`` (label 1) against ``neg`` (label 0); NaN when either is empty."""
    pos, neg = pos.detach().reshape(-1).double(), neg.detach().reshape(-1).double()
    if not pos.numel() or not neg.numel():
        return float("nan")
    scores = torch.cat([pos, neg])
    values, inverse, counts = torch.unique(scores, sorted=True, return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts  # 0-based rank of each distinct value's first occurrence
    rank = first.double() + (counts.double() + 1) / 2  # mean 1-based rank within a run of ties
    rank_sum = rank[inverse[: pos.numel()]].sum()
    p, n = pos.numel(), neg.numel()
    return float((rank_sum - p * (p + 1) / 2) / (p * n))


def hits_at_k(pos: torch.Tensor, neg: torch.Tensor, k: int) -> float:
    """Fraction of ``pos`` strictly above the ``k``-th largest of ``neg`` (a pool shared by all positives)."""
    pos, neg = pos.detach().reshape(-1), neg.detach().reshape(-1)
    if neg.numel() < k:
        return 1.0
    kth = torch.topk(neg, k).values[-1]
    return float((pos > kth).float().sum() / pos.numel())


def mrr(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """Mean reciprocal rank of ``pos[i]`` among ``neg[i]`` (``neg`` is ``[P, K]``)."""
    pos = pos.detach().reshape(-1, 1)
    neg = neg.detach()
    if neg.dim() != 2 or neg.shape[0] != pos.shape[0]:
        raise SettingError(f"mrr needs neg of shape [{pos.shape[0]}, K] (negatives per positive); got {list(neg.shape)}")
    optimistic = (neg > pos).sum(dim=1)
    pessimistic = (neg >= pos).sum(dim=1)
    rank = 0.5 * (optimistic + pessimistic) + 1
    return float((1.0 / rank.to(torch.float)).mean())
