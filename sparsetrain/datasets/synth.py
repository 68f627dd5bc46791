"""Synthetic graphs (``sparsetrain synth``): :func:`synthesize`, the one entry; here a power-law graph with learnable
communities, with ``typed=True`` the ogbn-mag-shaped graph of :mod:`~sparsetrain.datasets.synth_mag`.

Model: a degree-corrected stochastic block model. Every node gets a class
(its community) and a power-law weight: the node of random rank r weighs
(r + 10) ** -1/2 (Chung-Lu: expected degree proportional to the weight; the
largest degree is ~0.3% of the edges on 2.4M nodes). Picks by weight invert the
continuous CDF of that law, O(1) each. An undirected edge picks one end by
weight over all nodes; the other end, with probability ``p_intra``, by weight
inside the first end's community, else by weight over all nodes. Features are the class centroid plus
near-Gaussian noise, so features alone predict the class moderately and averaging
over neighbors (what a GNN does) predicts it well. Deterministic for a seed:
random numbers come from a counter-based hash, whatever the thread count.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from sparsetrain.datasets.build import BuildOptions, EdgeSource, GraphInput, Source, build_dataset
from sparsetrain.datasets.csc import MAX_NODES
from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.presets import IGBH_PRESETS, PRESETS
from sparsetrain.datasets.synth_mag import MAG_SPLIT, mag_graph
from sparsetrain.datasets.writer import check_output
from sparsetrain.errors import DatasetError
from sparsetrain.sampling.rng import GOLDEN, mix64

P_INTRA = 0.8
CENTROID_SCALE = 1.5  # distance between class centroids ~ 2.1 noise standard deviations


@numba.njit(cache=True, inline="always")
def _uniform(seed, counter):
    """Uniform [0, 1) from (seed, counter): the sampler's splitmix64 mixer."""
    return (mix64(seed + counter * GOLDEN) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, inline="always")
def _rank(u, count, offset):
    """Rank in [0, count) drawn with probability ~ (rank + offset) ** -1/2: the continuous inverse CDF, O(1)."""
    low = np.sqrt(offset)
    x = (low + u * (np.sqrt(count + offset) - low)) ** 2 - offset
    return min(count - 1, max(0, np.int64(x)))


@numba.njit(cache=True, nogil=True, parallel=True)
def _draw_pairs(keys, seed, first, node_of_rank, classes, starts, by_position, num_nodes, p_intra):
    """Fill ``keys`` with undirected pairs as ``min * N + max``; draw ``first + i`` uses counters 16(first+i)...

    ``node_of_rank[r]`` is the node of global rank r (weight (r + 10) ** -1/2);
    ``by_position[starts[c]:starts[c + 1]]`` are community c's nodes by rank, whose
    k-th member has global rank about k * N / size, hence offset 10 * size / N.
    """
    seed = np.uint64(seed)
    for i in numba.prange(keys.shape[0]):
        base = np.uint64(first + i) * np.uint64(16)
        u = node_of_rank[_rank(_uniform(seed, base), num_nodes, 10.0)]
        v = u
        for attempt in range(7):
            c = np.uint64(1 + 2 * attempt)
            draw = _uniform(seed, base + c + np.uint64(1))
            if _uniform(seed, base + c) < p_intra and attempt < 4:
                comm = classes[u]
                size = starts[comm + 1] - starts[comm]
                v = by_position[starts[comm] + _rank(draw, size, 10.0 * size / num_nodes)]
            else:
                v = node_of_rank[_rank(draw, num_nodes, 10.0)]
            if v != u:
                break
        if u == v:  # only possible on a graph with a node of overwhelming weight; resolve deterministically
            v = (u + 1) % num_nodes
        keys[i] = min(u, v) * np.int64(num_nodes) + max(u, v)


_NOISE_SCALE = np.sqrt(3.0) / 65536.0  # four 16-bit uniforms summed: standard deviation 65536 / sqrt(3)


@numba.njit(cache=True, nogil=True, parallel=True)
def _fill_features(out, first_row, seed, centroids, classes):
    """Rows ``first_row...`` of the features: class centroid + unit-variance noise.

    The noise is the centred sum of four 16-bit uniforms from one hash of (row, column),
    close to a standard normal and several times cheaper to draw; any chunking gives the same values.
    """
    seed = mix64(np.uint64(seed) ^ np.uint64(0x5EEDFEA7))
    dim = out.shape[1]
    mask = np.uint64(0xFFFF)
    for r in numba.prange(out.shape[0]):
        row = first_row + r
        c = classes[row]
        for j in range(dim):
            h = mix64(seed + (np.uint64(row) * np.uint64(dim) + np.uint64(j)) * GOLDEN)
            total = (h & mask) + ((h >> np.uint64(16)) & mask) + ((h >> np.uint64(32)) & mask) + (h >> np.uint64(48))
            out[r, j] = centroids[c, j] + (np.float64(total) - 131070.0) * _NOISE_SCALE


@numba.njit(cache=True, nogil=True, parallel=True)
def _float16_bits(bits32, bits16):
    """float32 -> float16 with round-to-nearest-even, on the raw bits (NumPy's cast, several times faster here)."""
    flat32, flat16 = bits32.reshape(-1), bits16.reshape(-1)
    for i in numba.prange(flat32.shape[0]):
        x = np.uint32(flat32[i])
        sign = np.uint32((x >> np.uint32(16)) & np.uint32(0x8000))
        exponent = np.int64((x >> np.uint32(23)) & np.uint32(0xFF))
        mantissa = np.uint32(x & np.uint32(0x7FFFFF))
        if exponent == 0xFF:  # inf / NaN
            half = sign | np.uint32(0x7C00) | (np.uint32(0x200) if mantissa else np.uint32(0))
        elif exponent - 112 >= 31:  # overflows to inf
            half = sign | np.uint32(0x7C00)
        elif exponent - 112 <= 0:  # subnormal or zero
            if exponent - 112 < -10:
                half = sign
            else:
                m = mantissa | np.uint32(0x800000)
                shift = np.uint32(126 - exponent)  # 14 - (exponent - 112)
                half_m = m >> shift
                rest = m & ((np.uint32(1) << shift) - np.uint32(1))
                halfway = np.uint32(1) << (shift - np.uint32(1))
                if rest > halfway or (rest == halfway and (half_m & np.uint32(1))):
                    half_m += np.uint32(1)
                half = sign | half_m
        else:
            half = sign | (np.uint32(exponent - 112) << np.uint32(10)) | (mantissa >> np.uint32(13))
            rest = mantissa & np.uint32(0x1FFF)
            if rest > np.uint32(0x1000) or (rest == np.uint32(0x1000) and (half & np.uint32(1))):
                half += np.uint32(1)  # a carry into the exponent is the correct rounding (up to inf)
        flat16[i] = np.uint16(half)


@numba.njit(cache=True, nogil=True)
def _compact_unique(keys, drop):
    """Remove repeats (``keys`` sorted) and entries flagged in ``drop``, in place; returns the new length."""
    out = 0
    for i in range(keys.shape[0]):
        if (out > 0 and keys[i] == keys[out - 1]) or (drop.shape[0] > 0 and drop[i]):
            continue
        keys[out] = keys[i]
        out += 1
    return out


# Pair keys are deduplicated in hash buckets on disk, about this many keys (8 bytes each) per bucket.
PAIRS_PER_BUCKET = 1 << 26
DRAW_CHUNK = 1 << 22
_HIST_BITS = 16


@numba.njit(cache=True, nogil=True)
def _group_by_hash(keys, num_buckets, cursor, out, offsets):
    """``out`` = ``keys`` grouped by ``mix64(key) % num_buckets``; ``offsets[b]`` starts bucket b."""
    offsets[:] = 0
    for i in range(keys.shape[0]):
        offsets[np.int64(mix64(np.uint64(keys[i])) % np.uint64(num_buckets)) + 1] += 1
    for b in range(num_buckets):
        offsets[b + 1] += offsets[b]
    cursor[:] = offsets[:-1]
    for i in range(keys.shape[0]):
        b = np.int64(mix64(np.uint64(keys[i])) % np.uint64(num_buckets))
        out[cursor[b]] = keys[i]
        cursor[b] += 1


@numba.njit(cache=True, nogil=True)
def _score(key, salt):
    """A bijection of the key: distinct pairs never tie."""
    return mix64(np.uint64(key) ^ salt)


@numba.njit(cache=True, nogil=True)
def _score_histogram(keys, salt, hist):
    for i in range(keys.shape[0]):
        hist[np.int64(_score(keys[i], salt) >> np.uint64(64 - _HIST_BITS))] += 1


@numba.njit(cache=True, nogil=True)
def _scores_in_bin(keys, salt, target, out, found):
    """Append to ``out`` the scores whose histogram bin is ``target``; ``found[0]`` counts them."""
    for i in range(keys.shape[0]):
        score = _score(keys[i], salt)
        if np.int64(score >> np.uint64(64 - _HIST_BITS)) == target:
            out[found[0]] = score
            found[0] += 1


@numba.njit(cache=True, nogil=True)
def _keep_below(keys, salt, threshold):
    """Compact ``keys`` in place to those scoring at most ``threshold``; returns how many."""
    out = 0
    for i in range(keys.shape[0]):
        if _score(keys[i], salt) <= threshold:
            keys[out] = keys[i]
            out += 1
    return out


class _PairBuckets:
    """Distinct undirected pairs (keys ``min * N + max``) drawn until there are exactly ``num_pairs``.

    Draws go to hash buckets on disk; each round sorts and de-duplicates every bucket
    and draws again what is still missing (plus 10%). The surplus is dropped by score,
    a fixed bijection of the key: exactly the ``num_pairs`` lowest-scoring pairs are
    kept. The result depends on the seed only, not on the bucket count or thread count;
    memory is one bucket and one draw chunk, however many pairs.
    """

    def __init__(self, scratch, num_pairs: int, seed: int):
        self.num_buckets = max(1, -(-int(num_pairs * 1.1) // PAIRS_PER_BUCKET))
        self.paths = [scratch(f"pairs{b}") for b in range(self.num_buckets)]
        for path in self.paths:
            path.write_bytes(b"")
        self.salt = np.uint64(mix64(np.uint64(seed) + GOLDEN))
        self.threshold = None

    def draw(self, first: int, count: int, draw_chunk) -> None:
        cursor = np.zeros(self.num_buckets, dtype=np.int64)
        offsets = np.zeros(self.num_buckets + 1, dtype=np.int64)
        files = [open(path, "ab") for path in self.paths]
        try:
            for lo in range(0, count, DRAW_CHUNK):
                keys = draw_chunk(first + lo, min(DRAW_CHUNK, count - lo))
                grouped = np.empty_like(keys)
                _group_by_hash(keys, self.num_buckets, cursor, grouped, offsets)
                for b in np.flatnonzero(np.diff(offsets)):
                    grouped[offsets[b] : offsets[b + 1]].tofile(files[b])
        finally:
            for f in files:
                f.close()

    def deduplicate(self) -> np.ndarray:
        """Sort and de-duplicate every bucket in place; returns the score histogram of all distinct pairs."""
        hist = np.zeros(1 << _HIST_BITS, dtype=np.int64)
        no_drop = np.zeros(0, dtype=np.bool_)
        for path in self.paths:
            keys = np.fromfile(path, dtype=np.int64)
            keys.sort()
            keys = keys[: _compact_unique(keys, no_drop)]
            _score_histogram(keys, self.salt, hist)
            keys.tofile(path)
        return hist

    def keep_lowest(self, hist: np.ndarray, num_pairs: int) -> None:
        """Choose the score threshold that keeps exactly ``num_pairs`` pairs."""
        below = np.cumsum(hist)
        target = int(np.searchsorted(below, num_pairs))  # the bin where the count reaches num_pairs
        wanted = num_pairs - (int(below[target - 1]) if target else 0)
        scores = np.empty(int(hist[target]), dtype=np.uint64)
        found = np.zeros(1, dtype=np.int64)
        for path in self.paths:
            _scores_in_bin(np.fromfile(path, dtype=np.int64), self.salt, target, scores, found)
        scores.sort()
        self.threshold = scores[wanted - 1]

    def delete(self) -> None:
        for path in self.paths:
            path.unlink(missing_ok=True)

    def chunks(self):
        """The kept keys, at most ``DRAW_CHUNK`` at a time."""
        for path in self.paths:
            total = path.stat().st_size // 8
            for lo in range(0, total, DRAW_CHUNK):
                keys = np.fromfile(path, dtype=np.int64, count=min(DRAW_CHUNK, total - lo), offset=8 * lo)
                yield keys[: _keep_below(keys, self.salt, self.threshold)]


def _communities(num_nodes: int, num_classes: int, rng: np.random.Generator):
    """Each node's class and the lookup arrays the pair kernel samples from (4 bytes per node each)."""
    ids = np.int64 if num_nodes >= 2**31 else np.int32
    classes = rng.integers(0, num_classes, size=num_nodes, dtype=np.int32)
    node_of_rank = rng.permutation(num_nodes).astype(ids)
    class_by_rank = classes[node_of_rank]
    by_position = node_of_rank[np.argsort(class_by_rank, kind="stable")]  # by class, then by rank
    starts = np.searchsorted(np.sort(class_by_rank), np.arange(num_classes + 1)).astype(np.int64)
    return classes, node_of_rank, by_position, starts


def _unique_pairs(scratch, num_pairs: int, num_nodes: int, num_classes: int, seed: int,
                  rng: np.random.Generator) -> tuple[_PairBuckets, np.ndarray]:
    """Exactly ``num_pairs`` distinct undirected pairs (in buckets on disk) and each node's class."""
    classes, node_of_rank, by_position, starts = _communities(num_nodes, num_classes, rng)

    def draw_chunk(first: int, count: int) -> np.ndarray:
        keys = np.empty(count, dtype=np.int64)
        _draw_pairs(keys, seed, first, node_of_rank, classes, starts, by_position, num_nodes, P_INTRA)
        return keys

    pairs = _PairBuckets(scratch, num_pairs, seed)
    have = drawn = 0
    for _ in range(64):
        batch = int((num_pairs - have) * 1.1) + 1024
        pairs.draw(drawn, batch, draw_chunk)
        drawn += batch
        hist = pairs.deduplicate()
        have = int(hist.sum())
        if have >= num_pairs:
            pairs.keep_lowest(hist, num_pairs)
            return pairs, classes
    raise DatasetError(f"--edges {2 * num_pairs}: cannot draw that many distinct edges on {num_nodes} nodes; ask for "
                       "fewer edges or more nodes")


@dataclass(frozen=True)
class _Generator:
    """One kind of synthetic graph: what sizes it (for messages), its default feature width and class count, and the
    sizing flags it refuses because it sizes the graph itself."""

    sized_by: str
    feature_dim: int
    num_classes: int
    write: Callable[[str | os.PathLike, _Sizes, dict], GraphDataset]
    refuses: tuple[str, ...] = ()


def _generator(typed: bool, preset: str | None) -> str:
    """The generator the arguments name: an IGBH preset's, ``typed``'s (ogbn-mag-shaped), else the power-law graph
    (which a homogeneous ``preset`` sizes)."""
    if preset is not None and preset not in PRESETS and preset not in IGBH_PRESETS:
        raise DatasetError(f"--preset {preset}: is not known; choose one of {', '.join([*PRESETS, *IGBH_PRESETS])}")
    if preset in IGBH_PRESETS:
        return "igbh"
    return "mag" if typed else "power-law"


def synthesize(
    out_dir: str | os.PathLike,
    num_nodes: int | None = None,
    num_edges: int | None = None,
    *,
    typed: bool = False,
    preset: str | None = None,
    scale: float = 1.0,
    feature_dim: int | None = None,
    num_classes: int | None = None,
    label_fraction: float | None = None,
    seed: int = 0,
    **options,
) -> GraphDataset:
    """Generate and write a synthetic dataset: a power-law graph of ``num_nodes`` nodes and exactly ``num_edges``
    directed edges (the module docstring; ``preset="papers100m"`` gives the sizes of ogbn-papers100M that are not
    given), or with ``typed=True`` an ogbn-mag-shaped typed graph sized by ``scale``
    (:mod:`~sparsetrain.datasets.synth_mag`; 1.0 is ogbn-mag's size), or with ``preset="igbh-<size>"`` (tiny, small,
    medium, large) an IGBH-shaped typed graph with IGB's published counts times ``scale``
    (:mod:`~sparsetrain.datasets.synth_igbh`; split 60/20/20).

    The power-law graph is undirected and stored with both directions, so ``num_edges`` must be even. A random
    ``label_fraction`` (default 1) of the nodes carries a label (the rest -1); the split divides the labelled nodes.
    ``feature_dim`` and ``num_classes`` default by generator (:data:`GENERATORS`: 100 and 47; typed: 128 and 349;
    IGBH: 1024 and 19, as IGBH's). Options are :class:`BuildOptions` fields (``reorder``, ``feature_dtype``,
    ``split_fractions``, ``overwrite``, ``quiet``; typed: ``add_reverse``, default True). Memory is a few arrays per
    node plus fixed-size chunks, whatever ``num_edges``.
    """
    kind = _generator(typed, preset)
    generator = GENERATORS[kind]
    flags = (("--typed", typed), ("--nodes", num_nodes), ("--edges", num_edges), ("--label-fraction", label_fraction),
             ("--preset", preset), ("--reorder", options.get("reorder")))
    given = [flag for flag, value in flags if value is not None and value is not False and value not in ("none", "")]
    refused = [flag for flag in given if flag in generator.refuses]
    if refused:
        raise DatasetError(f"{generator.sized_by.format(preset=preset)}; drop {'/'.join(refused)}")
    if preset in PRESETS:  # a homogeneous preset: its sizes where none are given
        known = PRESETS[preset]
        num_nodes = known["nodes"] if num_nodes is None else num_nodes
        num_edges = known["edges"] if num_edges is None else num_edges
        feature_dim = known["feature_dim"] if feature_dim is None else feature_dim
        num_classes = known["classes"] if num_classes is None else num_classes
        label_fraction = known["label_fraction"] if label_fraction is None else label_fraction
        options = {"feature_dtype": known["feature_dtype"], "split_fractions": known["split"], **options}
    feature_dim = generator.feature_dim if feature_dim is None else feature_dim
    num_classes = generator.num_classes if num_classes is None else num_classes
    if feature_dim < 1 or num_classes < 2:  # every generator: a 0 is refused, never read as "the default"
        raise DatasetError(f"--feature-dim {feature_dim} / --classes {num_classes}: need at least 1 feature and 2 "
                           "classes")
    sizes = _Sizes(preset, scale, num_nodes, num_edges, feature_dim, num_classes, label_fraction, seed)
    return generator.write(out_dir, sizes, options)


@dataclass(frozen=True)
class _Sizes:
    """What :func:`synthesize` was asked for, defaults filled in, as the generators read it."""

    preset: str | None
    scale: float
    num_nodes: int | None
    num_edges: int | None
    feature_dim: int
    num_classes: int
    label_fraction: float | None
    seed: int


def _write_igbh(out_dir: str | os.PathLike, sizes: _Sizes, options: dict) -> GraphDataset:
    """The IGBH-shaped typed graph (:mod:`~sparsetrain.datasets.synth_igbh`)."""
    from sparsetrain.datasets.synth_igbh import igbh_graph

    if "add_reverse" in options:
        raise DatasetError(f"--preset {sizes.preset} stores MLPerf's reference reverse edges already; drop "
                           "--add-reverse")
    graph = igbh_graph(sizes.preset, sizes.scale, sizes.num_classes, sizes.feature_dim, sizes.seed)
    return build_dataset(out_dir, graph, BuildOptions(seed=sizes.seed, num_classes={"paper": sizes.num_classes},
                                                      **options))


def _write_mag(out_dir: str | os.PathLike, sizes: _Sizes, options: dict) -> GraphDataset:
    """The ogbn-mag-shaped typed graph (:mod:`~sparsetrain.datasets.synth_mag`), with its reverse edge types."""
    graph = mag_graph(sizes.scale, sizes.num_classes, sizes.feature_dim, sizes.seed)
    options = {"add_reverse": True, "split_fractions": MAG_SPLIT, **options}
    return build_dataset(out_dir, graph, BuildOptions(seed=sizes.seed, num_classes={"paper": sizes.num_classes},
                                                      **options))


def _write_power_law(out_dir: str | os.PathLike, sizes: _Sizes, options: dict) -> GraphDataset:
    """The power-law graph of the module docstring."""
    num_nodes, num_edges, label_fraction, seed = sizes.num_nodes, sizes.num_edges, sizes.label_fraction, sizes.seed
    feature_dim, num_classes = sizes.feature_dim, sizes.num_classes
    if num_nodes is None or num_edges is None:
        raise DatasetError("--nodes and --edges: both required (num_nodes, num_edges), or pass typed=True (--typed)")
    label_fraction = 1.0 if label_fraction is None else label_fraction
    if num_nodes < 2:
        raise DatasetError(f"--nodes {num_nodes}: a synthetic graph needs at least 2 nodes")
    if num_edges < 2 or num_edges % 2:
        raise DatasetError(f"--edges {num_edges}: must be a positive even number (the graph is undirected; each edge "
                           "is stored both ways)")
    if num_edges // 2 > num_nodes * (num_nodes - 1) // 4:
        raise DatasetError(f"--edges {num_edges}: more than half of all {num_nodes * (num_nodes - 1)} possible edges; "
                           "ask for fewer edges or more nodes")
    if num_classes > num_nodes:
        raise DatasetError(f"--classes {num_classes}: more classes than the {num_nodes} nodes")
    if not 0 < label_fraction <= 1 or round(label_fraction * num_nodes) < 1:
        raise DatasetError(f"--label-fraction {label_fraction}: must be in (0, 1] and label at least one of the "
                           f"{num_nodes} nodes")
    if num_nodes > MAX_NODES:
        raise DatasetError(f"--nodes {num_nodes}: at most {MAX_NODES} nodes are supported")

    out_dir = Path(out_dir).absolute()
    check_output(out_dir, options.get("overwrite", False))  # before the long part
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-{os.getpid()}-", dir=out_dir.parent))
    try:
        rng = np.random.default_rng(seed)
        pairs, classes = _unique_pairs(lambda name: scratch_dir / name, num_edges // 2, num_nodes, num_classes, seed,
                                       rng)
        centroids = rng.normal(0.0, CENTROID_SCALE / np.sqrt(feature_dim), size=(num_classes, feature_dim))
        centroids = centroids.astype(np.float32)
        labelled = np.ones(num_nodes, dtype=np.bool_)
        if label_fraction < 1:
            labelled[:] = False
            labelled[rng.choice(num_nodes, size=round(label_fraction * num_nodes), replace=False)] = True

        def edge_chunks():
            for keys in pairs.chunks():
                yield keys // num_nodes, keys % num_nodes, None

        node_chunk = max(1, (1 << 26) // (4 * feature_dim))

        half = options.get("feature_dtype") == "float16"

        def feature_chunks():
            for lo in range(0, num_nodes, node_chunk):
                rows = np.empty((min(node_chunk, num_nodes - lo), feature_dim), dtype=np.float32)
                _fill_features(rows, lo, seed, centroids, classes)
                if half:
                    bits = np.empty(rows.shape, dtype=np.uint16)
                    _float16_bits(rows.view(np.uint32), bits)
                    rows = bits.view(np.float16)
                yield rows

        def label_chunks():
            for lo in range(0, num_nodes, DRAW_CHUNK):
                yield np.where(labelled[lo : lo + DRAW_CHUNK], classes[lo : lo + DRAW_CHUNK], -1).astype(np.int64)

        options.setdefault("split_fractions", (0.6, 0.2, 0.2))
        edges = EdgeSource("synthetic edges", edge_chunks, num_edges // 2, weighted=False, release=pairs.delete)
        graph = GraphInput.one_type(
            edges, num_nodes=num_nodes, features=Source("synthetic features", feature_chunks, num_nodes),
            labels=Source("synthetic labels", label_chunks, num_nodes),
            provenance={"importer": "synth", "model": "degree-corrected SBM", "num_nodes": num_nodes,
                        "num_edges": num_edges, "feature_dim": feature_dim, "num_classes": num_classes,
                        "label_fraction": label_fraction, "seed": seed, "p_intra": P_INTRA})
        return build_dataset(out_dir, graph, BuildOptions(undirected=True, num_classes=num_classes, seed=seed,
                                                          **options))
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


GENERATORS = {
    "power-law": _Generator("--nodes and --edges size the graph", feature_dim=100, num_classes=47,
                            write=_write_power_law),
    "mag": _Generator("--typed sizes the graph with --scale and keeps its node order", feature_dim=128,
                      num_classes=349, write=_write_mag,
                      refuses=("--nodes", "--edges", "--label-fraction", "--preset", "--reorder")),
    "igbh": _Generator("--preset {preset} sizes the graph with IGBH's counts and --scale and keeps its node order",
                       feature_dim=1024, num_classes=19, write=_write_igbh,
                       refuses=("--typed", "--nodes", "--edges", "--label-fraction", "--reorder")),
}
"""The generators :func:`synthesize` chooses from (:func:`_generator`), read once per call."""
