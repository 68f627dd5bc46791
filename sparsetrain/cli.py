"""The ``sparsetrain`` command line: one parser, verbs registered by the packages that own them.

Every error reaches the user as one line on stderr and exit code 1: a bad flag or value
(:class:`~sparsetrain.errors.SettingError`, without argparse's usage block), any
:class:`~sparsetrain.errors.SparsetrainError`, a missing path, and any other system error (a full disk,
a permission, a folder where a file goes): :func:`main` is the one guard of every verb. Library warnings
print as one ``warning: ...`` line, never with their source line. Ctrl-C prints what the verb had
written (``train``: its checkpoints and how to resume; ``preprocess``: nothing, its temp folder is removed).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import warnings

from sparsetrain._version import __version__
from sparsetrain.errors import SettingError, SparsetrainError


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise :class:`SettingError` (one line, exit 1) instead of printing the usage.

    A value that starts with ``-`` and a digit or a dot (``--link-split -0.1,0.5,0.6``, ``--seed -3``) is read as the
    flag's value, so its own check says what is wrong with it, not argparse's "expected one argument".
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message: str):
        hint = f"; see `{self.prog} --help`" if message.startswith("the following arguments are required") else ""
        raise SettingError(f"{self.prog}: {message}{hint}")

    def parse_args(self, args=None, namespace=None) -> argparse.Namespace:
        """Like argparse's, but an unknown flag is reported by the verb it was given to."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            prog = f"{self.prog} {parsed.verb}" if getattr(parsed, "verb", None) else self.prog
            raise SettingError(f"{prog}: unrecognized arguments: {' '.join(extra)}; see `{prog} --help`")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    from sparsetrain.datasets import cli as dataset_cli
    from sparsetrain.engine import cli as engine_cli
    from sparsetrain.engine import predict_cli
    from sparsetrain.partition import cli as partition_cli

    parser = Parser(
        prog="sparsetrain",
        description="Train graph models and mixture-of-experts layers on a GPU-centric data path.",
    )
    parser.add_argument("--version", action="version", version=f"sparsetrain {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)  # verbs' parsers are Parsers too
    dataset_cli.register(sub)
    engine_cli.register(sub)
    predict_cli.register(sub)
    partition_cli.register(sub)
    return parser


def _terminate(signum, frame):
    raise KeyboardInterrupt  # run the same clean-up as Ctrl-C (temp folders removed)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


@contextlib.contextmanager
def _one_line_warnings():
    """Warnings print as ``warning: <message>`` (no file, line number or source line) while the CLI runs."""
    saved = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        yield
    finally:
        warnings.formatwarning = saved


def main(argv: list[str] | None = None) -> int:
    args = None
    with _one_line_warnings():
        try:
            args = build_parser().parse_args(argv)
            signal.signal(signal.SIGTERM, _terminate)
            return args.run(args)
        except SparsetrainError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except FileNotFoundError as exc:
            print(f"error: {exc.filename}: no such file or folder; check the path", file=sys.stderr)
            return 1
        except OSError as exc:
            named = exc.filename or getattr(args, "out", None) or getattr(args, "path", None)  # the verb's output
            where = f"{named}: " if named else ""
            print(f"error: {where}{exc.strerror or exc}; check the path, its permissions and the free disk space",
                  file=sys.stderr)
            return 1
        except KeyboardInterrupt as exc:  # a verb that wrote something says what (train's TrainingInterrupted)
            print(str(exc) or "interrupted; nothing was written", file=sys.stderr)
            return 130


if __name__ == "__main__":
    raise SystemExit(main())
