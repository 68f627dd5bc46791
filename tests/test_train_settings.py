"""What a CLI user sets and reads: flag errors as one line, settings changed on resume, memory limits, help texts,
progress bars, the compile notice, warnings without source lines."""

import ast
import io
import re
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain import _progress
from sparsetrain.engine import host_memory, plan
from sparsetrain.engine.settings import CheckpointSettings, ReportSettings

from .conftest import run_module

TINY = ["--fanout", "5,5", "--batch-size", "64", "--hidden", "16"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny") / "tiny"
    return st.datasets.synthesize(folder, 400, 3200, feature_dim=8, num_classes=3, seed=0, quiet=True).path


def _one_line_error(code, err):
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert "usage:" not in err and "Traceback" not in err


@pytest.mark.parametrize("argv, says", [
    (["train", "--cache-gb", "-1"], "argument --cache-gb: '-1': must be a number >= 0"),
    (["train", "--batch-size", "-1"], "argument --batch-size: '-1': must be a positive integer"),
    (["train", "--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
    (["train", "--model", "sgc"], "argument --model: invalid choice: 'sgc'"),
    (["train", "--bogus", "3"], "sparsetrain train: unrecognized arguments: --bogus 3; see `sparsetrain train --help`"),
    (["preprocess", "--edges", "e.csv"], "arguments are required: --out; see `sparsetrain preprocess --help`"),
    (["preprocess", "--edges", "e.csv", "--out", "o", "--link-split", "0.9,0.1"], "'0.9,0.1': expected three numbers"),
    # a value starting with '-' is the flag's value: its own check says what is wrong, not "expected one argument"
    (["preprocess", "--edges", "e.csv", "--out", "o", "--link-split", "-0.1,0.5,0.6"], "link split (-0.1, 0.5, 0.6)"),
    (["nosuchverb"], "argument VERB: invalid choice: 'nosuchverb'"),
])
def test_a_bad_flag_is_one_line_and_exit_code_1(cli, tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    edges = np.array([[0, 1], [1, 2], [2, 0]] * 20)
    np.savetxt(tmp_path / "e.csv", edges, fmt="%d", delimiter=",", header="src,dst", comments="")
    code, out, err = cli(*argv)
    _one_line_error(code, err)
    assert says in err
    assert not (tmp_path / "o").exists()


def test_the_shell_sees_the_same_one_line(tmp_path):
    proc = run_module("train", "--batch-size", "-1", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == "error: sparsetrain train: argument --batch-size: '-1': must be a positive integer\n"


def test_resume_applies_and_reports_a_changed_lr_weight_decay_and_dropout(cli, tiny, tmp_path):
    ck = tmp_path / "ck"
    code, _, err = cli("train", "--data", tiny, "--epochs", "1", "--checkpoint-dir", ck, *TINY, "--quiet")
    assert code == 0, err
    code, _, err = cli("train", "--data", tiny, "--epochs", "2", "--checkpoint-dir", ck, "--resume", "--lr", "0.002",
                       "--weight-decay", "0", "--dropout", "0.25", *TINY, "--quiet")
    assert code == 0, err
    assert err.count("\n") == 1 and "lr 0.01 -> 0.002, weight_decay 0.0005 -> 0, dropout 0.5 -> 0.25" in err
    state = torch.load(sorted(ck.glob("step-*.pt"))[-1], weights_only=True)
    group = state["optimizer"]["param_groups"][0]
    assert group["lr"] == 0.002 and group["weight_decay"] == 0
    assert state["hyperparameters"] == {"dropout": 0.25}
    code, _, err = cli("train", "--data", tiny, "--epochs", "3", "--checkpoint-dir", ck, "--resume", "--lr", "0.002",
                       "--weight-decay", "0", "--dropout", "0.25", *TINY, "--quiet")
    assert code == 0 and err == ""  # nothing changed, nothing said


def test_trainer_resume_keeps_its_own_optimizer_settings(tmp_path):
    graph = st.CSCGraph.from_edge_index(torch.randint(0, 40, (2, 300), generator=torch.Generator().manual_seed(1)), 40)
    loader = st.Loader(st.NeighborSampler(graph, [3]), torch.randn(40, 4), torch.arange(40) % 2, torch.arange(40),
                       batch_size=20)

    def trainer(lr, epochs, resume):
        model = st.GraphSAGE(4, 8, 2, num_layers=1)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        return st.Trainer(
            model,
            loader,
            optimizer,
            epochs=epochs,
            checkpoints=CheckpointSettings(tmp_path, resume=resume),
            report=ReportSettings(quiet=True),
            hyperparameters={"width": 8},
        )

    trainer(0.1, 1, False).fit()
    resumed = trainer(0.05, 2, True)
    resumed.fit()
    assert resumed.optimizer.param_groups[0]["lr"] == 0.05 and resumed.optimizer.param_groups[0]["momentum"] == 0.9
    assert resumed.changed_settings() == {"lr": (0.1, 0.05)}


def test_a_cache_larger_than_the_memory_available_is_one_line(cli, tiny, monkeypatch):
    # a cache larger than the table is capped at the table first (issue 48: 1e9 GiB over a small table trains)
    code, _, err = cli("train", "--data", tiny, "--cache-gb", "1e9", "--epochs", "1", *TINY, "--quiet")
    assert code == 0, err
    cgroup = "the cgroup memory limit (16 bytes, /sys/fs/cgroup/memory.max)"
    monkeypatch.setattr(plan, "available_host_memory", lambda: (16, cgroup))
    code, _, err = cli("train", "--data", tiny, "--cache-gb", "1.5", "--epochs", "1", *TINY, "--quiet")
    _one_line_error(code, err)
    assert "only 0.0 GiB are available (the cgroup memory limit" in err


def test_available_memory_is_bounded_by_meminfo_and_the_cgroup(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
    limit, usage, stat = tmp_path / "memory.max", tmp_path / "memory.current", tmp_path / "memory.stat"
    limit.write_text(f"{3 * 2**30}\n")
    usage.write_text(f"{2 * 2**30}\n")
    stat.write_text(f"anon 1\ninactive_file {2**29}\n")
    real_open = open
    paths = {"/proc/meminfo": meminfo, "/sys/fs/cgroup/memory.max": limit, "/sys/fs/cgroup/memory.current": usage,
             "/sys/fs/cgroup/memory.stat": stat}
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(paths.get(p, tmp_path / "absent"), *a, **k))
    cgroup = "the cgroup memory limit (3.0 GiB, /sys/fs/cgroup/memory.max)"
    assert host_memory.available_host_memory() == (2**30 + 2**29, cgroup)
    limit.write_text("max\n")
    assert host_memory.available_host_memory() == (4000000 * 1024, "MemAvailable in /proc/meminfo")


def test_train_help_names_every_default_and_the_real_cache_path(cli):
    code, out, _ = cli("train", "--help")
    assert code == 0
    text = " ".join(out.split())
    for flag, default in [("--batch-size", "default 1024"), ("--dropout", "default 0.5"), ("--seed", "default 0"),
                          ("--cache-gb", "default 0")]:
        assert re.search(re.escape(flag) + r" \S+ [^-]*" + re.escape(default), text), flag
    assert "auto (default) = full on graphs up to 100K nodes" in text and "XDG_CACHE_HOME" in text
    assert "~1.4x a step" in text and "~2x" not in text
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "--precision bf16   # bf16 autocast: ~1.4x a step" in readme
    assert "'cluster'" in " ".join(cli("preprocess", "--help")[1].split())


class _Terminal(io.StringIO):
    """A terminal that reports no size (``script``, some tmux panes): isatty, no usable file descriptor."""

    def isatty(self):
        return True

    def fileno(self):
        raise io.UnsupportedOperation("no fd")


def test_progress_bars_count_whole_batches_and_show_without_a_terminal_width(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with _progress.progress(12, "epoch 1/3", "batch") as bar:
        for _ in range(12):
            bar.update(1)
    shown = terminal.getvalue()
    assert "12/12" in shown and "0.00/" not in shown and "12.0" not in shown
    assert max(len(line.strip("\n")) for line in shown.split("\r")) <= _progress.FALLBACK_SIZE["ncols"]


def test_compile_notice_says_it_once_and_only_when_a_kernel_compiles(capsys):
    def fresh():  # a new function: nothing in memory or in Numba's cache
        return numba.njit(lambda a: a + 1)

    with _progress.compile_notice():
        first, second = fresh(), fresh()
        first(1), second(1.5)
    assert capsys.readouterr().err.count("compiling kernels for these settings (once per variant") == 1
    with _progress.compile_notice():
        first(2)  # compiled already
    with _progress.compile_notice(quiet=True):
        fresh()(1)
    assert capsys.readouterr().err == ""


def test_epoch_lines_format_each_field_one_way(cli, tiny):
    code, out, err = cli("train", "--data", tiny, "--epochs", "2", *TINY)
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2
    for line in lines:
        fields = dict(zip(line.split()[::2], line.split()[1::2]))
        assert re.fullmatch(r"\d+\.\d{2}", fields["seconds"]) and re.fullmatch(r"[\d,]+", fields["seeds_per_second"])
        for key in ("train_loss", "stall_fraction", "val_acc", "test_acc"):
            assert re.fullmatch(r"\d+\.\d{4}", fields[key]), (key, line)


def test_library_warnings_print_as_one_line_without_their_source(cli, tiny, tmp_path):
    ck = tmp_path / "ck"
    assert cli("train", "--data", tiny, "--epochs", "2", "--checkpoint-dir", ck, *TINY, "--quiet")[0] == 0
    newest = sorted(ck.glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:-10])  # damaged: the resume falls back to the previous one, with a warning
    proc = run_module("train", "--data", tiny, "--epochs", "2", "--checkpoint-dir", ck, "--resume", *TINY, "--quiet")
    err = proc.stderr  # a subprocess: pytest would capture the warning in-process
    assert proc.returncode == 0, err
    assert err.startswith("warning: ") and "falling back to the previous checkpoint" in err
    assert ".py:" not in err and "warnings.warn" not in err and len(err.strip().splitlines()) == 1


def test_preprocess_of_a_link_dataset_prints_no_torch_warning_and_no_none(tmp_path):
    edges = np.random.default_rng(0).integers(0, 300, (2, 3000))
    np.save(tmp_path / "e.npy", edges)
    proc = run_module("preprocess", "--edges", tmp_path / "e.npy", "--link-split", "0.8,0.1,0.1",
                      "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and "None" not in proc.stdout and "no labels" in proc.stdout


BUILTINS = ("ValueError", "TypeError", "RuntimeError", "KeyError", "IndexError", "FloatingPointError")


def test_deliberate_errors_are_sparsetrain_errors():
    root = Path(st.__file__).resolve().parent
    bare = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                if node.exc.func.id in BUILTINS:
                    bare.append(f"{rel}:{node.lineno}")
    assert bare == [], f"raise a sparsetrain.errors subclass instead: {bare}"
