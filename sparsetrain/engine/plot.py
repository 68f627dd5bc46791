"""``sparsetrain plot RUN``: a run's loss and metric curves from its metrics log, drawn to a PNG with matplotlib.

matplotlib is an optional package (``pip install matplotlib``, or the ``plot`` extra), imported only here.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from sparsetrain.datasets.outputs import check_output_path
from sparsetrain.engine.run_log import read_log
from sparsetrain.errors import BackendError, SettingError

LOG_SUFFIXES = (".jsonl", ".json", ".csv")


def find_log(run: Path) -> Path:
    """The metrics log ``run`` names: the file itself, or a folder's one ``*.jsonl`` (else its one ``*.csv``)."""
    if not run.exists():
        raise FileNotFoundError(2, "no such file or folder", str(run))
    if run.is_file():
        return run
    for pattern in ("*.jsonl", "*.csv"):
        found = sorted(run.glob(pattern))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(p.name for p in found[:4])
            raise SettingError(f"plot {run}: the folder holds {len(found)} metrics logs ({names}); name one")
    raise SettingError(f"plot {run}: no metrics log (*.jsonl or *.csv) in the folder; train with --metrics-log "
                       "FILE.jsonl and plot that file")


def _number(text: str):
    if text == "":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_records(log: Path) -> list[dict]:
    """A metrics log's records: JSON lines, or the CSV twin (empty cells left out)."""
    try:
        if log.suffix == ".csv":
            with open(log, encoding="utf-8", newline="") as f:
                return [{k: _number(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]
        records = read_log(log)
    except (ValueError, UnicodeDecodeError, csv.Error) as exc:
        raise SettingError(f"plot {log}: not a metrics log ({str(exc).splitlines()[0]}); give the file "
                           "`train --metrics-log` wrote") from None
    for line, record in enumerate(records, 1):
        if not isinstance(record, dict):
            raise SettingError(f"plot {log}: record {line} is a {type(record).__name__}, not a JSON object; not a "
                               "metrics log: give the file `train --metrics-log` wrote")
    return records


def curves(records: list[dict]) -> dict[str, tuple[list, list]]:
    """The plotted series by name, each ``(steps, values)``: ``loss`` of every step, and each number of the epoch
    records (``train_loss``, ``val_*``, ``test_*``) at its epoch's last step."""
    series: dict[str, tuple[list, list]] = {}
    for record in records:
        step = record.get("step")
        is_epoch = "train_loss" in record or any(k.startswith("val_") for k in record)
        for key, value in record.items():
            if key in ("step", "epoch") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if key == "loss" or (is_epoch and (key == "train_loss" or key.startswith(("val_", "test_")))):
                xs, ys = series.setdefault(key, ([], []))
                xs.append(step)
                ys.append(value)
    return series


def plot_run(run: Path, out: Path | None = None) -> Path:
    """Draw ``run``'s curves (a metrics log, or a folder holding one) to the PNG ``out`` (default: the log's name
    with ``.png``): the losses on the left, the validation and test metrics on the right, against the step."""
    log = find_log(run)
    out = log.with_suffix(".png") if out is None else Path(out)
    if out.suffix.lower() != ".png":
        raise SettingError(f"plot --out {out}: the picture is a PNG; give a file name ending in .png")
    check_output_path("--out", out, inputs=(log,))
    if out.is_dir():
        raise SettingError(f"plot --out {out}: is a folder; give a file name ending in .png")
    series = curves(read_records(log))
    if not series:
        raise SettingError(f"plot {log}: the log holds no loss or metric yet; plot it after a step")
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise BackendError("sparsetrain plot needs matplotlib: `pip install matplotlib` (or `pip install "
                           "sparsetrain[plot]`)") from None
    losses = {k: v for k, v in series.items() if k in ("loss", "train_loss")}
    metrics = {k: v for k, v in series.items() if k not in losses}
    fig, axes = plt.subplots(1, 2 if metrics else 1, figsize=(11 if metrics else 6, 4), squeeze=False)
    for name, (xs, ys) in losses.items():
        axes[0][0].plot(xs, ys, label=name, marker="" if name == "loss" else "o", markersize=3)
    axes[0][0].set(xlabel="step", ylabel="loss", title="loss")
    axes[0][0].legend()
    if metrics:
        for name, (xs, ys) in metrics.items():
            axes[0][1].plot(xs, ys, label=name, marker="o", markersize=3)
        axes[0][1].set(xlabel="step", title="metrics")
        axes[0][1].legend()
    fig.suptitle(log.name)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        fig.savefig(tmp, format="png", dpi=100)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return out
