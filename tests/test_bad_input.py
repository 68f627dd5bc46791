"""Bad input exits non-zero with one line naming the file and the fix, and never touches the target."""

import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparsetrain as st
from sparsetrain.errors import DatasetError
from tests.conftest import run_module


def _write(path, text):
    path.write_text(text)
    return path


@pytest.fixture
def files(tmp_path):
    d = tmp_path
    f = {}
    f["ok"] = _write(d / "ok.csv", "src,dst\n0,1\n1,2\n2,3\n3,0\n")
    f["neg"] = _write(d / "neg.csv", "0,1\n1,2\n2,-1\n")
    f["big"] = _write(d / "big.csv", "0,1\n1,2\n2,9\n")
    f["nonnum"] = _write(d / "nonnum.csv", "src,dst\n0,1\n1,abc\n")
    f["empty"] = _write(d / "empty.csv", "")
    f["header_only"] = _write(d / "header_only.csv", "src,dst\n")
    np.save(f.setdefault("float_edges", d / "float_edges.npy"), np.array([[0.5, 1], [1, 2]]))
    np.save(f.setdefault("f_ok", d / "f_ok.npy"), np.ones((4, 3), np.float32))
    np.save(f.setdefault("f_short", d / "f_short.npy"), np.ones((3, 3), np.float32))
    nan = np.ones((4, 3), np.float32)
    nan[2, 1] = np.nan
    np.save(f.setdefault("f_nan", d / "f_nan.npy"), nan)
    f["f_inf"] = _write(d / "f_inf.csv", "1,2,3\n1,inf,3\n1,2,3\n1,2,3\n")
    f["f_text"] = _write(d / "f_text.csv", "1,2,3\n1,2,3\n1,x,3\n1,2,3\n")
    np.save(f.setdefault("l_ok", d / "l_ok.npy"), np.array([0, 1, 1, 2]))
    np.save(f.setdefault("l_range", d / "l_range.npy"), np.array([0, 1, 5, 2]))
    np.save(f.setdefault("l_neg", d / "l_neg.npy"), np.array([0, -2, 1, 2]))
    pq.write_table(pa.table({"label": [0.0, 1.0, 1.5, 2.0]}), f.setdefault("l_frac", d / "l_frac.parquet"))
    np.save(f.setdefault("tr", d / "tr.npy"), np.array([0, 1]))
    np.save(f.setdefault("va", d / "va.npy"), np.array([1, 2]))
    np.save(f.setdefault("va_ok", d / "va_ok.npy"), np.array([2]))
    np.save(f.setdefault("te_ok", d / "te_ok.npy"), np.array([3]))
    np.save(f.setdefault("te_range", d / "te_range.npy"), np.array([3, 7]))
    np.save(f.setdefault("te_dup", d / "te_dup.npy"), np.array([3, 3]))
    return f


BAD = {
    "negative id": (["--edges", "neg"], ["neg.csv", "line 3", "-1"]),
    "id >= num_nodes": (["--edges", "big", "--num-nodes", "4"], ["big.csv", "line 3", "9", "--num-nodes"]),
    "non-numeric field": (["--edges", "nonnum"], ["nonnum.csv", "line 3", "abc"]),
    "empty file": (["--edges", "empty"], ["empty.csv", "empty"]),
    "no edges": (["--edges", "header_only"], ["header_only.csv", "no edges"]),
    "float ids": (["--edges", "float_edges"], ["float_edges.npy", "integers"]),
    "feature rows != num_nodes": (
        ["--edges", "ok", "--features", "f_short", "--num-nodes", "4"],
        ["f_short.npy", "3 rows", "4 nodes"],
    ),
    "NaN feature": (["--edges", "ok", "--features", "f_nan"], ["f_nan.npy", "row 2", "column 1", "nan"]),
    "inf feature": (["--edges", "ok", "--features", "f_inf"], ["f_inf.csv", "line 2", "inf"]),
    "text feature": (["--edges", "ok", "--features", "f_text"], ["f_text.csv", "line 3", "'x'"]),
    "label out of range": (
        ["--edges", "ok", "--labels", "l_range", "--num-classes", "3"],
        ["l_range.npy", "row 2", "5", "[0, 3)"],
    ),
    "negative label": (["--edges", "ok", "--labels", "l_neg"], ["l_neg.npy", "row 1", "-2", "-1: no label"]),
    "fractional label": (["--edges", "ok", "--labels", "l_frac"], ["l_frac.parquet", "row 2", "1.5"]),
    "overlapping splits": (
        ["--edges", "ok", "--labels", "l_ok", "--train-idx", "tr", "--val-idx", "va", "--test-idx", "te_ok"],
        ["va.npy", "node 1", "train"],
    ),
    "split id out of range": (
        ["--edges", "ok", "--labels", "l_ok", "--train-idx", "tr", "--val-idx", "va_ok", "--test-idx", "te_range"],
        ["te_range.npy", "7"],
    ),
    "split repeats a node": (
        ["--edges", "ok", "--labels", "l_ok", "--train-idx", "tr", "--val-idx", "va_ok", "--test-idx", "te_dup"],
        ["te_dup.npy", "3"],
    ),
    "missing file": (["--edges", "nope"], ["nope", "no such file"]),
}


def _argv(spec, files, tmp_path):
    return [str(files[a]) if a in files else (str(tmp_path / a) if a == "nope" else a) for a in spec]


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_clear_line_and_writes_nothing(cli, files, tmp_path, case):
    spec, expected = BAD[case]
    out = tmp_path / "out"
    code, stdout, stderr = cli("preprocess", *_argv(spec, files, tmp_path), "--out", out, "--quiet")
    assert code != 0
    assert "Traceback" not in stderr
    message = stderr.strip()
    assert message.startswith("error: ") and "\n" not in message
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temp folder left


def test_bad_input_leaves_an_existing_dataset_untouched(cli, files, tmp_path):
    out = tmp_path / "out"
    assert cli("preprocess", "--edges", files["ok"], "--labels", files["l_ok"], "--out", out, "--quiet")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, stderr = cli(
        "preprocess", "--edges", files["ok"], "--features", files["f_nan"], "--out", out, "--overwrite", "--quiet"
    )
    assert code != 0 and "f_nan.npy" in stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    st.datasets.load(out, verify=True)


def test_existing_output_needs_overwrite(cli, files, tmp_path):
    out = tmp_path / "out"
    assert cli("preprocess", "--edges", files["ok"], "--out", out, "--quiet")[0] == 0
    code, _, stderr = cli("preprocess", "--edges", files["big"], "--out", out, "--quiet")
    assert code != 0 and "--overwrite" in stderr
    assert st.datasets.load(out).num_nodes == 4
    assert cli("preprocess", "--edges", files["big"], "--out", out, "--overwrite", "--quiet")[0] == 0
    assert st.datasets.load(out, verify=True).num_nodes == 10


def test_overwrite_refuses_a_folder_that_is_not_a_dataset(cli, files, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    code, _, stderr = cli("preprocess", "--edges", files["ok"], "--out", out, "--overwrite", "--quiet")
    assert code != 0 and "not a sparsetrain dataset" in stderr
    assert (out / "precious.txt").read_text() == "keep me"


@pytest.fixture
def small_dataset(tmp_path):
    return st.datasets.synthesize(tmp_path / "ds", 200, 2000, feature_dim=8, num_classes=4, quiet=True).path


def test_one_altered_byte_is_caught_by_verify(small_dataset, cli):
    path = small_dataset / "indices.npy"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))
    st.datasets.load(small_dataset)  # shapes still match: only the checksum can tell
    with pytest.raises(DatasetError, match="indices.npy"):
        st.datasets.load(small_dataset, verify=True)
    code, stdout, _ = cli("info", small_dataset)
    assert code != 0 and "MISMATCH: indices.npy" in stdout


def test_truncated_array_is_caught_on_load(small_dataset, cli):
    path = small_dataset / "features.npy"
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 100)
    with pytest.raises(DatasetError, match="features.npy"):
        st.datasets.load(small_dataset)
    code, _, stderr = cli("info", small_dataset)
    assert code != 0 and "features.npy" in stderr and "Traceback" not in stderr


def test_not_a_dataset(tmp_path, cli):
    with pytest.raises(DatasetError, match="meta.json"):
        st.datasets.load(tmp_path)
    (tmp_path / "meta.json").write_text("{broken")
    with pytest.raises(DatasetError, match="not valid JSON"):
        st.datasets.load(tmp_path)


def test_user_errors_print_no_traceback_from_the_shell(files, tmp_path):
    result = run_module("preprocess", "--edges", files["neg"], "--out", tmp_path / "out")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "neg.csv" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_interrupted_run_leaves_no_half_dataset(tmp_path, sig):
    out = tmp_path / "big"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "sparsetrain", "synth", "--nodes", "400000", "--edges", "8000000", "--out",
            str(out),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not list(tmp_path.glob(".big.tmp-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert not out.exists()
    if sig == signal.SIGTERM:  # clean exit: temp folder removed, no traceback
        assert not list(tmp_path.glob(".big.tmp-*"))
        assert "Traceback" not in stderr
    # the next run removes what a killed run left, and succeeds
    st.datasets.synthesize(out, 1000, 8000, feature_dim=4, num_classes=3, quiet=True)
    assert not list(tmp_path.glob(".big.tmp-*"))
    assert st.datasets.load(out, verify=True).num_edges == 8000


@pytest.mark.parametrize(
    "flag, value",
    [("--epochs", "0"), ("--batch-size", "-4"), ("--hidden", "0"), ("--lr", "nan"), ("--lr", "0"),
     ("--weight-decay", "-1e-4"), ("--dropout", "1"), ("--dropout", "abc"), ("--cache-gb", "-1"), ("--cache-gb", "inf"),
     ("--checkpoint-every", "-2")],
)
def test_train_rejects_out_of_range_numbers_before_loading_data(cli, tmp_path, flag, value):
    code, stdout, stderr = cli("train", "--data", tmp_path / "never-read", f"{flag}={value}", "--quiet")
    assert code == 1 and len(stderr.splitlines()) == 1 and "usage:" not in stderr
    assert f"argument {flag}" in stderr and repr(value) in stderr and "Traceback" not in stderr


def test_nan_split_fraction_is_a_clear_error(cli, files, tmp_path):
    code, _, stderr = cli(
        "preprocess",
        "--edges",
        files["ok"],
        "--labels",
        files["l_ok"],
        "--split=nan,0.2,0.2",
        "--out",
        tmp_path / "out",
        "--quiet",
    )
    assert code != 0 and "split fractions" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()
