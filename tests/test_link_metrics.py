"""Link metrics equal ogb.linkproppred.Evaluator's on random inputs (ties included)."""

import numpy as np
import pytest
import torch

from sparsetrain.engine.metrics import hits_at_k, mrr, roc_auc
from sparsetrain.errors import InputError

# the reference; the dev extra installs it (a machine without it, e.g. a lent GPU's image, skips this file)
Evaluator = pytest.importorskip("ogb.linkproppred").Evaluator


@pytest.mark.parametrize("seed", range(4))
def test_metrics_equal_ogb(seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.randn(300, generator=g) + 0.5
    neg = torch.randn(300, 40, generator=g)
    if seed % 2:  # coarse scores: many ties
        pos, neg = (pos * 2).round() / 2, (neg * 2).round() / 2
    vessel = Evaluator("ogbl-vessel")  # rocauc
    assert roc_auc(pos, neg.reshape(-1)) == pytest.approx(
        vessel.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})["rocauc"], abs=1e-12
    )
    collab = Evaluator("ogbl-collab")
    for k in (10, 50, 100, 20000):
        collab.K = k
        ref = collab.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})[f"hits@{k}"]
        assert hits_at_k(pos, neg.reshape(-1), k) == pytest.approx(ref, abs=1e-7)
    citation2 = Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})
    assert mrr(pos, neg) == pytest.approx(citation2["mrr_list"].mean().item(), abs=1e-6)
    for k in (1, 3, 10):  # 2-D neg: per-positive hits@K, ogbl-citation2's
        assert hits_at_k(pos, neg, k) == pytest.approx(citation2[f"hits@{k}_list"].mean().item(), abs=1e-7)


@pytest.mark.parametrize("seed", range(3))
def test_per_positive_hits_equal_a_numpy_count_for_any_k(seed):
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 6, 200).astype(np.float32)  # small integers: ties everywhere
    neg = rng.integers(0, 6, (200, 25)).astype(np.float32)
    for k in (1, 2, 5, 13, 25, 26):
        rank = np.array([1 + (n > p).sum() + 0.5 * (n == p).sum() for p, n in zip(pos, neg)])
        expected = (rank <= k).mean()
        assert hits_at_k(torch.from_numpy(pos), torch.from_numpy(neg), k) == pytest.approx(expected, abs=1e-12)


def test_per_positive_and_shared_pool_hits_differ_where_ogb_s_do():
    # each positive beats its own 99 negatives but not the best negatives of the other rows
    pos = torch.arange(1.0, 51.0)
    neg = pos[:, None] - 1 - torch.rand(50, 99)
    assert hits_at_k(pos, neg, 10) == 1.0
    pool = Evaluator("ogbl-collab")
    pool.K = 10
    shared = pool.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})["hits@10"]
    assert hits_at_k(pos, neg.reshape(-1), 10) == pytest.approx(shared, abs=1e-7) and shared < 0.25


def test_ranking_names_the_shape_it_needs():
    with pytest.raises(InputError, match=r"neg of shape \[4, N\].*got \[3, 2\]"):
        hits_at_k(torch.zeros(4), torch.zeros(3, 2), 1)


def test_auc_extremes():
    assert roc_auc(torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0])) == 1.0
    assert roc_auc(torch.tensor([1.0]), torch.tensor([1.0])) == 0.5
