"""``sparsetrain train --task link``: metrics in the summary, checkpoint and resume, bad input, Cora accuracy."""

import json

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import stochastic_blockmodel_graph

import sparsetrain as st

LINK_KEYS = ("val_auc", "test_auc", "test_mrr",
             "test_hits@1_per_positive", "test_hits@3_per_positive", "test_hits@10_per_positive")


@pytest.fixture(scope="module")
def communities(tmp_path_factory):
    """A 4-community graph whose features hint at the community: links are predictable."""
    torch.manual_seed(0)
    sizes = [60, 60, 60, 60]
    probs = torch.full((4, 4), 0.005) + torch.eye(4) * 0.08
    ei = stochastic_blockmodel_graph(sizes, probs)
    block = torch.arange(4).repeat_interleave(60)
    x = torch.nn.functional.one_hot(block, 4).float() + 0.5 * torch.rand(240, 4)
    out = tmp_path_factory.mktemp("link") / "sbm"
    st.datasets.from_pyg(
        Data(edge_index=ei, x=x, num_nodes=240), out, link_split=(0.8, 0.1, 0.1), link_negatives=20, quiet=True
    )
    return out


def _summary(cli, data, tmp_path, name, *extra):
    path = tmp_path / f"{name}.json"
    code, out, err = cli(
        "train", "--task", "link", "--data", data, "--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--quiet",
        "--summary-json", path, *extra,
    )
    assert code == 0, err
    return json.loads(path.read_text()), out


def test_link_task_writes_its_metrics(cli, communities, tmp_path):
    summary, out = _summary(cli, communities, tmp_path, "a", "--epochs", "8")
    assert all(isinstance(summary[k], float) for k in LINK_KEYS), summary
    assert summary["test_auc"] > 0.75 and 0 < summary["test_mrr"] <= 1
    assert summary["negatives_per_positive"] == {"val": 20, "test": 20}
    # per-positive hits bound the MRR: hits@1 <= MRR <= hits@10 + (1 - hits@10) / 10.5 (a rank over 10 is at least 10.5)
    h1, h10 = summary["test_hits@1_per_positive"], summary["test_hits@10_per_positive"]
    assert h1 <= summary["test_mrr"] <= h10 + (1 - h10) / 10.5 and h10 > 0.3
    assert "test AUC" in out and "hits@10 " in out and "among its own 20 negatives" in out


def test_split_metrics_follow_the_split_s_negatives():
    from sparsetrain.engine.link_task import split_metrics
    from sparsetrain.engine.metrics import hits_at_k, mrr

    g = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(40, generator=g) + 1, torch.randn(40 * 5, generator=g)
    per = split_metrics(pos, neg, 5, "test")
    assert set(per) == {"test_auc", "test_mrr", "test_hits@1_per_positive", "test_hits@3_per_positive"}  # K <= 5
    rows = neg.view(40, 5)
    assert per["test_hits@3_per_positive"] == hits_at_k(pos, rows, 3) and per["test_mrr"] == mrr(pos, rows)
    pool = split_metrics(pos, neg, None, "val")
    assert pool["val_mrr"] is None and pool["val_hits@50_shared_pool"] == hits_at_k(pos, neg, 50)
    assert {"val_hits@10_shared_pool", "val_hits@100_shared_pool"} < set(pool)


def test_link_task_checkpoint_and_resume_equal_the_uninterrupted_run(cli, communities, tmp_path):
    full, _ = _summary(cli, communities, tmp_path, "full", "--epochs", "4", "--decoder", "mlp")
    ckpt = tmp_path / "ckpt"
    _summary(cli, communities, tmp_path, "half", "--epochs", "2", "--decoder", "mlp", "--checkpoint-dir", ckpt)
    resumed, _ = _summary(
        cli, communities, tmp_path, "resumed", "--epochs", "4", "--decoder", "mlp", "--checkpoint-dir", ckpt, "--resume"
    )
    assert all(resumed[k] == full[k] for k in LINK_KEYS) and resumed["steps"] == full["steps"]
    code, out, err = cli(
        "train", "--task", "link", "--data", communities, "--fanout", "5,5", "--epochs", "4", "--decoder", "dot",
        "--hidden", "16", "--batch-size", "64", "--checkpoint-dir", ckpt, "--resume", "--quiet",
    )
    assert code == 1 and "checkpoint" in err.lower() and len(err.strip().splitlines()) == 1  # another run's checkpoint


def test_link_task_needs_a_link_split(cli, tmp_path):
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    st.datasets.from_pyg(Data(edge_index=ei, x=torch.ones(3, 2), num_nodes=3), tmp_path / "plain", quiet=True)
    code, out, err = cli("train", "--task", "link", "--data", tmp_path / "plain", "--quiet")
    assert code == 1 and "--link-split" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cora_link_prediction_auc(cli, tmp_path, monkeypatch):
    """GraphSAGE + dot decoder on Cora (public Planetoid files, --link-split 0.85,0.05,0.10), default settings, 3
    seeds."""
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    aucs = []
    for seed in range(3):
        path = tmp_path / f"s{seed}.json"
        code, out, err = cli(
            "train", "--task", "link", "--data", "cora", "--seed", seed, "--quiet", "--summary-json", path
        )
        assert code == 0, err
        aucs.append(json.loads(path.read_text())["test_auc"])
    assert sum(aucs) / 3 >= 0.90, aucs
