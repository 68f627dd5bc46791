"""What ``sparsetrain train`` checks of a dataset folder before it reads a batch from it.

Opening a dataset checks each file's header against ``meta.json``; a file edited in place after
import (a NaN written into ``features.npy``) keeps its header. So before training, cheaply:
every file's size is the one its header promises, the files up to ``SMALL_FILE_BYTES`` (labels,
splits, the features and graph of small datasets) match their recorded sha256, every id in the graph's
``indices`` and every label is in bounds (one vectorised min/max each, so a re-signed folder that
``sparsetrain info`` refuses is refused here too), the labels of the split nodes are classes, val and
test hold nodes, a link task's val/test edges exist, have negatives and join node ids, and a temporal run's node and
edge times are finite (one vectorised pass each: a NaN time would silently drop every neighbor). ``--verify`` checks
the sha256 of every file and the structure (a full read). Larger files are then guarded per batch: the fetch stage
checks every gathered batch of features for NaN and inf (:func:`~sparsetrain.engine.stages.fetch.check_finite`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets import load
from sparsetrain.datasets.checks import (
    SMALL_FILE_BYTES,
    check_eval_splits,
    check_files,
    check_range,
    check_split_labels,
)
from sparsetrain.datasets.dataset import verify_edge_splits
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.graph import CSCGraph

_CHUNK = 1 << 24
_REIMPORT = "the file changed after import; re-run `sparsetrain preprocess` (`sparsetrain info DIR` checks every file)"


def check_graph_ids(graph: CSCGraph) -> None:
    """Every entry of the graph's ``indices`` is a node id of its edge type's source type: one vectorised min/max per
    edge type over the mapped file (a products-scale graph, 124M int32 ids: 0.02 s from the page cache, 0.4 s from
    disk), so an id the sampler would never draw is refused too. Raises
    :class:`~sparsetrain.errors.DatasetError` naming the first bad entry as ``sparsetrain info`` does."""
    graph.check_files()
    layout = graph.type_layout
    starts = graph.indptr[torch.tensor(layout.col_offset)].tolist()
    for k, et in enumerate(layout.edge_types):
        start, end, count = starts[k], starts[k + 1], layout.num_nodes[et[0]]
        ids = graph.indices[start:end]
        if len(ids) == 0:
            continue
        low, high = torch.aminmax(ids)
        if int(low) < 0 or int(high) >= count:
            check_range(Path(graph.source("indices")), ids.numpy(), 0, count, fmt.node_word(et[0]), _CHUNK,
                        graph.check_files, first=start)


def check_label_values(ds) -> None:
    """Every stored label is a class of its node type or -1 (unlabelled), as ``sparsetrain info`` checks: one min/max
    over labels already in memory."""
    for node_type, entry in (ds.meta.get("labels") or {}).items():
        labels = ds.labels_by_type.get(node_type)
        if labels is None or labels.numel() == 0:
            continue
        low, high = torch.aminmax(labels)
        if int(low) < -1 or int(high) >= entry["num_classes"]:
            check_range(ds.path / entry["file"], labels.numpy(), -1, entry["num_classes"], "label", _CHUNK)


def check_link_splits(ds) -> None:
    """A link-prediction dataset has train, val and test edges, val and test with negatives to rank against, and
    every edge joins two node ids of the graph; raises :class:`~sparsetrain.errors.DatasetError` naming the file (or
    meta.json) and the fix."""
    splits, entries = ds.edge_split, ds.meta.get("link_split") or {}
    if not splits:
        raise DatasetError(f"{ds.path}: --task link needs link splits; re-import with "
                           "`sparsetrain preprocess ... --link-split 0.85,0.05,0.10`")
    for name in fmt.LINK_SPLIT_NAMES:
        if name not in splits:
            raise DatasetError(f"{ds.path / 'meta.json'}: lists no {name!r} link split (training evaluates on val "
                               "and test); re-run `sparsetrain preprocess ... --link-split`")
        split, entry = splits[name], entries[name]
        if split.pos.shape[1] == 0:
            raise DatasetError(f"{ds.path / entry['pos']}: holds no {name} edges; re-run `sparsetrain preprocess` "
                               "with larger --link-split fractions (or a larger graph)")
        if name != "train" and (split.neg is None or split.neg.shape[1] == 0):
            where = ds.path / (entry.get("neg") or "meta.json")
            raise DatasetError(f"{where}: no {name} negatives to rank the {name} edges against; re-run "
                               "`sparsetrain preprocess` with --link-negatives of at least 1")
    verify_edge_splits(ds)


def check_times(folder: Path, meta: dict) -> None:
    """Every stored node and edge time is finite, as ``sparsetrain info`` checks: one vectorised pass per time array
    (float times only; integer times are always finite). Raises :class:`~sparsetrain.errors.DatasetError` naming the
    file and the first bad entry."""
    names = [*meta.get("node_time", {}).values(), *(entry.get("time") for entry in meta["edge_types"])]
    for name in filter(None, names):
        times = fmt.open_array(folder, name, meta)
        if times.dtype.kind != "f":
            continue
        for lo in range(0, len(times), _CHUNK):
            part = times[lo : lo + _CHUNK]
            bad = ~np.isfinite(part)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise DatasetError(f"{folder / name}: entry {lo + i} is {part[i]}, times must be finite; {_REIMPORT}")


def check_for_training(ds, *, verify: bool = False, task: str = "node", target_type: str | None = None,
                       times: bool = False) -> None:
    """All of the above for a dataset about to be trained on (``times``: a temporal run, whose times are checked);
    ``verify``: every file's sha256 and the structure instead of the small files' and the bounds of ids, labels and
    times (:func:`~sparsetrain.datasets.load` with ``verify=True``)."""
    if verify:
        load(ds.path, verify=True)
    else:
        check_files(ds.path, ds.meta, SMALL_FILE_BYTES)  # this module's (tests lower it)
        check_graph_ids(ds.graph)
    if task == "link":
        check_link_splits(ds)
    else:  # the split of the node type trained on, when training uses the dataset's
        target = target_type or ds.target_type
        if target == ds.target_type and target in ds.labels_by_type and ds.split:
            check_eval_splits(ds.path, ds.split)
            where = str(ds.path / ds.meta["labels"][target]["file"])
            where += fmt.of_node_type(target, ", ")
            check_split_labels(where, ds.labels_by_type[target], ds.split, ds.num_classes)
    if not verify:
        check_label_values(ds)  # after the split's check, which names the train/val/test nodes
        if times:
            check_times(ds.path, ds.meta)
