"""CLI verbs for datasets: ``preprocess``, ``synth``, ``info``."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import numpy as np

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.presets import DEFAULT_SPLIT, IGB_SIZES, IGBH_PRESETS, PRESETS
from sparsetrain.datasets.reorder import METHODS
from sparsetrain.errors import DatasetError, SettingError


def _add_build_options(p: argparse.ArgumentParser, with_cleaning: bool = True) -> None:
    if with_cleaning:
        p.add_argument("--undirected", action="store_true", help="add the reverse of every edge (duplicates merged)")
        p.add_argument("--drop-self-loops", action="store_true", help="remove edges u -> u")
        p.add_argument("--drop-duplicates", action="store_true", help="merge repeated edges (weights summed)")
        p.add_argument("--num-classes", type=int, help="labels must lie in [0, C) (default: largest label + 1)")
    p.add_argument("--reorder", choices=["none", *METHODS], default="none",
                   help="renumber nodes: 'degree' (hubs first), 'rcm' (neighbors get close ids) or 'cluster' (graph "
                        "partitions contiguous, kept in clusters.npy for --model gt); the map back is kept")
    p.add_argument("--feature-dtype", choices=fmt.FEATURE_DTYPES, help="stored feature dtype (default float32)")
    p.add_argument("--split", type=_fractions, metavar="random|TRAIN,VAL,TEST",
                   help="random split of the labelled nodes when no split files are given: 'random' (0.6,0.2,0.2) or "
                        "its fractions; "
                   "with --ogb, a random split instead of the folder's (required when the folder has none)")
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice")
    p.add_argument("--out", required=True, type=Path, help="dataset folder to create")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary")


def _fractions(text: str) -> tuple[float, float, float]:
    if text == "random":
        return DEFAULT_SPLIT
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected three numbers like 0.6,0.2,0.2") from None
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: expected three numbers like 0.6,0.2,0.2")
    return parts


def _options(args: argparse.Namespace) -> dict:
    """The build options the flags give (the verb's importer refuses those its input does not use)."""
    options = {"seed": args.seed, "overwrite": args.overwrite, "quiet": args.quiet}
    if args.feature_dtype:
        options["feature_dtype"] = args.feature_dtype
    if args.split:
        options["split_fractions"] = args.split
    for name in ("reorder", "undirected", "drop_self_loops", "drop_duplicates", "num_classes", "link_split",
                 "link_negatives", "add_reverse"):
        value = getattr(args, name, None)
        if value is not None and value is not False and value != "none":
            options[name] = value
    return options


def _one_line(verb):
    """Running out of memory in a verb as a one-line error (other system errors: the one guard in ``cli.main``)."""

    @functools.wraps(verb)
    def run(args: argparse.Namespace) -> int:
        try:
            return verb(args)
        except MemoryError:
            raise DatasetError(
                f"out of memory in `sparsetrain {args.verb}`; pass --num-nodes / --num-classes if an id or label is "
                "wrong, or use a larger machine"
            ) from None

    return run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "preprocess",
        help="import a graph (edge list + node files, an OGB or an IGB folder) into a dataset folder",
        description="Import a graph into the sparsetrain dataset format. Either --edges (CSV/Parquet/.npy) with "
                    "optional "
        "node files, --ogb DIR (an OGB node-property folder) or --igb ROOT (an IGBH folder). Streams in bounded "
        "memory; writes atomically.",
    )
    p.register("action", None, _Once)  # every single-value flag: given twice is refused, not silently the last
    p.register("action", "store", _Once)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--edges", type=Path, help="edge list: CSV (src,dst[,weight]; .gz ok), Parquet, or .npy "
                                                "[2,E]/[E,2]")
    src.add_argument("--ogb", type=Path, help="OGB node-property folder with raw/ and split/ (a heterogeneous one, "
                                              "e.g. ogbn-mag, gives a typed dataset)")
    src.add_argument("--igb", type=Path, metavar="ROOT",
                     help="IGB heterogeneous folder (ROOT/<size>/processed/ as IGB ships it; IGBH: paper, author, "
                          "institute, fos[, journal, conference]) with MLPerf's reference reverse edges")
    src.add_argument("--typed-edges", action="append", metavar="SRC,REL,DST=FILE",
                     help="typed dataset: the edge list of one edge type (src-type ids, dst-type ids); repeat per edge "
                          "type")
    typed = p.add_argument_group("typed (heterogeneous) datasets: --typed-edges or a heterogeneous --ogb folder")
    typed.add_argument("--node-features", action="append", default=[], metavar="TYPE=FILE",
                       help="features of one node type (one row per node)")
    typed.add_argument("--node-labels", action="append", default=[], metavar="TYPE=FILE",
                       help="labels of one node type")
    typed.add_argument("--node-count", action="append", default=[], metavar="TYPE=N",
                       help="node count of one type (default: its file rows, else largest id + 1)")
    typed.add_argument("--target-type",
                       help="node type the labels and splits are for (default: the only labelled type)")
    typed.add_argument("--add-reverse", action="store_true", help="also store (dst, rev_REL, src) for every edge type")
    p.add_argument("--features", type=Path, help="node features: .npy [N,D], Parquet, or CSV (one row per node)")
    p.add_argument("--labels", type=Path, help="node labels: .npy [N], Parquet, or CSV (one per line)")
    for name in fmt.SPLIT_NAMES:
        p.add_argument(f"--{name}-idx", type=Path, help=f"node ids of the {name} split (.npy, CSV or Parquet)")
    p.add_argument("--ogb-split", help="which folder under split/ to use (default: the first)")
    igb = p.add_argument_group("IGB folders (--igb)")
    igb.add_argument("--size", choices=IGB_SIZES, default="tiny", help="which IGBH size ROOT holds (default tiny)")
    igb.add_argument("--classes", type=int, choices=(19, 2983), default=19,
                     help="paper labels: node_label_19 or node_label_2K (default 19)")
    igb.add_argument("--igb-split", choices=("igb", "mlperf"), default="igb",
                     help="igb: the first 60%% of labelled papers train, next 20%% validate, the rest test (IGB's "
                          "loader); mlperf: MLPerf's split_seeds.py (seeded permutation, 0.5%% validate)")
    p.add_argument("--link-split", type=_fractions, metavar="TRAIN,VAL,TEST",
                   help="link prediction: split the edges (e.g. 0.85,0.05,0.10; each undirected edge once), remove the "
                        "val/test edges from the graph and draw fixed strict negatives for them (--seed)")
    p.add_argument("--link-negatives", type=int, default=100, metavar="K",
                   help="fixed negatives per val/test positive with --link-split, at least 1 (default 100: MRR "
                        "ranks each positive among its K)")
    p.add_argument("--num-nodes", type=int, help="number of nodes (default: rows of --features, else largest id + 1)")
    p.add_argument("--edge-time-column", metavar="NAME",
                   help="temporal graphs: the column of the edge list(s) (CSV/Parquet header name) holding each edge's "
                        "time (integers or floats), stored in the dataset's edge order for `train --temporal`")
    p.add_argument("--node-time", action="append", default=[], metavar="FILE|TYPE=FILE",
                   help="temporal graphs: node times, one per node (.npy [N], or CSV/Parquet of one column); with "
                        "--typed-edges TYPE=FILE per node type, repeatable. `train --temporal` uses a seed's node time "
                        "as its time")
    _add_build_options(p)
    p.set_defaults(run=_one_line(_preprocess))

    p = sub.add_parser(
        "synth",
        help="generate a synthetic power-law graph with learnable communities",
        description="Generate a power-law graph (degree-corrected stochastic block model) whose features and labels "
                    "follow "
        "its communities, deterministic for --seed. --edges counts directed edges (each undirected edge twice).",
    )
    p.add_argument("--preset", choices=sorted([*PRESETS, *IGBH_PRESETS]),
                   help="sizes of a known graph: papers100m = ogbn-papers100M (111M nodes, "
                   "1.6B edges, 128 float16 features, 172 classes, 1.39%% labelled); other flags override its values; "
                   "igbh-tiny|small|medium|large: an IGBH-shaped typed graph with IGB's per-type counts (times "
                   "--scale), 1024 features on every type, 19 paper classes, MLPerf's reference reverse edges")
    p.add_argument("--nodes", type=int, help="number of nodes (required without --preset or --typed)")
    p.add_argument("--edges", type=int, help="number of directed edges, even (required without --preset or --typed)")
    p.add_argument("--feature-dim", type=int, help="feature dimension (default 100; --typed: 128)")
    p.add_argument("--classes", type=int, help="number of classes / communities (default 47; --typed: 349)")
    p.add_argument("--label-fraction", type=float, help="fraction of nodes with a label, the rest -1 (default 1)")
    p.add_argument("--typed", action="store_true", help="an ogbn-mag-shaped typed graph (papers, authors, "
                                                         "institutions, fields; "
                   "cites, writes, affiliated_with, has_topic and their reverses) with learnable paper labels")
    p.add_argument("--scale", type=float, default=1.0,
                   help="--typed: size relative to ogbn-mag (1.0: 1.9M nodes, 21M edges + reverses); "
                        "--preset igbh-*: relative to that IGBH size")
    _add_build_options(p, with_cleaning=False)
    p.set_defaults(run=_one_line(_synth))

    p = sub.add_parser("info", help="describe a dataset folder: sizes, degrees, checksums, structure",
                       description="Print a dataset's sizes, degree statistics, splits, and checksum and structure "
                                   "status "
                       "(monotone column pointers, every id, label and weight in range).")
    p.add_argument("path", type=Path, help="dataset folder")
    p.add_argument("--no-verify", action="store_true", help="skip the sha256 and structure checks of every file")
    p.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=_one_line(_info))


def _pairs(values: list[str], flag: str, key=str) -> dict:
    """``TYPE=VALUE`` flags as a dict by ``key(TYPE)``; a type given twice is refused (the later would replace it)."""
    out = {}
    for text in values:
        name, sep, value = (part.strip() for part in text.partition("="))
        if not sep or not name or not value:
            raise SettingError(f"{flag} {text!r}: write it as KEY=VALUE (e.g. {flag} paper=paper_feat.npy)")
        if key(name) in out:
            raise SettingError(f"{flag} is given twice for {name} ({out[key(name)]} and {value}); give each type once "
                               "(merge its files into one)")
        out[key(name)] = value
    return out


_OGB_SPLIT = "an --ogb folder has its split (choose it with --ogb-split, or --split for a random one)"
_EDGES_AS_GIVEN = "a typed dataset keeps edges as given (use --add-reverse for reverse edge types)"
# Which inputs each flag applies to ("edges": --edges, "typed": --typed-edges, "ogb"/"typed-ogb": an --ogb folder),
# and what to do instead where it does not.
_APPLIES = {
    "features": (("edges",), "give node features with --node-features TYPE=FILE; an --ogb folder has its own"),
    "labels": (("edges",), "give labels with --node-labels TYPE=FILE; an --ogb folder has its own"),
    "num_nodes": (("edges", "ogb"), "give counts with --node-count TYPE=N; a typed --ogb folder has its own"),
    "train_idx": (("edges", "typed"), _OGB_SPLIT),
    "val_idx": (("edges", "typed"), _OGB_SPLIT),
    "test_idx": (("edges", "typed"), _OGB_SPLIT),
    "ogb_split": (("ogb", "typed-ogb"), "it chooses a split folder of --ogb; give split files with --train-idx etc."),
    "link_split": (("edges", "ogb"), "link prediction splits the edges of a homogeneous graph (--edges or --ogb)"),
    "node_features": (("typed",), "it is for --typed-edges; use --features (--edges); an --ogb folder has its own"),
    "node_labels": (("typed",), "it is for --typed-edges; use --labels (--edges); an --ogb folder has its own"),
    "node_count": (("typed", "igb"), "it is for --typed-edges or --igb; use --num-nodes"),
    **dict.fromkeys(("size", "classes", "igb_split"), (("igb",), "it is for --igb folders")),
    "split": (("edges", "typed", "ogb", "typed-ogb"), "an IGB folder's split is --igb-split igb or mlperf"),
    "target_type": (("typed", "typed-ogb"), "it chooses the labelled type of a typed dataset"),
    "add_reverse": (("typed", "typed-ogb"), "it is for typed datasets; use --undirected"),
    "edge_time_column": (("edges", "typed"), "an --ogb folder has no edge times; import its edges as an edge list "
                                             "with a time column (--edges or --typed-edges)"),
    "node_time": (("edges", "typed"), "an --ogb folder has no node times; import it as edge and node files "
                                      "(--edges or --typed-edges)"),
    **dict.fromkeys(("undirected", "drop_self_loops", "drop_duplicates", "reorder"),
                    (("edges", "ogb"), _EDGES_AS_GIVEN)),
}
_INPUTS = {"edges": "--edges", "typed": "--typed-edges", "ogb": "a homogeneous --ogb folder",
           "typed-ogb": "a typed --ogb folder", "igb": "an --igb folder"}


class _Once(argparse.Action):
    """Store a flag's value and record each use, so that a flag given twice is refused rather than the first dropped."""

    def __call__(self, parser, namespace, values, option_string=None):
        vars(namespace).setdefault("given_flags", {}).setdefault(self.dest, []).append(option_string)
        setattr(namespace, self.dest, values)


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return dest in getattr(args, "given_flags", {}) or value is True or (isinstance(value, list) and bool(value))


def _input_kind(args: argparse.Namespace) -> str:
    """Which importer the flags feed: "edges", "typed", "ogb" or "typed-ogb"."""
    from sparsetrain.datasets.ogb_folder import ogb_folder_has_types

    if args.typed_edges:
        return "typed"
    if args.igb is not None:
        return "igb"
    if args.edges is not None:
        return "edges"
    return "typed-ogb" if ogb_folder_has_types(args.ogb) else "ogb"


def _check_flags(args: argparse.Namespace, kind: str) -> None:
    """Every flag given is used: a flag given twice, or one this input does not use, is refused in one line."""
    for uses in getattr(args, "given_flags", {}).values():
        if len(uses) > 1:
            raise SettingError(f"{uses[0]} is given {len(uses)} times; a later value would replace the first: give it "
                               "once")
    for dest, (kinds, instead) in _APPLIES.items():
        if _given(args, dest) and kind not in kinds:
            raise SettingError(f"--{dest.replace('_', '-')} does not apply to {_INPUTS[kind]}: {instead}")
    labelled = {"edges": _given(args, "labels"), "typed": _given(args, "node_labels")}.get(kind, True)
    featured = {"edges": _given(args, "features"), "typed": _given(args, "node_features")}.get(kind, True)
    if _given(args, "num_classes") and not labelled:
        raise SettingError(f"--num-classes {args.num_classes} without labels: give the labels (--labels or "
                           "--node-labels), or drop it")
    if _given(args, "feature_dtype") and not featured:
        raise SettingError(f"--feature-dtype {args.feature_dtype} without features: give them (--features or "
                           "--node-features), or drop it")
    split_files = any(_given(args, f"{n}_idx") for n in fmt.SPLIT_NAMES) or _given(args, "ogb_split")
    if _given(args, "split") and (not labelled or split_files):
        why = "there are no labels to split" if not labelled else "a split is given (split files or --ogb-split)"
        raise SettingError(f"--split draws a random split, but {why}; drop --split")
    if _given(args, "link_negatives"):
        if not _given(args, "link_split"):
            raise SettingError("--link-negatives counts the negatives of --link-split's validation/test edges; add "
                               "--link-split or drop it")
        from sparsetrain.datasets.edge_split import check_negatives

        check_negatives(args.link_negatives)


def _preprocess(args: argparse.Namespace) -> int:
    from sparsetrain.datasets.files import from_files, parse_edge_type
    from sparsetrain.datasets.ogb_folder import from_ogb

    kind = _input_kind(args)
    _check_flags(args, kind)
    if kind == "igb":
        from sparsetrain.datasets.igb import from_igb

        ds = from_igb(args.igb, args.out, size=args.size, classes=args.classes, split=args.igb_split,
                      num_nodes=_counts(args.node_count) or None, **_options(args))
    elif kind in ("ogb", "typed-ogb"):
        split = "random" if args.split else args.ogb_split
        ds = from_ogb(args.ogb, args.out, split=split, num_nodes=args.num_nodes, target_type=args.target_type,
                      **_options(args))
    else:
        splits = {n: getattr(args, f"{n}_idx") for n in fmt.SPLIT_NAMES if getattr(args, f"{n}_idx")}
        if kind == "typed":
            edges = _pairs(args.typed_edges, "--typed-edges", parse_edge_type)
            tables = {"features": _pairs(args.node_features, "--node-features"),
                      "labels": _pairs(args.node_labels, "--node-labels"),
                      "node_time": _pairs(args.node_time, "--node-time"), "num_nodes": _counts(args.node_count)}
        else:
            edges = args.edges
            tables = {"features": args.features, "labels": args.labels, "node_time": _one_node_time(args.node_time),
                      "num_nodes": args.num_nodes}
        ds = from_files(args.out, edges, splits=splits, edge_time_column=args.edge_time_column,
                        target_type=args.target_type, **tables, **_options(args))
    if not args.quiet:
        print(f"wrote {ds.path}: {_summary(ds)}{_split_note(ds.meta)}{_time_note(ds)}")
    return 0


def _counts(values: list[str]) -> dict[str, int]:
    """``--node-count TYPE=N`` flags."""
    counts = {}
    for t, v in _pairs(values, "--node-count").items():
        try:
            counts[t] = int(v)
        except ValueError:
            raise SettingError(f"--node-count {t}={v}: the count must be a whole number") from None
        if counts[t] < 0:
            raise SettingError(f"--node-count {t}={v}: a node count is a whole number >= 0") from None
    return counts


def _summary(ds) -> str:
    """A written dataset's sizes, for the summary line: totals, then each node type's features and the target's
    classes (a type named only when the graph has named types: :func:`_label`)."""
    features = ", ".join(f"{_label(t)}{f.shape[1]} features" for t, f in ds.features_by_type.items()) or "no features"
    return (f"{sum(ds.num_nodes_by_type.values())} nodes, {ds.graph.num_edges} edges, {features}, "
            f"{_label(ds.target_type, note=' (target)')}{_classes(ds)}")


def _label(name: str | tuple | None, width: int = 0, note: str = "") -> str:
    """A node or edge type as the ``info`` and summary lines name it (``"paper "``, ``"paper, cites, paper "``, with
    ``note``, padded to ``width``); nothing for a homogeneous graph's one node and edge type (or no type)."""
    if name is None or name in (fmt.NODE, fmt.EDGE):
        return ""
    return f"{(name if isinstance(name, str) else ', '.join(name)) + note:<{width}} "


def _one_node_time(values: list[str]) -> Path | None:
    """``--node-time FILE`` of an --edges import: one file (a homogeneous graph has one node type)."""
    if len(values) > 1:
        raise SettingError(f"--node-time is given {len(values)} times; an --edges graph has one node type: give one "
                           "file of one time per node")
    return Path(values[0]) if values else None


def _time_note(ds) -> str:
    """Which times the dataset stores, for the summary line."""
    parts = [what for what, times in (("node", ds.node_time_by_type), ("edge", ds.edge_time_by_type)) if times]
    return f"; {' and '.join(parts)} times" if parts else ""


def _split_note(meta: dict) -> str:
    """Says when the node split was drawn at random (no split was given)."""
    drawn = meta.get("splits_from")
    if not drawn:
        return ""
    return f"; random split {'/'.join(f'{f:g}' for f in drawn['random'])} (seed {drawn['seed']})"


_SYNTH_ARGS = {"typed": "typed", "preset": "preset", "scale": "scale", "feature_dim": "feature_dim",
               "num_classes": "classes", "label_fraction": "label_fraction"}
"""``synthesize``'s arguments and the flags (``args`` names) that give them; the generator refuses what it ignores."""


def _synth(args: argparse.Namespace) -> int:
    from sparsetrain.datasets.synth import synthesize

    given = {name: getattr(args, dest) for name, dest in _SYNTH_ARGS.items()}
    ds = synthesize(args.out, args.nodes, args.edges, **given, **_options(args))
    if not args.quiet:
        print(f"wrote {ds.path}: {_summary(ds)}")
    return 0


def _classes(ds) -> str:
    return "no labels" if ds.num_classes is None else f"{ds.num_classes} classes"


def _human(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if num_bytes < 1024 or unit == "TiB":
            return f"{num_bytes:.1f} {unit}" if unit != "B" else f"{int(num_bytes)} B"
        num_bytes /= 1024
    return ""


def _info(args: argparse.Namespace) -> int:
    from sparsetrain.datasets.checks import check_trainable_labels
    from sparsetrain.datasets.dataset import load, verify_checksums, verify_structure
    from sparsetrain.datasets.outputs import PARTITIONED, folder_kind

    if folder_kind(Path(args.path)) == PARTITIONED:
        raise DatasetError(f"{args.path}: is a partitioned folder, not a dataset; check it with `sparsetrain "
                           f"partition-info {args.path}` (or one part with `sparsetrain info {args.path}/part-0`)")
    ds = load(args.path)
    meta = ds.meta
    status = {} if args.no_verify else verify_checksums(ds.path, meta)
    bad = [name for name, ok in status.items() if not ok]
    if not args.no_verify and not bad:
        verify_structure(ds)  # only when the bytes are the recorded ones: a damaged file is reported as a mismatch
        check_trainable_labels(ds)  # what `train` checks of the labels and splits
    lines = [f"dataset      {ds.path}  (format version {ds.format_version}, {meta.get('created_by', '?')})"]
    lines += _dataset_lines(ds)
    size = sum((ds.path / name).stat().st_size for name in meta["files"])
    lines.append(f"size         {_human(size)} in {len(meta['files'])} files")
    if args.no_verify:
        lines.append("checksums    not checked (--no-verify)")
    else:
        lines.append(f"checksums    all {len(status)} files OK, structure OK" if not bad else
                     f"checksums    MISMATCH: {', '.join(bad)} (re-run `sparsetrain preprocess`)")
    print("\n".join(lines))
    return 1 if bad else 0


def _degrees(ds, edge_type_index: int) -> np.ndarray:
    """In-degrees of one edge type's columns, from the flat column pointers."""
    counts, edge_types = ds.meta["node_types"], ds.edge_types
    first = sum(counts[et[2]] for et in edge_types[:edge_type_index])
    indptr = ds.graph.indptr[first : first + counts[edge_types[edge_type_index][2]] + 1].numpy()
    return np.diff(indptr)


def _field(name: str, values: list[str], none: str | None = None) -> list[str]:
    """One ``info`` field: its name, then one value a line (a value a type; ``none`` when there is none)."""
    if not values:
        return [] if none is None else [f"{name:<12} {none}"]
    return [f"{name if k == 0 else '':<12} {value}" for k, value in enumerate(values)]


def _dataset_lines(ds) -> list[str]:
    """The ``info`` lines of a dataset, a value per node or edge type (named by :func:`_label`)."""
    meta, counts, edges = ds.meta, ds.num_nodes_by_type, ds.num_edges_by_type
    node_width = max(len(_label(t)) for t in counts) - 1
    edge_width = max(len(_label(et)) for et in edges) - 1
    kind = (f"  ({'directed' if ds.directed else 'undirected: both directions stored'}"
            f"{', weighted' if meta.get('has_edge_weights') else ''}, indices {ds.graph.indices.dtype})")
    degrees = [(et, _degrees(ds, k)) for k, et in enumerate(edges)]
    times = [f"node {_label(t)}{_time_range(v)}" for t, v in ds.node_time_by_type.items()]
    times += [f"edge {_label(et)}{_time_range(v)}" for et, v in ds.edge_time_by_type.items()]
    lines = [
        *_field("nodes", [f"{_label(t, node_width)}{n:,}" for t, n in counts.items()]),
        *_field("edges", [f"{_label(et, edge_width)}{n:,}{kind if k == 0 else ''}"
                          for k, (et, n) in enumerate(edges.items())]),
        *_field("in-degree", [f"{_label(et, edge_width)}min {d.min()}  mean {d.mean():.2f}  median {np.median(d):.0f}  "
                              f"p99 {np.percentile(d, 99):.0f}  max {d.max()}  isolated {(d == 0).sum():,}"
                              for et, d in degrees]),
        *_field("features", [f"{_label(t, node_width)}{f.shape[1]} x {f.np_dtype}"
                             for t, f in ds.features_by_type.items()], "none"),
        *_field("edge feat.", [f"{_label(et, edge_width)}{f.shape[1]} x {f.np_dtype}"
                               for et, f in ds.edge_features_by_type.items()]),
        *_field("classes", [f"{_label(t, node_width)}{ds.num_classes_of(t)}" for t in ds.labels_by_type]),
        *([] if ds.labels_by_type else ["labels       none"]),
        *_field("splits", [_label(ds.target_type, note=" (target)")
                           + "  ".join(f"{k} {v.numel():,}" for k, v in ds.split.items())] if ds.split else [], "none"),
    ]
    if times:
        lines.append("times        " + "  ".join(times) + "  (train --temporal)")
    if ds.edge_split:
        lines.append("link split   " + "  ".join(
            f"{k} {v.pos.shape[1]:,}" + ("" if v.neg is None else f" (+{v.neg.shape[1]:,} neg)")
            for k, v in ds.edge_split.items()))
    if meta.get("permutation"):
        lines.append(f"reordered    by {meta['permutation']['method']} (original ids in {meta['permutation']['file']})")
    return lines


def _time_range(times) -> str:
    """``int64 in [lo, hi]``: a stored time array's dtype and range."""
    if times.numel() == 0:
        return f"{str(times.dtype).removeprefix('torch.')} (empty)"
    lo, hi = (f"{v:g}" if isinstance(v, float) else str(v) for v in (times.min().item(), times.max().item()))
    return f"{str(times.dtype).removeprefix('torch.')} in [{lo}, {hi}]"
