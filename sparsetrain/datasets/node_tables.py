"""Node tables into a dataset folder: one node type's features and labels streamed into their (possibly permuted)
rows, and the target type's splits read or drawn. Every bad row is one error naming the file, the row and the fix."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from sparsetrain._progress import progress
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.readers import first_non_integer
from sparsetrain.datasets.sources import Source
from sparsetrain.datasets.writer import DatasetWriter
from sparsetrain.errors import DatasetError


def _rows_in_chunks(source: Source, num_nodes: int, nodes_from: str) -> Iterator[tuple[int, np.ndarray]]:
    """(first_row, chunk) pairs, checking the total row count against ``num_nodes``."""
    row = 0
    for chunk in source.chunks():
        if row + len(chunk) > num_nodes:
            raise DatasetError(f"{source.name}: has more than {num_nodes} rows but the graph has {num_nodes} nodes "
                               f"({nodes_from}); one row per node (fix the file or --num-nodes)")
        yield row, chunk
        row += len(chunk)
    if row != num_nodes:
        raise DatasetError(f"{source.name}: has {row} rows but the graph has {num_nodes} nodes ({nodes_from}); one row "
                           "per node is required (fix the file or --num-nodes)")


def _put_rows(out, first: int, rows: np.ndarray, inverse: np.ndarray | None) -> None:
    """Rows ``first...`` of the imported order into ``out`` (an :class:`ArrayFile`), through ``inverse`` when
    reordered."""
    if inverse is None:
        out.write_rows(first, rows)
        return
    targets = inverse[first : first + len(rows)]
    order = np.argsort(targets, kind="stable")
    targets, rows = targets[order], rows[order]
    breaks = np.flatnonzero(np.diff(targets) != 1) + 1
    for lo, hi in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(targets)]]), strict=True):
        out.write_rows(int(targets[lo]), rows[lo:hi])


def _all_finite(values: np.ndarray) -> bool:
    """``np.isfinite(values).all()``; on float16 by the exponent bits, which is many times faster."""
    if values.dtype == np.float16:
        return not ((values.view(np.uint16) & 0x7C00) == 0x7C00).any()
    return bool(np.isfinite(values).all())


def write_features(writer: DatasetWriter, source: Source, num_nodes: int, nodes_from: str, inverse: np.ndarray | None,
                   feature_dtype: str, name: str, quiet: bool = False) -> int:
    """Stream one node type's feature rows into ``name`` (rows through ``inverse`` when reordered), checked; returns the
    width."""
    dtype = np.dtype(feature_dtype)
    out = None
    try:
        with progress(num_nodes, "features", "row", quiet) as bar:
            for first, chunk in _rows_in_chunks(source, num_nodes, nodes_from):
                chunk = np.asarray(chunk)
                if chunk.ndim != 2:
                    chunk = chunk.reshape(len(chunk), -1)
                if out is None:
                    if chunk.shape[1] == 0:
                        raise DatasetError(f"{source.name}: feature rows have no columns; give at least one feature "
                                           "per node")
                    out = writer.stream_array(name, (num_nodes, chunk.shape[1]), dtype)
                elif chunk.shape[1] != out.shape[1]:
                    raise DatasetError(f"{source.name}: {source.where(first)} has {chunk.shape[1]} features, earlier "
                                       f"rows {out.shape[1]}; all rows need the same width")
                values = chunk.astype(dtype, copy=False)
                if not _all_finite(values):
                    finite = np.isfinite(values)
                    row, col = (int(i[0]) for i in np.nonzero(~finite))
                    raw = chunk[row, col]
                    hint = (f"it overflows {dtype}; use feature dtype float32" if np.isfinite(raw)
                            else "replace NaN/inf features (e.g. with 0) before importing")
                    raise DatasetError(f"{source.name}: {source.where(first + row)}, column {col}: {raw} is not a "
                                       f"finite number; {hint}")
                _put_rows(out, first, values, inverse)
                bar.update(len(values))
    finally:
        if out is not None:
            out.close()
    return int(out.shape[1])


# Without --num-classes the class count is the largest label + 1, as long as that is not far beyond
# the labels in use: a lone typo (label 10**9) must not size a model's output layer.
_SPARE_CLASSES = 64


def write_labels(writer: DatasetWriter, source: Source, num_nodes: int, nodes_from: str, inverse: np.ndarray | None,
                 num_classes: int | None, name: str) -> tuple[int, np.ndarray]:
    """Write one node type's labels (-1 or NaN: no label, stored -1) into ``name``; returns the class count and which
    nodes (new ids) have none."""
    with writer.stream_array(name, (num_nodes,), np.int64) as out:
        unlabelled = np.zeros(num_nodes, dtype=np.bool_)
        num_classes = _stream_labels(source, num_nodes, nodes_from, inverse, num_classes, out, unlabelled)
    return num_classes, unlabelled


def _stream_labels(source: Source, num_nodes: int, nodes_from: str, inverse: np.ndarray | None, num_classes: int | None,
                   out, unlabelled: np.ndarray) -> int:
    highest, highest_row = -1, 0
    # which labels occur; never longer than 2 * num_nodes + _SPARE_CLASSES, beyond that a label is refused outright
    used = np.zeros(0, dtype=np.bool_)

    def too_many_classes() -> DatasetError:
        return DatasetError(
            f"{source.name}: {source.where(highest_row)}: label {highest} would make {highest + 1} classes, far more "
            f"than the distinct labels in use; fix the label, or pass --num-classes {highest + 1} if there really are "
            "that many classes"
        )

    for first, chunk in _rows_in_chunks(source, num_nodes, nodes_from):
        values = _integers(source, _nan_as_unlabelled(np.asarray(chunk).reshape(-1)), first, "labels")
        bad = (values < -1) if num_classes is None else ((values < -1) | (values >= num_classes))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            bounds = ">= 0" if num_classes is None else f"in [0, {num_classes})"
            allowed = f"must be {bounds} (or -1: no label)"
            raise DatasetError(f"{source.name}: {source.where(first + row)}: label {values[row]} {allowed}; fix the "
                               "label or pass the right --num-classes")
        if len(values):
            top = int(np.argmax(values))
            if values[top] > highest:
                highest, highest_row = int(values[top]), first + top
            if num_classes is None:
                if highest + 1 > 2 * num_nodes + _SPARE_CLASSES:
                    raise too_many_classes()
                if highest + 1 > len(used):
                    used = np.concatenate([used, np.zeros(highest + 1 - len(used), dtype=np.bool_)])
                used[values[values >= 0]] = True
        _put_rows(out, first, values, inverse)
        missing = np.flatnonzero(values < 0) + first
        unlabelled[missing if inverse is None else inverse[missing]] = True
    if highest < 0:
        raise DatasetError(f"{source.name}: no node has a label (all are -1 or NaN); give some nodes a label, or "
                           "import without labels")
    if num_classes is not None:
        return num_classes
    if highest + 1 > 2 * int(used.sum()) + _SPARE_CLASSES:
        raise too_many_classes()
    return highest + 1


def _nan_as_unlabelled(values: np.ndarray) -> np.ndarray:
    """The one rule of every import: a node without a label is -1 or NaN (as OGB writes it); NaN becomes -1."""
    if values.dtype.kind == "f":
        return np.where(np.isnan(values), -1.0, values)
    return values


def _integers(source: Source, values: np.ndarray, first: int, what: str) -> np.ndarray:
    bad = first_non_integer(values)
    if bad is not None:
        raise DatasetError(f"{source.name}: {source.where(first + bad)}: {values[bad]} is not an integer; {what} must "
                           "be whole numbers")
    return values.astype(np.int64, copy=False)


def read_splits(splits: dict[str, Source], num_nodes: int, unlabelled: np.ndarray | None) -> dict[str, np.ndarray]:
    """Split node ids, checked: in range, labelled, in no other split, never twice."""
    owner = np.full(num_nodes, -1, dtype=np.int8)
    result = {}
    for k, (name, source) in enumerate(splits.items()):
        parts = []
        row = 0
        for chunk in source.chunks():
            ids = _integers(source, np.asarray(chunk).reshape(-1), row, "split node ids")
            bad = (ids < 0) | (ids >= num_nodes)
            if bad.any():
                at = int(np.flatnonzero(bad)[0])
                raise DatasetError(f"{source.name}: {source.where(row + at)}: node id {ids[at]} is out of range [0, "
                                   f"{num_nodes}); fix the {name} split")
            taken = owner[ids]
            clash = taken >= 0
            if clash.any():
                at = int(np.flatnonzero(clash)[0])
                other = list(splits)[taken[at]]
                what = "twice" if other == name else f"also in the {other} split"
                raise DatasetError(f"{source.name}: {source.where(row + at)}: node {ids[at]} is {what}; splits must "
                                   "not overlap or repeat nodes")
            if unlabelled is not None and unlabelled[ids].any():
                at = int(np.flatnonzero(unlabelled[ids])[0])
                raise DatasetError(f"{source.name}: {source.where(row + at)}: node {ids[at]} has no label (-1 or NaN); "
                                   f"a {name} node needs one, fix its label or drop it from the split")
            owner[ids] = k
            # a duplicate inside one chunk escapes the check above
            if len(np.unique(ids)) != len(ids):
                values, counts = np.unique(ids, return_counts=True)
                raise DatasetError(f"{source.name}: node {values[counts > 1][0]} is listed twice in the {name} split; "
                                   "splits must not repeat nodes")
            parts.append(ids)
            row += len(ids)
        result[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return result


def random_split(num_nodes: int, unlabelled: np.ndarray, fractions: tuple[float, float, float],
                 seed: int) -> dict[str, np.ndarray]:
    """Split the labelled nodes at random by ``fractions`` of their number."""
    perm = np.random.default_rng(seed).permutation(num_nodes)
    if unlabelled.any():
        perm = perm[~unlabelled[perm]]
    labelled = len(perm)
    sizes = [int(round(f * labelled)) for f in fractions]
    bounds = np.minimum(np.cumsum([0, *sizes]), labelled)
    return {name: perm[bounds[i] : bounds[i + 1]] for i, name in enumerate(fmt.SPLIT_NAMES)}
