"""The plan reads a dataset's typed-ness once: its row of ``KINDS`` (models, default model and target, random split,
GPU sampling, refusals), the same code for the one-type graph (``_N``) and a typed one."""

import re
from dataclasses import replace

import pytest
import torch

import sparsetrain as st
from sparsetrain.engine.dataset_meta import DatasetMeta
from sparsetrain.engine.plan import RANDOM_SPLIT, plan
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.errors import DatasetError, SettingError

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def homogeneous(tmp_path_factory):
    ds = st.datasets.synthesize(tmp_path_factory.mktemp("h") / "g", 300, 2400, feature_dim=8, num_classes=3, seed=0,
                                quiet=True)
    return DatasetMeta.of(ds)


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    return DatasetMeta.of(st.datasets.synthesize(tmp_path_factory.mktemp("t") / "g", typed=True, scale=0.001,
                                                 quiet=True))


def test_the_one_type_graph_trains_its_node_type_with_its_split(homogeneous):
    run = plan(TrainSettings(batch_size=32), homogeneous, CPU)
    assert run.model.name == "sage" and run.target_type == "_N" and not run.random_split
    assert run.record["target_type"] is None  # the one type has no name a user gave
    assert run.full_eval  # 300 nodes: exact layer-wise inference (a block GNN)
    train = homogeneous.split["train"]
    assert run.optim.epochs == min(200, -(-2000 // -(-train // 32)))


def test_a_typed_graph_trains_its_target_type_with_the_r_gcn(typed):
    run = plan(TrainSettings(batch_size=32), typed, CPU)
    assert run.model.name == "rgcn" and run.target_type == "paper" and not run.random_split
    assert run.record["target_type"] == "paper"
    assert not run.full_eval and not run.graph_on_device
    # the target type without the dataset's split: a random 60/20/20 one, its train share the epoch's seeds
    run = plan(TrainSettings(batch_size=32), replace(typed, split={}), CPU)
    train = int(RANDOM_SPLIT[0] * typed.num_nodes["paper"])
    assert run.random_split and run.optim.epochs == min(200, -(-2000 // -(-train // 32)))


def test_the_r_gcn_embeds_a_target_type_without_features(typed):
    run = plan(TrainSettings(), replace(typed, features={t: f for t, f in typed.features.items() if t != "paper"}), CPU)
    assert run.model.name == "rgcn" and run.target_type == "paper"


@pytest.mark.parametrize(("change", "says"), [
    ({"split": {}, "target_type": None}, "the dataset has no train split, which training needs"),
    ({"num_classes": {}}, "the dataset has no labels to train on (labelled types: none)"),
    ({"features": {}}, "the dataset has no features, which --model sage reads"),
])
def test_the_one_type_graph_needs_features_labels_and_its_own_split(homogeneous, change, says):
    with pytest.raises(DatasetError, match=re.escape(says)):
        plan(TrainSettings(), replace(homogeneous, **change), CPU)


@pytest.mark.parametrize(("settings", "error", "says"), [
    (TrainSettings(task="link"), DatasetError, "--task link:"),
    (TrainSettings(step="static"), SettingError, "--step static pads GraphSAGE"),
    (TrainSettings(fuse_last_hop=True), SettingError, "--fuse-last-hop feeds GraphSAGE's first layer"),
    (TrainSettings(features="sharded"), SettingError, "--features sharded: typed datasets are not sharded yet"),
    (TrainSettings(eval="full"), SettingError, "--eval full: typed datasets evaluate on sampled batches"),
    (TrainSettings(model="sage"), SettingError, "--model sage: a typed dataset trains rgcn or rgat"),
])
def test_what_needs_one_type_is_refused_on_a_typed_graph_only(typed, homogeneous, settings, error, says):
    with pytest.raises(error, match=re.escape(says)):
        plan(settings, typed, CPU)
    if settings.data.task != "link":  # the homogeneous synthetic graph has no link split
        plan(settings, homogeneous, CPU)


@pytest.mark.parametrize(("settings", "says"), [
    (TrainSettings(target_type="paper"), "--target-type paper: "),
    (TrainSettings(model="rgcn"), "--model rgcn: a homogeneous dataset (one node type and one edge type) trains sage"),
])
def test_what_needs_types_is_refused_on_the_one_type_graph(homogeneous, settings, says):
    with pytest.raises((DatasetError, SettingError), match=re.escape(says)):
        plan(settings, homogeneous, CPU)


def test_a_dataset_without_node_type_features_names_the_types_that_have_them(tmp_path):
    ds = st.datasets.synthesize(tmp_path / "t", typed=True, scale=0.001, quiet=True)
    with_features = sorted(ds.features_by_type)
    with pytest.raises(st.errors.DamagedFileError, match=re.escape(f"(node types with features: "
                                                                    f"{', '.join(with_features)})")):
        ds.feature_store()  # the one type _N, which a typed dataset does not have
    assert ds.feature_store(with_features[0]).shape == ds.features_by_type[with_features[0]].shape
    assert "target: node type 'paper'" in repr(ds)
