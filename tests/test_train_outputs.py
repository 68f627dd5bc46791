"""`sparsetrain train` ends in one line and exit code 1 whatever goes wrong around the training itself: a device the
machine lacks, a seed out of range, output paths that cannot be written (checked before the first step), a full disk
while checkpointing, a summary file that cannot be written (after the result was printed); Ctrl-C says what was
written and how to continue."""

import builtins
import errno
import pathlib

import pytest
import torch

import sparsetrain as st
from sparsetrain.engine import checkpoint, distributed, trainer
from sparsetrain.engine.distributed import choose_device
from sparsetrain.errors import SettingError

TINY = ["--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--quiet"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny") / "tiny"
    return st.datasets.synthesize(folder, 400, 3200, feature_dim=8, num_classes=3, seed=0, quiet=True).path


def _one_line_error(code, err) -> str:
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("device, says", [
    ("gpu", "device='gpu': choose auto, cpu, cuda or cuda:N"),
    ("cpu:1", "device='cpu:1': choose auto, cpu, cuda or cuda:N"),
    pytest.param("cuda", "--device cuda: no CUDA device is visible", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="this machine has a GPU")),
])
def test_a_device_the_machine_lacks_is_one_line(cli, tiny, device, says):
    code, out, err = cli("train", "--data", tiny, "--epochs", "1", "--device", device, *TINY)
    assert says in _one_line_error(code, err) and out == ""


def test_the_device_is_chosen_once_and_checked_against_the_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert choose_device("cuda", local_rank=3) == torch.device("cuda", 1)  # this rank's GPU
    assert choose_device("cuda:1") == torch.device("cuda", 1)
    assert choose_device("auto") == torch.device("cuda", 0)
    with pytest.raises(SettingError, match="--device cuda:7: this machine has 2 CUDA device"):
        choose_device("cuda:7")
    with pytest.raises(SettingError, match="--device cuda:1 names one GPU, but each of the 2 ranks needs its own"):
        choose_device("cuda:1", local_rank=1, world_size=2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device("auto") == torch.device("cpu")
    with pytest.raises(SettingError, match="no CUDA device is visible"):
        choose_device("cuda:0")
    assert distributed.choose_device is choose_device


@pytest.mark.parametrize("seed", ["18446744073709551616", "-9223372036854775809", str(2**43)])
def test_a_seed_out_of_range_is_one_line(cli, tiny, seed):
    code, out, err = cli("train", "--data", tiny, "--epochs", "1", f"--seed={seed}", *TINY)
    assert f"--seed: '{seed}': must be an integer in [-2**43, 2**43)" in _one_line_error(code, err)


def test_the_seeds_at_the_ends_of_the_range_train(cli, tiny):
    for seed in (2**43 - 1, -(2**43)):
        code, out, err = cli("train", "--data", tiny, "--epochs", "1", f"--seed={seed}", *TINY)
        assert code == 0 and "test accuracy" in out, err


@pytest.mark.parametrize("flag, path, says", [
    ("--metrics-log", "folder", "--metrics-log {}: is a folder; give a file path"),
    ("--summary-json", "folder", "--summary-json {}: is a folder; give a file path"),
    ("--checkpoint-dir", "file", "--checkpoint-dir {}: is not a folder; give a folder path"),
    ("--summary-json", "file/s.json", "--summary-json {}: {} is a file, not a folder"),
    ("--metrics-log", "file/deeper/m.jsonl", "--metrics-log {}: {} is a file, not a folder"),
    ("--checkpoint-dir", "file/ck", "--checkpoint-dir {}: {} is a file, not a folder"),
])
def test_an_output_path_that_cannot_be_written_is_refused_before_training(cli, tiny, tmp_path, flag, path, says):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("not a folder")
    code, out, err = cli("train", "--data", tiny, "--epochs", "1", flag, tmp_path / path, *TINY)
    assert says.format(tmp_path / path, tmp_path / "file") in _one_line_error(code, err)
    assert out == ""  # refused before the first epoch
    assert (tmp_path / "file").read_text() == "not a folder"


def test_a_summary_that_cannot_be_written_comes_after_the_printed_result(cli, tiny, tmp_path, monkeypatch):
    target = tmp_path / "s.json"
    write_text = pathlib.Path.write_text

    def full_disk(self, *args, **kwargs):
        if self == target:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full_disk)
    code, out, err = cli("train", "--data", tiny, "--epochs", "1", "--summary-json", target, *TINY)
    assert "test accuracy" in out  # the run's result is never lost
    assert f"{target}: No space left on device; check the path" in _one_line_error(code, err)


def test_a_full_disk_while_checkpointing_is_one_line_and_leaves_no_partial_file(cli, tiny, tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    written = []

    def full_disk_after_one(path, mode="r", *args, **kwargs):  # the first checkpoint, config.json and best.pt fit,
        if "w" in mode:  # the next does not
            written.append(path)
        return builtins.open("/dev/full" if len(written) > 5 and "w" in mode else path, mode, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "open", full_disk_after_one, raising=False)
    code, out, err = cli("train", "--data", tiny, "--epochs", "2", "--checkpoint-dir", ck, *TINY)
    err = _one_line_error(code, err)
    assert "writing the checkpoint of step 8 failed (No space left on device)" in err
    assert "the newest intact one is step-0000000004.pt" in err and "--resume" in err
    assert sorted(p.name for p in ck.iterdir()) == ["best.pt", "best.pt.sha256", "config.json", "step-0000000004.pt",
                                                    "step-0000000004.pt.sha256"]


def test_a_metrics_log_that_stops_taking_writes_is_one_line_naming_it(cli, tiny, tmp_path, monkeypatch):
    log = tmp_path / "m.jsonl"

    def full_disk(path, mode="r", *args, **kwargs):  # the write fails when the file is flushed, naming no file
        return builtins.open("/dev/full" if path == log else path, mode, *args, **kwargs)

    monkeypatch.setattr(trainer, "open", full_disk, raising=False)
    code, out, err = cli("train", "--data", tiny, "--epochs", "1", "--metrics-log", log, *TINY)
    assert f"error: {log}: No space left on device; check the path" in _one_line_error(code, err)


def _interrupt_in_epoch(monkeypatch, epoch: int) -> None:
    original = trainer.Trainer._train_epoch

    def interrupted(self):
        if self.epoch == epoch:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(trainer.Trainer, "_train_epoch", interrupted)


def test_ctrl_c_after_checkpoints_says_what_was_written_and_that_resume_continues(cli, tiny, tmp_path, monkeypatch):
    ck, log = tmp_path / "ck", tmp_path / "m.jsonl"
    _interrupt_in_epoch(monkeypatch, 2)
    base = ["train", "--data", tiny, "--epochs", "3", "--checkpoint-dir", ck, "--metrics-log", log, *TINY]
    code, _, err = cli(*base)
    assert code == 130 and len(err.strip().splitlines()) == 1 and "nothing was written" not in err, err
    assert (f"interrupted at step 8; checkpoints are in {ck} (newest step-0000000008.pt); rerun the same command with "
            "--resume (resume=True) to continue from step 8") in err
    assert f"metrics up to step 8 are in {log}" in err
    monkeypatch.undo()
    code, out, err = cli(*base, "--resume")
    assert code == 0 and "after 3 epochs" in out, err


def test_ctrl_c_without_checkpoints_says_none_was_written(cli, tiny, monkeypatch):
    _interrupt_in_epoch(monkeypatch, 0)
    code, _, err = cli("train", "--data", tiny, "--epochs", "2", *TINY)
    assert code == 130
    assert err == "interrupted at step 0; no checkpoint was written (--checkpoint-dir keeps progress)\n"


def test_a_cache_smaller_than_one_feature_row_is_refused(cli, tiny):
    code, out, err = cli("train", "--data", tiny, "--epochs", "1", "--cache-gb", "1e-9", *TINY)
    err = _one_line_error(code, err)
    assert "--cache-gb 1e-09: 1 bytes, less than one feature row (32 bytes), would cache nothing" in err
    code, out, err = cli("train", "--data", tiny, "--epochs", "1", "--cache-gb", "3e-8", *TINY)  # 32 bytes: one row
    assert code == 0 and "cache hit rate" in out, err


@pytest.mark.parametrize("flag, path", [("--summary-json", "meta.json"), ("--metrics-log", "labels.npy"),
                                        ("--checkpoint-dir", "."), ("--checkpoint-dir", "ck")])
def test_an_output_path_in_the_dataset_folder_is_refused_and_the_dataset_kept(cli, tmp_path, flag, path):
    """A summary written over meta.json destroyed the dataset (exit 0, then every later command refused it)."""
    data = st.datasets.synthesize(tmp_path / "d", 200, 1600, feature_dim=4, num_classes=3, seed=0, quiet=True).path
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    code, out, err = cli("train", "--data", data, "--epochs", "1", flag, data / path, *TINY)
    assert f"{flag} {data / path}: is in the dataset folder {data}" in _one_line_error(code, err) and out == ""
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before
