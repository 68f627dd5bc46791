"""The ``sparsetrain`` command line: one parser, verbs registered by the packages that own them."""

from __future__ import annotations

import argparse
import signal
import sys

from sparsetrain._version import __version__
from sparsetrain.errors import SparsetrainError


def build_parser() -> argparse.ArgumentParser:
    from sparsetrain.datasets import cli as dataset_cli
    from sparsetrain.engine import cli as engine_cli

    parser = argparse.ArgumentParser(
        prog="sparsetrain",
        description="Train graph models and mixture-of-experts layers on a GPU-centric data path.",
    )
    parser.add_argument("--version", action="version", version=f"sparsetrain {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    dataset_cli.register(sub)
    engine_cli.register(sub)
    return parser


def _terminate(signum, frame):
    raise KeyboardInterrupt  # run the same clean-up as Ctrl-C (temp folders removed)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.run(args)
    except SparsetrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"error: {exc.filename}: no such file or folder; check the path", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; nothing was written", file=sys.stderr)
        return 130
