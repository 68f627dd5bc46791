"""Import the Illinois Graph Benchmark's heterogeneous graph (IGBH) from the folder layout IGB ships, without the
``igb`` package.

Layout (``ROOT/<size>/processed/``, as IGB's ``igb/dataloader.py`` and MLPerf's reference ``dataset.py`` read it)::

    <type>/node_feat.npy                      float32 [N_type, 1024]; every node type has features
    paper/node_label_19.npy, node_label_2K.npy  float32 [N_paper] class ids (19 or 2983 classes)
    <src>__<rel>__<dst>/edge_index.npy        int64 [E, 2]: column 0 the src-type id, column 1 the dst-type id

tiny/small/medium have the relations paper__cites__paper, paper__written_by__author,
author__affiliated_to__institute and paper__topic__fos; large/full add paper__published__journal and
paper__venue__conference (node types journal, conference). For large and full, the paper and author features and
the paper labels ship as raw memory maps without an ``.npy`` header (IGB reads them with ``np.memmap(...,
dtype=float32, shape=(num_nodes, 1024))``): they are sized here from IGB's published node counts (``NUM_NODES``), or
from ``num_nodes``. Any file is recognised by its first bytes, so a headered copy of a large/full file reads too.

Edges are stored as the reference adds them (graphlearn-for-pytorch's ``examples/igbh/dataset.py``, which MLPerf
Training's ``graph_neural_network`` reference uses): ``cites`` without self-loops, then one self-loop per paper added,
then both directions of the result (so each self-loop is stored twice, as there); every other relation as given plus
its reverse ``(dst, rev_<rel>, src)``.

Splits (``split``):

* ``"igb"`` (default): IGB's loader (``IGBHeteroDGLDataset``): the first 60% of the labelled papers train, the next
  20% validate, the rest test, by paper id.
* ``"mlperf"``: MLPerf's ``split_seeds.py``: ``torch.manual_seed(42)``, ``torch.randperm`` of the labelled papers,
  the first 60% train, the next ``validation_frac`` (its default 0.005) validate. MLPerf has no test set; the rest of
  the permutation is stored as the test split so that ``train`` can report one.

The labelled papers are all papers, except on ``full``, where IGB labels the first 227,130,858 (19 classes) or
157,675,969 (2983 classes) papers; the others are stored unlabelled (-1). Everything is streamed in chunks; memory
is independent of the edge count (the ``"mlperf"`` split holds one int64 permutation of the labelled papers).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sparsetrain.datasets.build import BuildOptions, build_dataset
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.presets import IGB_SIZES, IGBH_NODES, IGBH_RELATIONS
from sparsetrain.datasets.sources import EdgeSource, GraphInput, Source
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.graph import EdgeType

SIZES = IGB_SIZES
NUM_NODES = {t: {size: IGBH_NODES[size][t] for size in SIZES} for t in ("paper", "author")}
"""IGB's node counts of the types whose large/full files have no header (``igb/dataloader.py``,
``IGBHeteroDGLDatasetMassive``; MLPerf's ``dataset.py`` ``paper_nodes_num``/``author_nodes_num``)."""
FULL_LABELLED = {19: 227_130_858, 2983: 157_675_969}
"""Papers with a label in IGBH-full (the first ones by id; ``igb/dataloader.py``, MLPerf's ``split_seeds.py``)."""
RELATIONS = list(IGBH_RELATIONS)
LARGE_RELATIONS = [("paper", "published", "journal"), ("paper", "venue", "conference")]
LABEL_FILES = {19: "node_label_19.npy", 2983: "node_label_2K.npy"}
HEADERLESS = {"large", "full"}
MLPERF_SEED = 42
MLPERF_VALIDATION_FRAC = 0.005
TRAIN_FRAC, VAL_FRAC = 0.6, 0.2
CHUNK_BYTES = 1 << 26
_MAGIC = b"\x93NUMPY"


def relations(size: str) -> list[EdgeType]:
    """The relations IGBH-``size`` ships (as stored: src type, relation, dst type)."""
    return RELATIONS + (LARGE_RELATIONS if size in HEADERLESS else [])


def node_types(size: str) -> list[str]:
    """IGBH-``size``'s node types, paper first."""
    return list(dict.fromkeys(t for et in relations(size) for t in (et[0], et[2])))


def _has_header(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(_MAGIC)) == _MAGIC


def _open(path: Path, what: str, rows: int | None, width: int | None, dtype: str) -> np.ndarray:
    """``path`` memory-mapped: an ``.npy`` file by its header, a headerless one (IGB's large/full memmaps) as ``dtype``
    with ``rows`` rows (``width`` None: a 2-D file's width from the size; 0: 1-D). Wrong sizes are one line."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing; an IGBH folder has {what} there (download the dataset again, or give the "
                           "right --size)")
    if _has_header(path):
        try:
            array = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as exc:
            raise DatasetError(f"{path}: not a readable .npy file ({exc}); download it again") from None
        if rows is not None and array.shape[0] != rows:
            raise DatasetError(f"{path}: has {array.shape[0]} rows but IGBH has {rows} {what}; give the right --size "
                               "(or the counts your copy has), or download it again")
        return array
    itemsize = np.dtype(dtype).itemsize
    size = path.stat().st_size
    if rows is None and width is None:
        raise DatasetError(f"{path}: has no .npy header and IGB publishes no count to size it by; IGB ships {what} "
                           "with a header (download it again), or give the count (--node-count)")
    if rows is None:  # a headerless edge list: [E, width] int64
        if size % (itemsize * width):
            raise DatasetError(f"{path}: {size} bytes is not a whole number of [E, {width}] {dtype} rows; the file is "
                               "truncated or not IGB's, download it again")
        return np.memmap(path, dtype=dtype, mode="r", shape=(size // (itemsize * width), width))
    if width == 0:
        if size != rows * itemsize:
            raise DatasetError(f"{path}: {size} bytes, but {rows} {what} as headerless {dtype} take {rows * itemsize}; "
                               "the count is wrong (give the right --size) or the file is truncated")
        return np.memmap(path, dtype=dtype, mode="r", shape=(rows,))
    if rows == 0 or size % (rows * itemsize) or size == 0:
        raise DatasetError(f"{path}: {size} bytes is not {rows} rows of headerless {dtype} ({what}); the count is "
                           "wrong (give the right --size) or the file is truncated")
    return np.memmap(path, dtype=dtype, mode="r", shape=(rows, size // (rows * itemsize)))


def _read(array: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows ``[lo, hi)`` of a file opened by :func:`_open`, read with a positioned read rather than through the map:
    the pages walked do not stay mapped, so the import's resident set is its own memory, not the tens of GB of IGB
    files it streams (a C-ordered map of a whole file only; anything else is sliced)."""
    hi = min(hi, len(array))
    whole = (isinstance(array, np.memmap) and array.flags.c_contiguous and array.filename
             and array.offset + array.nbytes == os.path.getsize(array.filename))
    if not whole or hi <= lo:
        return np.array(array[lo:hi])
    width = int(np.prod(array.shape[1:], dtype=np.int64))
    with open(array.filename, "rb") as f:
        f.seek(array.offset + lo * width * array.dtype.itemsize)
        out = np.fromfile(f, dtype=array.dtype, count=(hi - lo) * width)
    if len(out) != (hi - lo) * width:
        raise DatasetError(f"{array.filename}: ended while reading rows {lo}..{hi - 1}; the file was truncated during "
                           "the import, download it again")
    return out.reshape((hi - lo, *array.shape[1:]))


def _row_source(name: str, array: np.ndarray) -> Source:
    """Row chunks of a mapped table, about ``CHUNK_BYTES`` each."""
    row_bytes = max(1, array.dtype.itemsize * (array.shape[1] if array.ndim == 2 else 1))
    step = max(1, CHUNK_BYTES // row_bytes)
    return Source(name, lambda: (_read(array, lo, lo + step) for lo in range(0, len(array), step)), len(array))


def _edges(path: Path, et: EdgeType) -> np.ndarray:
    array = _open(path, f"the {'__'.join(et)} edges", None, 2, "int64")
    if array.ndim != 2 or array.shape[1] != 2 or array.dtype.kind not in "iu":
        raise DatasetError(f"{path}: is {array.dtype}{list(array.shape)}; IGB's edge_index.npy is an integer array of "
                           "shape [num_edges, 2] (src id, dst id)")
    return array


def _pairs(array: np.ndarray, step: int = 1 << 22):
    for lo in range(0, len(array), step):
        block = _read(array, lo, lo + step)
        yield block[:, 0].astype(np.int64), block[:, 1].astype(np.int64)


def _edge_source(name: str, array: np.ndarray) -> EdgeSource:
    return EdgeSource(name, lambda: ((src, dst, None) for src, dst in _pairs(array)), len(array),
                      lambda row: f"edge {row}")


def cites_as_reference(name: str, pairs, num_papers: int, num_edges: int | None = None) -> EdgeSource:
    """The reference's ``cites`` (graphlearn-for-pytorch ``examples/igbh/dataset.py``: ``add_self_loops(
    remove_self_loops(edges))``, then both directions): the citations without self-loops and one loop per paper, then
    the same reversed. ``pairs()`` yields ``(src, dst)`` chunks; ``num_edges`` None: counted by the writer."""
    step = 1 << 22

    def one_way(reverse: bool):
        for src, dst in pairs():
            keep = src != dst
            src, dst = src[keep], dst[keep]
            yield (dst, src, None) if reverse else (src, dst, None)
        for lo in range(0, num_papers, step):
            loops = np.arange(lo, min(num_papers, lo + step), dtype=np.int64)
            yield loops, loops, None

    return EdgeSource(name, lambda: (chunk for reverse in (False, True) for chunk in one_way(reverse)), num_edges,
                      lambda row: f"edge {row} of the symmetrised citations with self-loops")


def with_reference_reverses(edges: dict[EdgeType, EdgeSource], num_papers: int,
                            cites_pairs=None) -> dict[EdgeType, EdgeSource]:
    """IGBH's relations as MLPerf's reference trains on them: ``cites`` symmetrised with self-loops
    (:func:`cites_as_reference`; ``cites_pairs`` yields its ``(src, dst)`` chunks), every other relation plus its
    ``rev_`` reverse."""
    out = {}
    for et, source in edges.items():
        if et == ("paper", "cites", "paper"):
            pairs = cites_pairs or (lambda source=source: ((s, d) for s, d, _ in source.chunks()))
            out[et] = cites_as_reference(source.name, pairs, num_papers)
        else:
            out[et] = source
    for et, source in edges.items():
        if et != ("paper", "cites", "paper"):
            out[(et[2], f"rev_{et[1]}", et[0])] = source.reversed()
    return out


def _folder(root: Path, size: str) -> Path:
    for folder in (root / size / "processed", root / "processed"):
        if folder.is_dir():
            return folder
    raise DatasetError(f"{root}: has no {size}/processed folder; --igb takes the folder IGB downloads into (holding "
                       f"{size}/processed/), or give the right --size")


def _split(split: str, labelled: int, validation_frac: float) -> dict[str, Source]:
    if split == "igb":
        n_train, n_val = int(labelled * TRAIN_FRAC), int(labelled * VAL_FRAC)
        bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, labelled)}
        step = 1 << 22
        return {name: Source(f"IGB's {name} split (papers {lo}..{hi - 1})",
                             lambda lo=lo, hi=hi: (np.arange(a, min(hi, a + step), dtype=np.int64)
                                                   for a in range(lo, hi, step)), hi - lo)
                for name, (lo, hi) in bounds.items()}
    import torch

    order = torch.randperm(labelled, generator=torch.Generator().manual_seed(MLPERF_SEED)).numpy()
    n_train, n_val = int(labelled * TRAIN_FRAC), int(labelled * validation_frac)
    parts = {"train": order[:n_train], "val": order[n_train : n_train + n_val], "test": order[n_train + n_val :]}
    return {name: Source.from_array(f"MLPerf's {name} seeds (randperm, seed {MLPERF_SEED})", ids)
            for name, ids in parts.items()}


def _labels(path: Path, array: np.ndarray, labelled: int) -> Source:
    """Float labels, rows past the labelled prefix as -1 (IGBH-full labels only its first papers)."""
    step = 1 << 22

    def chunks():
        for lo in range(0, len(array), step):
            block = _read(array, lo, lo + step).reshape(-1)
            if lo + len(block) > labelled:
                block = block.astype(np.float64)
                block[max(0, labelled - lo) :] = -1
            yield block

    return Source(str(path), chunks, len(array))


def from_igb(root: str | os.PathLike, out_dir: str | os.PathLike, *, size: str = "tiny", classes: int = 19,
             split: str = "igb", validation_frac: float = MLPERF_VALIDATION_FRAC,
             num_nodes: dict[str, int] | None = None, **options) -> GraphDataset:
    """Import IGBH-``size`` from ``root`` (the folder holding ``<size>/processed/``, or that ``processed/``'s
    parent) into a typed dataset at ``out_dir``: every node type with its features, paper labels (``classes`` 19 or
    2983), the reference's edges and reverses, ``split`` ``"igb"`` or ``"mlperf"`` (see the module docstring).

    ``num_nodes`` overrides IGB's published counts of the headerless large/full files (and the count a headered
    paper or author file is checked against). Options are :class:`BuildOptions` fields.
    """
    if size not in SIZES:
        raise DatasetError(f"size {size!r} is not an IGBH size; choose one of {', '.join(SIZES)}")
    if classes not in LABEL_FILES:
        raise DatasetError(f"classes={classes}: IGBH labels papers with 19 or 2983 classes; choose one of them")
    if split not in ("igb", "mlperf"):
        raise DatasetError(f"split {split!r} is not known; choose igb (IGB's 60/20/20 by id) or mlperf (MLPerf's "
                           "seeded permutation)")
    if not 0 < validation_frac < 1 - TRAIN_FRAC:
        raise DatasetError(f"validation_frac={validation_frac} must lie in (0, {1 - TRAIN_FRAC:g})")
    for name in ("add_reverse", "undirected", "split_fractions"):
        if name in options:
            raise DatasetError(f"{name} does not apply to an IGB folder: its reverses and split are the reference's "
                               "(split='igb' or 'mlperf')")
    unknown = sorted(set(num_nodes or {}) - set(node_types(size)))
    if unknown:
        raise DatasetError(f"--node-count {unknown[0]}: IGBH-{size} has no node type {unknown[0]!r}; its node types "
                           f"are {', '.join(node_types(size))}")
    for t, n in (num_nodes or {}).items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise DatasetError(f"--node-count {t}={n!r}: a node count is a whole number >= 0")
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder; --igb takes the folder IGB downloads into")
    folder = _folder(root, size)
    counts = {t: (num_nodes or {}).get(t, NUM_NODES[t][size] if t in NUM_NODES else None) for t in node_types(size)}
    headerless = size in HEADERLESS
    graph = GraphInput({}, {}, target_type="paper",
                       provenance={"importer": "igb", "folder": str(root), "size": size, "classes": classes,
                                   "split": split})
    for t in node_types(size):
        path = folder / t / "node_feat.npy"
        # the counts check headered files of every size, and size the headerless ones
        rows = counts[t] if (headerless or t in NUM_NODES) else None
        array = _open(path, f"{t} nodes", rows, None, "float32")
        if array.ndim != 2 or array.dtype.kind != "f":
            raise DatasetError(f"{path}: is {array.dtype}{list(array.shape)}; IGB's node features are floats of shape "
                               f"[num_{t}_nodes, dim]")
        graph.num_nodes[t] = len(array)
        graph.features[t] = _row_source(str(path), array)
    num_papers = graph.num_nodes["paper"]
    label_path = folder / "paper" / LABEL_FILES[classes]
    labels = _open(label_path, "paper labels", num_papers, 0, "float32")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels.reshape(-1)
    if labels.ndim != 1 or labels.dtype.kind not in "iuf":
        raise DatasetError(f"{label_path}: is {labels.dtype}{list(labels.shape)}; IGB's labels are one number per "
                           "paper")
    labelled = min(num_papers, FULL_LABELLED[classes]) if size == "full" else num_papers
    graph.labels["paper"] = _labels(label_path, labels, labelled)
    stored, pair_chunks = {}, {}
    for et in relations(size):
        path = folder / "__".join(et) / "edge_index.npy"
        if not path.is_file():
            raise DatasetError(f"{path}: missing; IGBH-{size} has the relation {'__'.join(et)} (download it again, "
                               "or give the right --size)")
        array = _edges(path, et)
        stored[et] = _edge_source(str(path), array)
        pair_chunks[et] = (lambda a=array: _pairs(a))
    graph.edges = with_reference_reverses(stored, num_papers, pair_chunks[("paper", "cites", "paper")])
    graph.splits = _split(split, labelled, validation_frac)
    return build_dataset(out_dir, graph, BuildOptions(num_classes=classes, **options))
