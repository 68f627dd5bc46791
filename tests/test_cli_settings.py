"""The ``train`` command line is generated from the settings fields: every field has its flag with the field's default,
type, choices and docstring; ``--config`` files (TOML, YAML, JSON; flat or nested by part) set the same fields, flags
override them, and a run writes its settings beside its checkpoints and into its summary."""

import argparse
import json
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

import sparsetrain as st
from sparsetrain.engine.cli import settings_of
from sparsetrain.engine.run_config import config_of, read_config
from sparsetrain.engine.settings import FLAGS, PARTS, TrainSettings, field_docs, flag_names
from sparsetrain.errors import SettingError
from sparsetrain.sampling import Fanouts

# the flags `sparsetrain train` had before they were generated (sparsetrain 0.x, hand-written in engine/cli.py)
FLAGS_BEFORE = {
    "--data", "--verify", "--target-type", "--task", "--decoder", "--exclude", "--model", "--fanout", "--temporal",
    "--temporal-strategy", "--fuse-last-hop", "--batch-size", "--epochs", "--max-steps", "--lr", "--weight-decay",
    "--hidden", "--dropout", "--device", "--precision", "--features", "--cache-gb", "--cache-policy", "--step",
    "--eval", "--checkpoint-dir", "--checkpoint-every", "--resume", "--metrics-log", "--log", "--seed",
    "--summary-json", "--quiet",
}


def _train_parser():
    from sparsetrain.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")
    return parser, sub.choices["train"]


def _field_default(f):
    return f.default_factory() if f.default_factory is not MISSING else f.default


def test_every_settings_field_has_its_flag_with_the_fields_default_and_docstring():
    _, train = _train_parser()
    by_dest = {a.dest: a for a in train._actions
               if a.option_strings and a.dest not in ("help", "config") and a.help != argparse.SUPPRESS}
    assert set(by_dest) == set(FLAGS)  # no field without a flag, no setting flag without a field
    for flat, (part, key) in FLAGS.items():
        cls = PARTS[part]
        f = {f.name: f for f in fields(cls)}[key]
        action = by_dest[flat]
        assert action.default == _field_default(f), flat
        assert type(action.default) is type(_field_default(f)), flat
        assert f.metadata.get("choices") is None or tuple(action.choices) == tuple(f.metadata["choices"]), flat
        first_words = " ".join(field_docs(cls)[key].replace("``", "").split()[:2])
        assert action.help.startswith(first_words), (flat, action.help)
    every = {s for a in train._actions for s in a.option_strings}
    # what changed: --config, and --no-X for every boolean field (to turn off what a config file turns on)
    booleans = {f"--no-{flat.replace('_', '-')}" for flat, (part, key) in FLAGS.items()
                if isinstance(_field_default({f.name: f for f in fields(PARTS[part])}[key]), bool)}
    generated = {name for flat in FLAGS for name in flag_names(flat)} | {"--log"}  # --log: hidden, the old name
    assert FLAGS_BEFORE <= generated  # no flag of the earlier CLI lost
    assert every - {"-h", "--help"} == generated | {"--config"} | booleans


def test_the_parser_defaults_are_the_default_settings_and_a_flag_goes_to_its_field():
    parser, _ = _train_parser()
    assert settings_of(parser.parse_args(["train"])) == TrainSettings()
    args = parser.parse_args(["train", "--features", "memory", "--checkpoint-every", "5", "--checkpoint-dir", "ck",
                              "--log", "m.jsonl", "--no-quiet", "--temporal", "--temporal-strategy", "last"])
    settings = settings_of(args)
    assert (settings.features.placement, settings.checkpoint.every, settings.checkpoint.dir) == ("memory", 5,
                                                                                                 Path("ck"))
    assert settings.report.log == Path("m.jsonl") and settings.report.quiet is False
    assert settings.sampling.temporal and settings.sampling.temporal_strategy == "last"


TOML_FLAT = """
fanouts = [15, 10]
batch_size = 512
model = "gat"
lr = 0.02
checkpoint_dir = "runs/a"
quiet = true
"""
TOML_NESTED = """
[sampling]
fanouts = "15,10"
batch_size = 512
[model]
name = "gat"
[optim]
lr = 0.02
[checkpoint]
dir = "runs/a"
[report]
quiet = true
"""
YAML_NESTED = """
sampling: {fanouts: [15, 10], batch_size: 512}
model: {name: gat}
optim: {lr: 0.02}
checkpoint_dir: runs/a
report: {quiet: true}
"""
EXPECTED = TrainSettings(fanouts=[15, 10], batch_size=512, model="gat", lr=0.02, checkpoint_dir="runs/a", quiet=True)


@pytest.mark.parametrize(("name", "text"), [("run.toml", TOML_FLAT), ("run.toml", TOML_NESTED),
                                            ("run.yaml", YAML_NESTED)])
def test_a_config_file_sets_the_same_fields_flat_or_nested_and_flags_override_it(tmp_path, name, text):
    parser, _ = _train_parser()
    path = tmp_path / name
    path.write_text(text)
    assert settings_of(parser.parse_args(["train", "--config", str(path)])) == EXPECTED
    overridden = settings_of(parser.parse_args(["train", "--config", str(path), "--batch-size", "64", "--no-quiet",
                                                "--model", "sage"]))
    assert overridden == TrainSettings(fanouts=[15, 10], batch_size=64, model="sage", lr=0.02,
                                       checkpoint_dir="runs/a", quiet=False)
    # a flag given with its default value still overrides the file
    assert settings_of(parser.parse_args(["train", "--config", str(path), "--batch-size", "1024"])).sampling == \
        EXPECTED.sampling.__class__(fanouts=[15, 10], batch_size=1024)


@pytest.mark.parametrize(("text", "says"), [
    ("batch_sise = 3\n", "run.toml: unknown key 'batch_sise'"),
    ("[sampling]\nfanout = [3]\n", "run.toml: unknown key sampling.fanout; [sampling] takes batch_size, exclude"),
    ("batch_size = \"big\"\n", "run.toml: batch_size='big': must be an integer"),
    ("[optim]\nlr = \"fast\"\n", "run.toml: optim.lr='fast': must be a number or None"),
    ("quiet = 1\n", "run.toml: quiet=1: must be True or False"),
    ("fanouts = [5, -7]\n", "run.toml: fanouts=[5, -7]:"),
    ("fanouts = 5\n", "run.toml: fanouts=5:"),
    ("batch_size = 0\n", "batch_size=0: must be a positive integer"),
    ("batch_size = \n", "run.toml: not valid TOML"),
])
def test_a_bad_config_key_or_value_is_one_line_naming_it(cli, tmp_path, text, says):
    path = tmp_path / "run.toml"
    path.write_text(text)
    code, out, err = cli("train", "--config", path)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert says in err, err


def test_yaml_without_pyyaml_names_the_install(tmp_path, monkeypatch):
    path = tmp_path / "run.yaml"
    path.write_text("batch_size: 5\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    with pytest.raises(SettingError, match="pip install pyyaml"):
        read_config(path)


def test_written_settings_read_back_to_the_same_settings(tmp_path):
    typed = TrainSettings(fanouts={("a", "to", "b"): [3, 2], ("b", "to", "a"): [1, 0]}, lr=0.5, data="x",
                          checkpoint_dir=tmp_path)
    for settings in (TrainSettings(), EXPECTED, typed):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config_of(settings)))
        assert TrainSettings(**read_config(path)) == settings


def test_a_run_writes_its_settings_beside_its_checkpoints_and_in_its_summary(cli, tmp_path):
    data = st.datasets.synthesize(tmp_path / "tiny", 300, 2400, feature_dim=8, num_classes=3, seed=0,
                                  quiet=True).path
    (tmp_path / "run.toml").write_text(f'data = "{data}"\n[sampling]\nfanouts = [4, 4]\nbatch_size = 64\n'
                                       "[optim]\nmax_steps = 2\n")
    ck, summary = tmp_path / "ck", tmp_path / "summary.json"
    code, _, err = cli("train", "--config", tmp_path / "run.toml", "--hidden", "8", "--checkpoint-dir", ck,
                       "--summary-json", summary, "--quiet", "--device", "cpu")
    assert code == 0, err
    written = json.loads((ck / "config.json").read_text())
    assert written == json.loads(summary.read_text())["config"]
    assert written["sampling"] == {"fanouts": [4, 4], "batch_size": 64, "exclude": "auto", "temporal": False,
                                   "temporal_strategy": None, "fuse_last_hop": False}
    assert (written["model"]["hidden"], written["optim"]["max_steps"], written["checkpoint"]["dir"]) == (8, 2, str(ck))
    again = TrainSettings(**read_config(ck / "config.json"))
    assert again.sampling.fanouts == Fanouts([4, 4]) and again.model.hidden == 8 and again.data.path == data
    # a run refused for a folder holding an earlier run's checkpoints leaves that run's config.json as it was
    code, _, err = cli("train", "--config", tmp_path / "run.toml", "--checkpoint-dir", ck, "--quiet",
                       "--device", "cpu")
    assert code == 1 and "already holds checkpoints" in err
    assert json.loads((ck / "config.json").read_text()) == written
