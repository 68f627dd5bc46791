"""What a run prints about its feature reads: units that fit, and nothing about a tier the run did not have."""

from __future__ import annotations

from sparsetrain.engine.cli import _print_summary
from sparsetrain.engine.trainer import _fmt

BASE = {"test_acc": 0.79, "val_acc": 0.77, "best_epoch": 3, "epochs": 3, "seconds": 4.6}


def test_a_partitioned_runs_summary_names_the_exchange_not_the_disk(capsys):
    _print_summary({**BASE, "hit_rate": 0.193, "net_mb": 21.634})
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == "features: cache hit rate 19.3%, 21.6 MB exchanged with other ranks (training and evaluation)"


def test_a_disk_runs_summary_names_the_megabytes_read(capsys):
    _print_summary({**BASE, "hit_rate": 0.5, "disk_mb": 1234.4})
    assert capsys.readouterr().out.splitlines()[-1] == "features: cache hit rate 50.0%, 1,234 MB read from disk"


def test_epoch_lines_show_kilobytes_and_megabytes_as_such():
    assert _fmt("net_kb_per_step", 1349.2) == "1,349" and _fmt("net_mb", 1.3456) == "1.3"
    assert _fmt("val_acc", 0.7) == "0.7000"
