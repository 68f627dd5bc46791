"""Link metrics equal ogb.linkproppred.Evaluator's on random inputs (ties included)."""

import pytest
import torch
from ogb.linkproppred import Evaluator

from sparsetrain.engine.metrics import hits_at_k, mrr, roc_auc


@pytest.mark.parametrize("seed", range(4))
def test_metrics_equal_ogb(seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.randn(300, generator=g) + 0.5
    neg = torch.randn(300, 40, generator=g)
    if seed % 2:  # coarse scores: many ties
        pos, neg = (pos * 2).round() / 2, (neg * 2).round() / 2
    vessel = Evaluator("ogbl-vessel")  # rocauc
    assert roc_auc(pos, neg.reshape(-1)) == pytest.approx(vessel.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})["rocauc"], abs=1e-12)
    collab = Evaluator("ogbl-collab")
    for k in (10, 50, 100, 20000):
        collab.K = k
        ref = collab.eval({"y_pred_pos": pos, "y_pred_neg": neg.reshape(-1)})[f"hits@{k}"]
        assert hits_at_k(pos, neg.reshape(-1), k) == pytest.approx(ref, abs=1e-7)
    ref = Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})["mrr_list"].mean().item()
    assert mrr(pos, neg) == pytest.approx(ref, abs=1e-6)


def test_auc_extremes():
    assert roc_auc(torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0])) == 1.0
    assert roc_auc(torch.tensor([1.0]), torch.tensor([1.0])) == 0.5
