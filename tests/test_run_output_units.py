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


class _TypeStore:
    """A partitioned store's counters (what the epoch line reads of a PartitionedFeatures)."""

    def __init__(self, hits: int, misses: int, exchanged: int) -> None:
        from sparsetrain.storage.base import GatherStats

        self.stats, self.bytes_exchanged = GatherStats(hits=hits, misses=misses), exchanged

    def add(self, hits: int, misses: int, exchanged: int) -> None:
        self.stats.hits += hits
        self.stats.misses += misses
        self.bytes_exchanged += exchanged


def test_a_typed_partitioned_epoch_shows_the_hit_rate_and_exchange_summed_over_node_types():
    """A typed part has a store per node type (a dict): the epoch record's hit rate and kilobytes per step are those
    of all its types together, counted from the epoch's start (the cache filling before it left out)."""
    from sparsetrain.engine.trainer import _FeatureReads

    stores = {"paper": _TypeStore(5, 5, 40_000), "author": _TypeStore(0, 0, 10_000)}  # before the epoch
    reads = _FeatureReads(stores)
    assert reads.shown
    stores["paper"].add(3, 1, 6_000)  # two steps: 3 + 1 hits of 3 + 1 + 1 + 3 distinct remote rows, 10 kB exchanged
    stores["author"].add(1, 3, 4_000)
    reads.postfix()
    reads.postfix()
    totals = reads.totals()
    assert totals["hit_rate"] == 0.5 and totals["net_mb"] == 0.01 and totals["net_kb_per_step"] == 5.0
    assert not _FeatureReads({"paper": object()}).shown  # a dict of other stores: no exchange to show
