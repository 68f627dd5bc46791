"""A run's records where users read them: the JSON-lines metrics log, its CSV twin and TensorBoard event files.

The JSON-lines log (``--metrics-log``) is the record; the CSV beside it (the log's name with ``.csv``) is rewritten from
it, atomically, after every epoch and when the run ends, so the two always hold the same records (a resumed run's
trimmed log gives a trimmed CSV). TensorBoard (``--tensorboard DIR``) receives every number of each record as a scalar
of the same name at the record's step; ``tensorboard`` is an optional package, imported only when asked for.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

from sparsetrain.errors import BackendError

NOT_SCALARS = ("step", "epoch")
"""Record fields never written as TensorBoard scalars: ``step`` is the x axis, and ``epoch`` counts from 0 in a step's
record and from 1 in its epoch's record (both at the epoch's last step)."""


def csv_beside(log: Path) -> Path:
    """The CSV twin of the metrics log ``log``: its name with ``.csv`` for its suffix (``runs/m.jsonl`` ->
    ``runs/m.csv``)."""
    return log.with_suffix(".csv")


def foreign_csv(log: Path) -> Path | None:
    """The CSV twin of ``log`` when a file of that name exists and is not one (its header does not start with the
    records' ``step`` column): a file the run would replace, so :func:`~sparsetrain.engine.plan.check_outputs`
    refuses it; None when the name is free or holds a twin."""
    twin = csv_beside(log)
    if not twin.exists():
        return None
    if twin.is_dir():
        return twin
    try:
        with open(twin, "rb") as f:
            head = f.read(5)
    except OSError:
        return twin
    return None if head in (b"", b"step,", b"step\n") else twin


def read_log(path: Path) -> list[dict]:
    """The records of a JSON-lines metrics log, in order (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value) if not isinstance(value, float) else repr(value)


def csv_text(records: list[dict]) -> str:
    """``records`` as CSV, Lightning's ``CSVLogger`` layout: a header of every field in the order first seen, one row
    a record, an empty cell where a record lacks a field (or holds None); floats as ``repr`` (they read back exactly),
    lists and dicts as JSON."""
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow([_cell(record.get(column)) for column in columns])
    return out.getvalue()


def write_csv(log: Path, out: Path | None = None) -> Path:
    """Rewrite the CSV twin of the metrics log ``log`` (``out``, default :func:`csv_beside`) from it, atomically."""
    out = csv_beside(log) if out is None else out
    text = csv_text(read_log(log)) if log.is_file() else ""
    tmp = out.with_name(out.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except OSError as exc:  # a write's error may name no file: name the CSV
        raise OSError(exc.errno, exc.strerror or str(exc), str(out)) from None
    return out


def summary_writer_class():
    """torch's ``SummaryWriter``, or a one-line :class:`BackendError` naming ``pip install tensorboard``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise BackendError("--tensorboard needs the tensorboard package: `pip install tensorboard` (or "
                           "`pip install sparsetrain[tensorboard]`), or drop --tensorboard") from None
    return SummaryWriter


class TensorBoardLog:
    """Every number of each record as a TensorBoard scalar of the same name at the record's ``step``.

    ``purge_step``: a resumed run's step; TensorBoard's reader drops the earlier events at that step and later (the
    steps the resumed run redoes), as the metrics log's lines after the checkpoint are dropped."""

    def __init__(self, folder: Path, purge_step: int | None = None) -> None:
        writer_class = summary_writer_class()
        folder.mkdir(parents=True, exist_ok=True)
        self.writer = writer_class(log_dir=str(folder), purge_step=purge_step or None)

    def add(self, record: dict) -> None:
        """Write ``record``'s numbers (not ``step``/``epoch``, not None or text) at its step."""
        step = record.get("step")
        for key, value in record.items():
            if key in NOT_SCALARS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                self.writer.add_scalar(key, value, global_step=step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
