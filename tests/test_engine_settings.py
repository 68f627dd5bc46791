"""The run's settings by concern: built without the CLI, each part checking itself, the CLI building the same parts."""

from pathlib import Path

import pytest

from sparsetrain.engine.cli import settings_of
from sparsetrain.engine.settings import (
    CheckpointSettings,
    DataSettings,
    FeatureSettings,
    ModelSettings,
    OptimSettings,
    ReportSettings,
    RunSettings,
    SamplingSettings,
    TrainSettings,
    batch_record,
)
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
        run=RunSettings(seed=7), report=ReportSettings(log=Path("m.jsonl")))


def test_flat_keywords_route_to_their_parts():
    flat = TrainSettings(data="cora", fanouts=[3], features="memory", model="gt", lr=0.5, quiet=True)
    assert flat.data.path == Path("cora") and flat.sampling.fanouts == Fanouts([3])
    assert (flat.features.placement, flat.model.name, flat.optim.lr, flat.report.quiet) == ("memory", "gt", 0.5, True)
    outputs = TrainSettings(checkpoint_dir="ck", checkpoint_every=5, resume=True, summary_json="s.json")
    assert outputs.checkpoint == CheckpointSettings(dir=Path("ck"), every=5, resume=True)
    assert outputs.report.summary_json == Path("s.json")
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
    (lambda: OptimSettings(max_steps=1.5), "max_steps=1.5: must be an integer or None"),
    (lambda: RunSettings(precision="fp8"), "precision='fp8'"),
    (lambda: RunSettings(eval="exact"), "eval='exact': choose one of auto, full, sampled"),
    (lambda: CheckpointSettings(every=-1), "every=-1: must be an integer >= 0"),
    (lambda: CheckpointSettings(resume=True), "--resume continues from the checkpoints of --checkpoint-dir"),
    (lambda: RunSettings(device="gpu"), "device='gpu': choose auto, cpu, cuda or cuda:N"),
    (lambda: RunSettings(seed=2**64), r"seed=18446744073709551616: must be an integer in \[-2\*\*43, 2\*\*43\)"),
    # every field's type against its annotation: strings are not bools, bools not ints, ints are floats
    (lambda: CheckpointSettings(dir="ck", resume="False"), "resume='False': must be True or False"),
    (lambda: SamplingSettings(temporal="no"), "temporal='no': must be True or False"),
    (lambda: SamplingSettings(fanouts="5,5"), r"fanouts='5,5': must be fanouts"),
    (lambda: SamplingSettings(batch_size=True), "batch_size=True: must be an integer"),
    (lambda: DataSettings(verify=1), "verify=1: must be True or False"),
    (lambda: DataSettings(target_type=3), "target_type=3: must be a string or None"),
    (lambda: ModelSettings(hidden=True), "hidden=True: must be an integer or None"),
    (lambda: ModelSettings(hidden=16.0), "hidden=16.0: must be an integer or None"),
    (lambda: RunSettings(seed=1.0), "seed=1.0: must be an integer"),
    (lambda: RunSettings(device=0), "device=0: must be a string"),
    (lambda: FeatureSettings(cache_gb=True), "cache_gb=True: must be a number"),
    (lambda: ReportSettings(quiet="yes"), "quiet='yes': must be True or False"),
    (lambda: ReportSettings(log=5), "log=5: must be a path or None"),
    (lambda: TrainSettings(resume="False", checkpoint_dir="ck"), "resume='False': must be True or False"),
])
def test_each_part_checks_itself_in_one_line(build, says):
    with pytest.raises(SettingError, match=says) as info:
        build()
    assert isinstance(info.value, (SparsetrainError, ValueError)) and "\n" not in str(info.value)


def test_parts_are_frozen_and_paths_are_paths():
    checkpoint, report = CheckpointSettings(dir="ckpt"), ReportSettings(log="m.jsonl")
    assert checkpoint.dir == Path("ckpt") and report.log == Path("m.jsonl") and report.summary_json is None
    assert FeatureSettings(cache_gb=1).cache_gb == 1  # an int is a number
    with pytest.raises(AttributeError):
        RunSettings().seed = 3


def test_the_checkpoint_record_holds_every_setting_not_marked_resumable_whatever_its_value():
    record = batch_record(TrainSettings())
    assert record == {"task": "node", "target_type": None, "fanouts": [10, 10], "batch_size": 1024, "exclude": "auto",
                      "temporal": False, "temporal_strategy": None, "model": None, "hidden": None, "heads": None,
                      "decoder": "dot", "seed": 0}
    # a setting off is recorded as off: a resume that turns it on differs
    assert batch_record(TrainSettings(temporal=True))["temporal"] is True
    # what a resume may change is not recorded
    assert batch_record(TrainSettings(lr=0.5, epochs=9, dropout=0.1, cache_gb=1.0, quiet=True)) == record


def test_numpy_scalars_count_as_their_python_type_and_are_stored_as_it():
    import numpy as np

    s = TrainSettings(batch_size=np.int64(64), seed=np.int32(3), epochs=np.int64(2), lr=np.float32(0.5),
                      checkpoint_dir="ckpt", resume=np.bool_(True), checkpoint_every=np.uint8(4))
    values = (s.sampling.batch_size, s.run.seed, s.optim.epochs, s.optim.lr, s.checkpoint.resume, s.checkpoint.every)
    assert values == (64, 3, 2, 0.5, True, 4)
    assert [type(v) for v in values] == [int, int, int, float, bool, int]
    assert batch_record(s) == batch_record(TrainSettings(batch_size=64, seed=3))
    assert type(FeatureSettings(cache_gb=np.int64(2)).cache_gb) is int
    # a float is still not an int, and a numpy integer's value is checked as the int's
    with pytest.raises(SettingError, match=r"batch_size=1024.0: must be an integer"):
        SamplingSettings(batch_size=1024.0)
    with pytest.raises(SettingError, match=r"seed=8796093022208: must be an integer in"):
        RunSettings(seed=np.int64(2**43))
    with pytest.raises(SettingError, match=r"resume=np.int64\(1\): must be True or False"):
        CheckpointSettings(dir="ckpt", resume=np.int64(1))
