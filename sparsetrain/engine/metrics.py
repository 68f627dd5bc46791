"""Link-prediction metrics, computed as ``ogb.linkproppred.Evaluator`` defines them (``tests/test_link_metrics.py``
compares).

* :func:`roc_auc`: the area under the ROC curve of positives against negatives (ties count half), as
  ``sklearn.metrics.roc_auc_score`` on ``[1]*P + [0]*N`` (ogb's ``rocauc``).
* :func:`hits_at_k`, two definitions picked by the shape of ``neg``:
  per-positive (``neg`` [P, N], one row of negatives per positive; ogbl-citation2's ``hits@K``): the fraction
  of positives whose rank among their own negatives is at most K; shared pool (``neg`` 1-D; ogbl-collab's
  ``hits@K``): the fraction of positives scored above the K-th best negative of the whole pool (1.0 when there
  are fewer than K negatives). The pool bar is much higher: with 100 negatives per positive pooled over 1,000
  positives, a positive must beat the 10th best of 100,000 negatives for hits@10.
* :func:`mrr`: the mean reciprocal rank of each positive among its own negatives ``[P, N]`` (ogb's ``mrr``).

A rank is 1 + the number of negatives scored above the positive, a tie counting half (the mean of the
optimistic and pessimistic rank), as ogb's ``_eval_mrr``.
"""

from __future__ import annotations

import torch

from sparsetrain.errors import InputError


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
    """Hits@``k``: per positive against its own row when ``neg`` is [P, N]; against a shared pool when it is 1-D."""
    if neg.dim() == 2:
        return float((ranks(pos, neg) <= k).double().mean())
    pos, neg = pos.detach().reshape(-1), neg.detach().reshape(-1)
    if neg.numel() < k:
        return 1.0
    kth = torch.topk(neg, k).values[-1]
    return float((pos > kth).float().sum() / pos.numel())


def mrr(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """Mean reciprocal rank of ``pos[i]`` among ``neg[i]`` (``neg`` is ``[P, N]``)."""
    return float((1.0 / ranks(pos, neg).to(torch.float)).mean())


def ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """The rank of each ``pos[i]`` among ``neg[i]`` (``neg`` [P, N]): 1 + negatives above it, ties counting half."""
    pos = pos.detach().reshape(-1, 1)
    neg = neg.detach()
    if neg.dim() != 2 or neg.shape[0] != pos.shape[0]:
        raise InputError(f"per-positive ranking needs neg of shape [{pos.shape[0]}, N] "
                         f"(N negatives per positive); got {list(neg.shape)}")
    optimistic = (neg > pos).sum(dim=1)
    pessimistic = (neg >= pos).sum(dim=1)
    return 0.5 * (optimistic + pessimistic) + 1
