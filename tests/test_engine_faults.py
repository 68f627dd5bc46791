"""The train CLI under faults: torchrun's option parsing, checkpoints of another run, a rank's own failure."""

import json
import subprocess
import sys

import pytest
import torch

import sparsetrain as st
from sparsetrain.cli import build_parser

TINY_ARGS = ["--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--quiet"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return st.datasets.synthesize(
        tmp_path_factory.mktemp("tiny") / "tiny", 400, 3200, feature_dim=8, num_classes=3, seed=0, quiet=True
    ).path


def _metrics(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _train_options() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "verb")
    return [opt for action in sub.choices["train"]._actions for opt in action.option_strings if opt.startswith("--")]


def test_torchrun_leaves_every_documented_train_option_to_the_script():
    from torch.distributed.run import get_args_parser

    documented = [opt for opt in _train_options() if opt not in ("--help", "--log")]
    assert "--metrics-log" in documented
    for opt in documented:
        args = get_args_parser().parse_args(["--nproc-per-node", "1", "-m", "sparsetrain", "train", opt, "1"])
        assert args.training_script_args == ["train", opt, "1"], opt


@pytest.mark.slow  # the default suite checks the log under torchrun in test_training's two-rank run
def test_metrics_log_under_torchrun(tiny_dir, tmp_path):
    log = tmp_path / "metrics.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "sparsetrain", "train",
           "--data", str(tiny_dir), *TINY_ARGS, "--epochs", "1", "--metrics-log", str(log)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    records = _metrics(log)
    train_seeds = len(st.datasets.load(tiny_dir).split["train"])
    steps = -(-train_seeds // 64)
    assert [r["step"] for r in records if "loss" in r] == list(range(1, steps + 1))
    assert records[-1]["epoch"] == 1 and records[-1]["step"] == steps and 0 <= records[-1]["val_acc"] <= 1


def test_train_help_lists_only_the_metrics_log_option(cli):
    code, out, _ = cli("train", "--help")
    assert code == 0 and "--metrics-log" in out
    assert "--log " not in out and "--log," not in out and "--log\n" not in out  # torchrun takes --log as its own


def test_the_old_log_option_still_works_outside_torchrun(cli, tiny_dir, tmp_path):
    for option in ("--log", "--metrics-log"):
        log = tmp_path / f"{option[2:]}.jsonl"
        code, _, err = cli("train", "--data", tiny_dir, *TINY_ARGS, "--epochs", "1", "--seed", "1", option, log)
        assert code == 0, err
    timing = ("stall_fraction", "seeds_per_second")
    def same(path):
        return [{k: v for k, v in r.items() if k not in timing and not k.endswith("seconds")} for r in _metrics(path)]
    assert same(tmp_path / "log.jsonl") == same(tmp_path / "metrics-log.jsonl")
    assert len(_metrics(tmp_path / "log.jsonl")) > 1


def _folder_state(folder) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}


def _one_line_error(code, err) -> str:
    assert code == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_checkpoints_of_another_run_are_refused_by_name(cli, tiny_dir, tmp_path):
    other = st.datasets.synthesize(tmp_path / "other", 400, 3200, feature_dim=8, num_classes=3, seed=5, quiet=True).path
    ckpt = tmp_path / "ck"
    base = ["train", "--data", tiny_dir, *TINY_ARGS, "--checkpoint-dir", ckpt]
    code, _, err = cli(*base, "--epochs", "1")
    assert code == 0, err
    before = _folder_state(ckpt)
    assert sorted(name for name in before if name.endswith(".pt")) == ["best.pt", "step-0000000004.pt"]

    err = _one_line_error(*cli(*base, "--epochs", "1")[::2])  # a new run in a used folder
    assert (
        str(ckpt) in err and "already holds checkpoints" in err and "--resume" in err and "new --checkpoint-dir" in err
    )
    cases = [(["--seed", "1"], "seed: checkpoint 0, this run 1"),
             (["--hidden", "32"], "model parameters differ"),
             (["--fanout", "5,3"], "fanouts: checkpoint [5, 5], this run [5, 3]"),
             (["--model", "gcn"], "model: checkpoint 'sage', this run 'gcn'"),
             (["--batch-size", "32"], "batch_size: checkpoint 64, this run 32"),
             (["--data", other], f"dataset contents differ (checkpoint {tiny_dir}, this run {other})")]
    for extra, named in cases:
        err = _one_line_error(*cli(*base, "--epochs", "2", "--resume", *extra)[::2])
        assert named in err and "belongs to another run" in err and "new --checkpoint-dir" in err, (extra, err)
    assert _folder_state(ckpt) == before  # nothing written, nothing pruned

    code, _, err = cli(*base, "--epochs", "2", "--resume")  # the same run continues
    assert code == 0, err
    assert sorted(name for name in _folder_state(ckpt) if name.endswith(".pt")) == [
        "best.pt",
        "step-0000000004.pt",
        "step-0000000008.pt",
    ]


def test_a_checkpoint_records_every_batch_setting_off_or_on_by_its_flag_name(cli, tiny_dir, tmp_path):
    from sparsetrain.engine.settings import TrainSettings, batch_record

    code, _, err = cli("train", "--data", tiny_dir, *TINY_ARGS, "--epochs", "1", "--checkpoint-dir", tmp_path / "ck")
    assert code == 0, err
    record = torch.load(next((tmp_path / "ck").glob("step-*.pt")), weights_only=True)["run"]
    assert set(batch_record(TrainSettings())) <= set(record) and "fanout" not in record
    assert {k: record[k] for k in ("fanouts", "temporal", "temporal_strategy", "model", "hidden", "task", "seed")} == {
        "fanouts": [5, 5], "temporal": False, "temporal_strategy": None, "model": "sage", "hidden": 16, "task": "node",
        "seed": 0}


def _identity(**changes) -> dict:
    identity = {"parameters": {"w": [2, 2]}, "seed": 0, "batch_size": 64, "record_version": 2, "task": "node",
                "fanouts": [5, 5], "temporal": False, "temporal_strategy": None, "model": "sage",
                "dataset": {"path": "d", "sha256": "x"}}
    return {**identity, **changes}


def test_resume_compares_the_complete_record_a_key_on_one_side_only_differs():
    from sparsetrain.engine.checkpoint import check_same_run

    check_same_run("ck", {"run": _identity()}, _identity())
    with pytest.raises(st.engine.CheckpointError, match="temporal: checkpoint False, this run True"):
        check_same_run("ck", {"run": _identity()}, _identity(temporal=True, temporal_strategy="uniform"))
    recorded = _identity()
    del recorded["temporal"]
    with pytest.raises(st.engine.CheckpointError, match="temporal: checkpoint not recorded, this run False"):
        check_same_run("ck", {"run": recorded}, _identity())
    with pytest.raises(st.engine.CheckpointError, match="exclude: checkpoint 'self', this run not recorded"):
        check_same_run("ck", {"run": _identity(exclude="self")}, _identity())


def test_a_checkpoint_of_the_previous_version_is_read_with_its_defaults():
    """0.1 recorded ``fanout``, and ``temporal`` (the strategy) only when on: absent means off."""
    from sparsetrain.engine.checkpoint import check_same_run

    old = {"parameters": {"w": [2, 2]}, "seed": 0, "batch_size": 64, "model": "sage", "fanout": [5, 5],
           "dataset": {"path": "d", "sha256": "x"}}
    check_same_run("ck", {"run": old}, _identity(hidden=16, target_type=None))  # never recorded: not compared
    with pytest.raises(st.engine.CheckpointError, match="fanouts: checkpoint \\[5, 5\\], this run \\[5, 3\\]"):
        check_same_run("ck", {"run": old}, _identity(fanouts=[5, 3]))
    with pytest.raises(st.engine.CheckpointError, match="temporal: checkpoint False, this run True"):
        check_same_run("ck", {"run": old}, _identity(temporal=True, temporal_strategy="uniform"))
    check_same_run("ck", {"run": {**old, "temporal": "last"}}, _identity(temporal=True, temporal_strategy="last"))
    with pytest.raises(st.engine.CheckpointError, match="temporal: checkpoint True, this run False"):
        check_same_run("ck", {"run": {**old, "temporal": "last"}}, _identity())


def test_pruning_keeps_the_checkpoint_just_written(tmp_path):
    from sparsetrain.engine.checkpoint import list_checkpoints, load_latest_checkpoint, save_checkpoint

    for step in (100, 101, 102):
        save_checkpoint(tmp_path, step, {"step": step}, keep=2)
    save_checkpoint(tmp_path, 5, {"step": 5}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-0000000102.pt", "step-0000000005.pt"]
    assert load_latest_checkpoint(tmp_path)["step"] == 102


def test_a_checkpoint_write_killed_midway_leaves_no_temp_file_for_good(tmp_path):
    import os
    import signal

    from sparsetrain.engine import checkpoint

    checkpoint.save_checkpoint(tmp_path, 1, {"w": torch.ones(2)})
    pid = os.fork()
    if pid == 0:  # a writer killed in the middle of writing step 2
        def half_written(state, f):
            f.write(b"PK\x03\x04 half a checkpoint")
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        checkpoint.torch.save = half_written
        try:
            checkpoint.save_checkpoint(tmp_path, 2, {"w": torch.ones(2)})
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    leftover = f".step-0000000002.pt.tmp-{pid}"
    live = f".step-0000000009.pt.tmp-{os.getpid()}"  # a write in progress in a live process is not touched
    (tmp_path / live).write_bytes(b"")
    assert leftover in _folder_state(tmp_path)
    assert checkpoint.load_latest_checkpoint(tmp_path)["w"].tolist() == [1.0, 1.0]
    assert sorted(_folder_state(tmp_path)) == [live, "step-0000000001.pt", "step-0000000001.pt.sha256"]
    (tmp_path / f".step-0000000002.pt.sha256.tmp-{pid}").write_bytes(b"")
    checkpoint.save_checkpoint(tmp_path, 3, {"w": torch.zeros(2)})
    assert sorted(_folder_state(tmp_path)) == [live, "step-0000000001.pt", "step-0000000001.pt.sha256",
                                               "step-0000000003.pt", "step-0000000003.pt.sha256"]


def test_only_a_failed_collective_counts_as_another_ranks_failure():
    import torch.distributed as dist

    from sparsetrain.engine.distributed import caused_by_another_rank
    from sparsetrain.errors import CheckpointError, CollectiveError, LoaderError

    peer = [
        CollectiveError("sparse_all_gather: the data exchange failed"),
        dist.DistBackendError("NCCL communicator was aborted"),
        RuntimeError(
            "[third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:30409: Connection reset by peer"
        ),
        RuntimeError(
            "[third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv operation"
        ),
    ]
    own = [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
        CheckpointError("ck: none of the 2 checkpoints is intact"),
        LoaderError("the loader thread produced no batch for 300 s"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x8 and 16x3)"),
    ]
    assert [caused_by_another_rank(e) for e in peer] == [True] * len(peer)
    assert [caused_by_another_rank(e) for e in own] == [False] * len(own)


# rank 1 runs out of memory in its first step; rank 0 then waits on it in DDP's all-reduce
OWN_FAILURE = """
import os, sys, torch
from sparsetrain.cli import main
from sparsetrain.engine import trainer
if os.environ["RANK"] == "1":
    def out_of_memory(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    trainer.Trainer._train_epoch = out_of_memory
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.distributed
def test_a_ranks_own_error_is_reported_as_itself_and_the_other_loses_contact(tiny_dir, tmp_path):
    import os

    from tests.collective_harness import free_port

    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), SPARSETRAIN_DIST_TIMEOUT="10")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", OWN_FAILURE, "train", "--data", str(tiny_dir), *TINY_ARGS, "--epochs", "1"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        errs = [p.communicate(timeout=240)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    own, peer = errs[1], errs[0]
    assert procs[1].returncode == 1 and procs[0].returncode == 1, errs
    for err in errs:
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert (
        "rank 1 of 2: out of memory on cpu (CUDA out of memory. Tried to allocate 20.00 GiB); lower --batch-size" in own
    )
    assert "lost contact" not in own
    assert "rank 0 of 2: lost contact with another rank" in peer
