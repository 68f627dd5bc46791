"""R-GAT (MLPerf's GNN) on the IGBH-shaped synthetic graph: ``train --model rgat`` with typed sampling, and the PyG
user's version (``HeteroConv`` of ``GATConv`` over ``sparsetrain.pyg.NeighborLoader`` on a ``HeteroData``), to the
same accuracy band."""

import json

import pytest
import torch
import torch.nn.functional as F

import sparsetrain as st
from sparsetrain.datasets import synthesize

EPOCHS, BATCH, FANOUT, HIDDEN, LR = 8, 64, [10, 5], 64, 0.01
ARGS = ["--model", "rgat", "--epochs", EPOCHS, "--batch-size", BATCH, "--fanout", ",".join(map(str, FANOUT)),
        "--hidden", HIDDEN, "--lr", LR, "--dropout", "0.2", "--seed", "0", "--quiet"]
CHANCE = 1 / 19


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    folder = tmp_path_factory.mktemp("igbh") / "g"
    return synthesize(folder, preset="igbh-tiny", scale=0.01, feature_dim=32, seed=0, quiet=True).path


@pytest.fixture(scope="module")
def trained(igbh, tmp_path_factory) -> dict:
    """The summary of ``train --model rgat`` on the graph (shared by the comparisons)."""
    from sparsetrain.cli import main

    summary = tmp_path_factory.mktemp("rgat") / "s.json"
    assert main([str(a) for a in ("train", "--data", igbh, *ARGS, "--summary-json", summary)]) == 0
    return json.loads(summary.read_text())


@pytest.mark.slow
def test_train_rgat_well_above_chance(trained):
    assert trained["model"] == "rgat" and trained["test_acc"] > 10 * CHANCE  # chance: 1/19


def hetero_data(ds):
    """The dataset as a PyG user holds it: a ``HeteroData`` with each edge type's ``edge_index`` (src, dst)."""
    from torch_geometric.data import HeteroData

    data = HeteroData()
    for t, x in ds.features.items():
        data[t].x = x.tensor()  # the stored rows, as a PyG user loads them into memory
        data[t].num_nodes = ds.num_nodes[t]
    data["paper"].y = ds.labels["paper"]
    for et in ds.edge_types:
        csc = ds.graph.edges[et]
        dst = torch.repeat_interleave(torch.arange(csc.num_nodes), csc.in_degrees())
        data[et].edge_index = torch.stack([csc.indices.long(), dst])
    return data


class UserRGAT(torch.nn.Module):
    """R-GAT as MLPerf's reference writes it with PyG (``HeteroConv`` of ``GATConv`` over the whole sampled subgraph,
    leaky ReLU and dropout between layers, a linear head)."""

    def __init__(self, edge_types, hidden, classes, layers, heads=4, dropout=0.2):
        super().__init__()
        from torch_geometric.nn import GATConv, HeteroConv

        self.convs = torch.nn.ModuleList(
            HeteroConv({et: GATConv((-1, -1), hidden // heads, heads=heads, add_self_loops=False) for et in edge_types})
            for _ in range(layers))
        self.dropout = torch.nn.Dropout(dropout)
        self.lin = torch.nn.Linear(hidden, classes)

    def forward(self, x_dict, edge_index_dict):
        for i, conv in enumerate(self.convs):
            x_dict = conv(x_dict, edge_index_dict)
            if i != len(self.convs) - 1:
                x_dict = {k: self.dropout(F.leaky_relu(v)) for k, v in x_dict.items()}
        return self.lin(x_dict["paper"])


def user_accuracy(ds, loader_class, epochs=EPOCHS, seed=0) -> float:
    """Train the PyG user's R-GAT with ``loader_class`` (sparsetrain's or PyG's ``NeighborLoader``); test accuracy."""
    torch.manual_seed(seed)
    data = hetero_data(ds)
    kwargs = {"num_neighbors": FANOUT, "batch_size": BATCH}
    train = loader_class(data, input_nodes=("paper", ds.split["train"]), shuffle=True, **kwargs)
    test = loader_class(data, input_nodes=("paper", ds.split["test"]), **kwargs)
    model = UserRGAT(data.edge_types, HIDDEN, 19, len(FANOUT))
    with torch.no_grad():  # the lazy layers take their widths from a batch
        batch = next(iter(train))
        model(batch.x_dict, batch.edge_index_dict)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    for _ in range(epochs):
        model.train()
        for batch in train:
            optimizer.zero_grad()
            size = batch["paper"].batch_size
            loss = F.cross_entropy(model(batch.x_dict, batch.edge_index_dict)[:size], batch["paper"].y[:size])
            loss.backward()
            optimizer.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in test:
            size = batch["paper"].batch_size
            pred = model(batch.x_dict, batch.edge_index_dict)[:size].argmax(-1)
            correct += int((pred == batch["paper"].y[:size]).sum())
            total += size
    return correct / total


@pytest.mark.slow
def test_pyg_users_rgat_over_sparsetrains_loader_trains_to_the_same_band(igbh, trained):
    from sparsetrain.pyg import NeighborLoader

    acc = user_accuracy(st.datasets.load(igbh), NeighborLoader)
    assert acc > 10 * CHANCE and abs(acc - trained["test_acc"]) < 0.1, (acc, trained["test_acc"])


def test_rgat_layer_matches_pygs_heteroconv_on_a_full_graph():
    """One R-GAT layer over a block that is the whole graph equals PyG's HeteroConv of the same GATConvs."""
    from torch_geometric.nn import GATConv, HeteroConv

    from sparsetrain.nn import RGAT

    torch.manual_seed(0)
    n = {"a": 5, "b": 4}
    ets = [("a", "r", "b"), ("b", "s", "b"), ("b", "t", "a")]
    x = {"a": torch.randn(5, 3), "b": torch.randn(4, 6)}
    edges = {("a", "r", "b"): torch.tensor([[0, 1, 4, 2], [0, 0, 3, 1]]),
             ("b", "s", "b"): torch.tensor([[0, 1], [1, 2]]), ("b", "t", "a"): torch.tensor([[3, 2, 0], [0, 4, 4]])}
    model = RGAT(list(n), ets, {"a": 3, "b": 6}, 8, 2, 1, "b", heads=4).eval()
    ref = HeteroConv({et: GATConv((3 if et[0] == "a" else 6, 3 if et[2] == "a" else 6), 2, heads=4,
                                  add_self_loops=False) for et in ets if et[2] == "b"}, aggr="sum")
    ref.load_state_dict(model.convs[0].state_dict())  # one layer for target b: the relations into b
    expected = model.out(ref(x, {et: e for et, e in edges.items() if et[2] == "b"})["b"])
    got = model(x, [(edges, (n, n))])
    assert torch.allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize(("flags", "message"), [
    (["--step", "static"], "--step static pads GraphSAGE"),
    (["--hidden", "30"], "multiple of 4"),
    (["--hidden", "64", "--heads", "3"], "multiple of 3"),
])
def test_what_rgat_cannot_do_is_refused_in_one_line(cli, igbh, flags, message):
    code, _, err = cli("train", "--data", igbh, *ARGS[:2], "--epochs", "1", *flags, "--quiet")
    assert code == 1 and message in err and "\n" not in err.strip()


def test_heads_is_planned_into_the_model_and_refused_where_there_are_none(igbh):
    """``--heads``: R-GAT's default is MLPerf's 4; a value given reaches every relation's ``GATConv`` (GAT's hidden
    layers likewise); a model without attention refuses it in one line."""
    from torch_geometric.nn import GATConv

    from sparsetrain.engine.dataset_meta import DatasetMeta
    from sparsetrain.engine.plan import plan
    from sparsetrain.engine.run import _node_model
    from sparsetrain.engine.settings import ModelSettings, TrainSettings
    from sparsetrain.errors import SettingError
    from sparsetrain.nn.models import build_model

    meta, cpu = DatasetMeta.of(st.datasets.load(igbh)), torch.device("cpu")
    assert plan(TrainSettings(model=ModelSettings("rgat")), meta, cpu).model.heads == 4
    run = plan(TrainSettings(model=ModelSettings("rgat", hidden=12, heads=2)), meta, cpu)
    model = _node_model(meta, run.model, 2, "paper")
    convs = [m for m in model.modules() if isinstance(m, GATConv)]
    assert convs and {(c.heads, c.out_channels) for c in convs} == {(2, 6)}
    assert plan(TrainSettings(model=ModelSettings("rgcn")), meta, cpu).model.heads is None
    with pytest.raises(SettingError, match="--model rgcn has no attention heads"):
        plan(TrainSettings(model=ModelSettings("rgcn", heads=2)), meta, cpu)
    gat = build_model("gat", 8, 12, 3, 2, heads=3)
    assert [(c.heads, c.out_channels) for c in gat.convs] == [(3, 4), (1, 3)]


def test_rgat_on_a_homogeneous_dataset_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETRAIN_CACHE", str(tmp_path / "cache"))
    code, _, err = cli("train", "--data", "cora", "--model", "rgat", "--quiet")
    assert code == 1 and "--model rgat" in err and "homogeneous" in err and "\n" not in err.strip()


@pytest.mark.slow  # two fresh interpreters importing PyG
def test_rgat_dropout_draws_do_not_depend_on_string_hashing(tmp_path):
    """Two processes with different ``PYTHONHASHSEED`` give the same training-mode output for the same seed."""
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import torch\nfrom sparsetrain.nn import RGAT\n"
        "torch.manual_seed(0)\n"
        "ets = [('a', 'r', 'b'), ('b', 's', 'a'), ('c', 'u', 'b'), ('b', 'v', 'c')]\n"
        "n = {'a': 6, 'b': 5, 'c': 4}\n"
        "x = {t: torch.randn(k, 3) for t, k in n.items()}\n"
        "e = {et: torch.stack([torch.randint(0, n[et[0]], (8,)), torch.randint(0, n[et[2]], (8,))]) for et in ets}\n"
        "model = RGAT(list(n), ets, {t: 3 for t in n}, 8, 2, 2, 'b', dropout=0.5).train()\n"
        "print(model(x, [(e, (n, n)), (e, (n, n))]).sum().item())\n")
    outs = {subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout for seed in (1, 2)}
    assert len(outs) == 1, outs
