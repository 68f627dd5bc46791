"""CLI verbs ``partition`` (split a dataset into parts) and ``partition-info`` (check a partitioned folder)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

METHODS = ("ldg", "hash")  # partitioner.METHODS; the verbs import their modules when they run, so the CLI starts fast


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "partition", help="split a dataset into N parts for multi-machine training",
        description="Partition a dataset (one node type or several: each split across the parts) into N parts "
                    "(each a dataset folder of its owned nodes' in-edges, "
                    "features, labels and splits, plus id maps) and a checksummed manifest. Streams the CSC in "
                    "chunks: memory grows with the node count, not the edge count. Writes atomically.")
    p.add_argument("data", type=Path, help="dataset folder (made by `sparsetrain preprocess` or `synth`)")
    p.add_argument("--parts", type=int, required=True, help="number of parts (one per rank)")
    p.add_argument("--out", type=Path, required=True, help="partitioned folder to create")
    p.add_argument("--method", choices=METHODS, default="ldg",
                   help="'ldg': streaming greedy that keeps neighbours together under a balance cap (default); "
                        "'hash': random, the baseline")
    p.add_argument("--imbalance", type=float,
                   help="ldg: no part gets more than (1 + this) * nodes / parts nodes (default 0.05)")
    p.add_argument("--passes", type=int,
                   help="ldg: at most this many passes over the graph, each re-placing every node, fewer once a pass "
                        "moves under 0.1%% of them (default 10; 1: one-pass LDG)")
    p.add_argument("--seed", type=int, help="hash: the seed of the random placement (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace a partitioned folder at --out")
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    p.set_defaults(run=_partition)
    q = sub.add_parser("partition-info", help="check a partitioned folder and print its parts",
                       description="Check that every part a partitioned folder's manifest lists is there and belongs "
                                   "to it, that every array of every part and the owner map match the sha256 the "
                                   "manifest chain recorded, and print the parts and the partition quality.")
    q.add_argument("path", type=Path, help="partitioned folder")
    q.add_argument("--no-verify", action="store_true",
                   help="skip the arrays' sha256 (sizes and shapes are still checked)")
    q.set_defaults(run=_info)


def _partition(args: argparse.Namespace) -> int:
    from sparsetrain.errors import DatasetError
    from sparsetrain.partition.partitioner import PartitionOptions, partition_dataset

    try:
        opts = PartitionOptions(args.parts, method=args.method, imbalance=args.imbalance, passes=args.passes,
                                seed=args.seed,
                                overwrite=args.overwrite, quiet=args.quiet)
        manifest = partition_dataset(args.data, args.out, opts)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise DatasetError(f"{exc.filename or args.out}: {exc.strerror or exc}; check the path, its permissions "
                           "and the free disk space") from None
    if not args.quiet:
        _print(args.out, manifest)
    return 0


def _info(args: argparse.Namespace) -> int:
    from sparsetrain.partition.manifest import check_parts, read_manifest

    manifest = read_manifest(args.path)
    check_parts(args.path, manifest, arrays="sizes" if args.no_verify else "sha256")
    from sparsetrain.partition.per_type import check_typed_files

    check_typed_files(args.path, manifest)
    _print(args.path, manifest)
    return 0


def _print(path: Path, manifest: dict) -> None:
    q = manifest["quality"]
    print(f"{path}: {manifest['num_parts']} parts ({manifest['method']}), partition {manifest['partition_id']}")
    print(f"  edge cut {q['edge_cut']} ({100 * q['edge_cut_fraction']:.1f}% of edges), node balance "
          f"{q['node_balance']:.3f}, edge balance {q['edge_balance']:.3f}, halo {q['halo_fraction']:.3f} x nodes")
    if "node_balance_by_type" in q:
        print("  node balance by type: " + ", ".join(f"{t} {b:.3f}" for t, b in q["node_balance_by_type"].items()))
        print("  edge cut by edge type: " + ", ".join(f"{et} {100 * c:.1f}%"
                                                       for et, c in q["edge_cut_fraction_by_type"].items()))
    for part in manifest["parts"]:
        print(f"  {part['folder']}: {part['num_owned']} owned, {part['num_halo']} halo, {part['num_edges']} edges, "
              f"splits {json.dumps(part['splits'])}")
        if "types" in part:
            print("    " + ", ".join(f"{t}: {c['num_owned']} owned + {c['num_halo']} halo"
                                     for t, c in part["types"].items()))
