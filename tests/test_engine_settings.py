"""The run's settings by concern: built without the CLI, each part checking itself, the CLI building the same parts."""

from pathlib import Path

import pytest

from sparsetrain.engine.cli import settings_of
from sparsetrain.engine.settings import (DataSettings, FeatureSettings, ModelSettings, OptimSettings, RunSettings,
                                         SamplingSettings, TrainSettings)
from sparsetrain.errors import SettingError, SettingTypeError, SparsetrainError
from sparsetrain.sampling import Fanouts


def test_parts_default_to_the_cli_defaults_and_the_cli_builds_the_same_parts():
    from sparsetrain.cli import build_parser

    args = build_parser().parse_args(["train"])
    assert settings_of(args) == TrainSettings()
    args = build_parser().parse_args(["train", "--data", "cora", "--fanout", "5,-1", "--cache-gb", "0.5", "--lr", "0.1",
                                      "--model", "gat", "--metrics-log", "m.jsonl", "--seed", "7"])
    assert settings_of(args) == TrainSettings(
        data=DataSettings(path=Path("cora")), sampling=SamplingSettings(fanouts=[5, -1]),
        features=FeatureSettings(cache_gb=0.5), model=ModelSettings(name="gat"), optim=OptimSettings(lr=0.1),
        run=RunSettings(log=Path("m.jsonl"), seed=7))


def test_flat_keywords_route_to_their_parts():
    flat = TrainSettings(data="cora", fanouts=[3], features="memory", model="gt", lr=0.5, quiet=True)
    assert flat.data.path == Path("cora") and flat.sampling.fanouts == Fanouts([3])
    assert (flat.features.placement, flat.model.name, flat.optim.lr, flat.run.quiet) == ("memory", "gt", 0.5, True)
    with pytest.raises(SettingTypeError, match="unexpected keyword argument 'fanoutz'"):
        TrainSettings(fanoutz=[3])
    with pytest.raises(SettingTypeError, match="lr= and optim= both given"):
        TrainSettings(optim=OptimSettings(), lr=0.1)


@pytest.mark.parametrize(("build", "says"), [
    (lambda: DataSettings(task="graph"), "task='graph': choose one of node, link"),
    (lambda: SamplingSettings(fanouts=[5, -2]), r"fanouts=\[5, -2\]"),
    (lambda: SamplingSettings(batch_size=0), "batch_size=0: must be a positive integer"),
    (lambda: SamplingSettings(exclude="both"), "exclude='both': choose one of auto, none, self, reverse"),
    (lambda: FeatureSettings(placement="ssd"), "placement='ssd': choose one of auto, mmap"),
    (lambda: FeatureSettings(cache_gb=-1), "cache_gb=-1: must be a number >= 0"),
    (lambda: FeatureSettings(cache_policy="fifo"), "cache_policy='fifo'"),
    (lambda: ModelSettings(name="sgc"), "name='sgc': choose one of"),
    (lambda: ModelSettings(hidden=0), "hidden=0: must be a positive integer"),
    (lambda: ModelSettings(dropout=1.0), r"dropout=1.0: must be a probability in \[0, 1\)"),
    (lambda: ModelSettings(decoder="cosine"), "decoder='cosine'"),
    (lambda: OptimSettings(lr=0), "lr=0: must be a positive number"),
    (lambda: OptimSettings(weight_decay=float("nan")), "weight_decay=nan"),
    (lambda: OptimSettings(epochs=0), "epochs=0: must be a positive integer"),
    (lambda: OptimSettings(max_steps=1.5), "max_steps=1.5: must be a positive integer"),
    (lambda: RunSettings(precision="fp8"), "precision='fp8'"),
    (lambda: RunSettings(eval="exact"), "eval='exact': choose one of auto, full, sampled"),
    (lambda: RunSettings(checkpoint_every=-1), "checkpoint_every=-1: must be an integer >= 0"),
])
def test_each_part_checks_itself_in_one_line(build, says):
    with pytest.raises(SettingError, match=says) as info:
        build()
    assert isinstance(info.value, (SparsetrainError, ValueError)) and "\n" not in str(info.value)


def test_parts_are_frozen_and_paths_are_paths():
    run = RunSettings(checkpoint_dir="ckpt", log="m.jsonl")
    assert run.checkpoint_dir == Path("ckpt") and run.log == Path("m.jsonl") and run.summary_json is None
    with pytest.raises(AttributeError):
        run.seed = 3
