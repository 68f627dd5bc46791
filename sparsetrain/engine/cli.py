"""The ``sparsetrain train`` verb: the main job."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from sparsetrain.engine.settings import FLAGS, PARTS, TrainSettings, field_docs, field_types, fields_of, flag_names
from sparsetrain.errors import InputError, SettingError
from sparsetrain.sampling.fanouts import Fanouts


def _fanouts(text: str) -> Fanouts:
    """``--fanout``'s argparse type: :meth:`Fanouts.parse`, its error as argparse's."""
    try:
        return Fanouts.parse(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _checked(cls, name: str, kind: type):
    """An argparse type for the number field ``name`` of the settings part ``cls``: ``kind(text)``, then the field's
    own check (``cls(name=value)``), its message as argparse's (``'-1': must be a positive integer``)."""

    def parse(text: str):
        value = kind(text)  # a ValueError: argparse's "invalid int value: '1.5'"
        try:
            cls(**{name: value})
        except SettingError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {str(exc).split(': ', 1)[-1]}") from None
        return value

    parse.__name__ = kind.__name__
    return parse


class _Given(argparse.Action):
    """Stores the flag's value (a boolean flag's ``--x`` True, ``--no-x`` False) and notes that it was given, so that
    a given flag overrides ``--config``'s file and an absent one does not."""

    def __call__(self, parser, namespace, values, option_string=None):
        if self.nargs == 0:
            values = not option_string.startswith("--no-")
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def _help(doc: str, default) -> str:
    """A field's docstring as argparse help: reST roles and literals as plain words, ``None`` as not given, the
    default appended."""
    text = re.sub(r":\w+:`~?(?:[\w.]*\.)?(\w+)`", r"\1", doc).replace("``", "")
    text = " ".join(text.replace("None: ", "not given: ").split()).replace("%", "%%")
    if default is None or isinstance(default, bool):
        return text
    shown = ",".join(map(str, default.as_list())) if isinstance(default, Fanouts) else (
        f"{default:g}" if isinstance(default, float) else str(default))
    return f"{text.removesuffix('.')} (default {shown})."


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per settings field (:data:`~sparsetrain.engine.settings.FLAGS`), everything about it read from the
    field: the name, the type from the annotation (a bool is ``--x`` / ``--no-x``), the default, ``choices`` and the
    help from its docstring; an old name in ``metadata["hidden_flags"]`` still works but stays off ``--help``."""
    for flat, (part, key) in FLAGS.items():
        cls = PARTS[part]
        f = fields_of(cls)[key]
        default = f.default_factory() if callable(f.default_factory) else f.default
        kind = next(k for k in field_types(cls, key) if k is not type(None))
        flags = flag_names(flat)
        options = {"dest": flat, "default": default, "action": _Given, "help": _help(field_docs(cls)[key], default)}
        if kind is bool:
            parser.add_argument(*flags, f"--no-{flags[0][2:]}", nargs=0, **options)
            continue
        if "choices" in f.metadata:
            options["choices"] = f.metadata["choices"]
        typed = {Fanouts: _fanouts, int: _checked(cls, key, int), float: _checked(cls, key, float)}.get(kind, kind)
        parser.add_argument(*flags, type=typed, **options)
        for old in f.metadata.get("hidden_flags", ()):
            parser.add_argument(old, type=typed, **{**options, "help": argparse.SUPPRESS})


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a GNN or graph transformer with sampled minibatches (no arguments: GraphSAGE on Cora)",
        description="Train GraphSAGE / GCN / GAT / a graph transformer (gt) on a dataset folder with fused neighbor "
                    "sampling and an overlapped loader; prints per-epoch accuracy and the final test accuracy. Under "
                    "torchrun it runs DDP. Every flag is a field of the run's settings (sparsetrain.engine.settings); "
                    "--config FILE sets them from a file, flags given here override it.",
    )
    p.add_argument("--config", type=Path,
                   help="read settings from a .toml, .yaml (needs PyYAML) or .json file: the flags' names with "
                        "underscores (batch_size = 512, fanouts = [15, 10]) or a table per settings part ([sampling] "
                        "batch_size = 512); flags given on the command line override it. A run writes its resolved "
                        "settings as config.json in --checkpoint-dir, which --config reads back")
    add_setting_flags(p)
    p.set_defaults(run=_train, given=frozenset())

    p = sub.add_parser("plot", help="draw a run's loss and metric curves to a PNG (needs matplotlib)",
                       description="Draw the loss and validation/test metric curves of a run's metrics log "
                                   "(`train --metrics-log FILE`: the JSON lines or the CSV beside them) to a PNG.")
    p.add_argument("path", type=Path, metavar="RUN",
                   help="a metrics log (.jsonl or its .csv), or a folder holding one")
    p.add_argument("--out", type=Path, help="the PNG to write (default: the log's name with .png)")
    p.set_defaults(run=_plot)


def _ranking(summary: dict) -> str:
    """The test split's ranking metrics, the Hits@K definition said once: ``mrr 0.45  hits@10 0.71 (per ...)``."""
    names = {k: k[5:].removesuffix("_per_positive").removesuffix("_shared_pool") for k in summary}
    shown = "  ".join(f"{names[k]} {v:.4f}" for k, v in summary.items()
                      if k.startswith("test_") and k != "test_auc" and v is not None)
    per_positive = (summary.get("negatives_per_positive") or {}).get("test")
    if per_positive:
        return f"{shown} (hits@K per positive: its rank among its own {per_positive} negatives <= K)"
    return f"{shown} (hits@K against the shared pool of negatives)" if shown else ""


def settings_of(args: argparse.Namespace) -> TrainSettings:
    """The run's settings: the fields ``--config``'s file sets, overridden by the flags given on the command line (all
    of the namespace's settings when it does not say which were given)."""
    given = getattr(args, "given", None)
    flags = {name: getattr(args, name) for name in FLAGS if given is None or name in given}
    if getattr(args, "config", None) is None:
        return TrainSettings(**{name: getattr(args, name) for name in FLAGS})
    from sparsetrain.engine.run_config import read_config

    return TrainSettings(**{**read_config(args.config), **flags})


def _train(args: argparse.Namespace) -> int:
    # imported when the verb runs: the model and training stack is not needed to parse flags or run other verbs
    from sparsetrain.engine.run import train

    summary = train(settings_of(args))
    if summary is None:  # not the main rank
        return 0
    _print_summary(summary)  # before the summary file is written: a write that fails cannot lose the result
    if args.summary_json is not None:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from sparsetrain.engine.plot import plot_run

    print(f"wrote {plot_run(args.path, args.out)}")
    return 0


def _print_summary(summary: dict) -> None:
    if summary.get("task") == "link":
        print(f"test AUC {summary['test_auc']:.4f} (val {summary['val_auc']:.4f}, epoch {summary['best_epoch']})  "
              f"{_ranking(summary)}  after {summary['epochs']} epochs in {summary['seconds']:.1f} s", flush=True)
        return
    if summary["test_acc"] is None:
        print(f"{summary['steps']} steps in {summary['seconds']:.1f} s (no epoch finished, so no accuracy)")
    else:
        print(f"test accuracy {summary['test_acc']:.4f} (val {summary['val_acc']:.4f}, epoch {summary['best_epoch']}) "
              f"after {summary['epochs']} epochs in {summary['seconds']:.1f} s")
    if summary.get("stopped_early"):
        print(f"stopped early at epoch {summary['stopped_epoch']} (--patience)")
    if summary.get("disk_mb") is not None or summary.get("hit_rate") is not None:
        shown = ["cache hit rate " + ("n/a" if summary.get("hit_rate") is None else f"{summary['hit_rate']:.1%}")]
        if summary.get("disk_mb") is not None:  # a disk tier (else no such line: nothing is read from disk)
            shown.append(f"{summary['disk_mb']:,.0f} MB read from disk")
        if summary.get("net_mb") is not None:  # a partitioned run: feature rows exchanged with the other parts
            per_step = summary.get("net_kb_per_step")
            shown.append(f"{summary['net_mb']:,.1f} MB exchanged with other ranks (training and evaluation)"
                         + ("" if per_step is None else f" ({per_step:,.0f} KB a step)"))
        print("features: " + ", ".join(shown))
    sys.stdout.flush()
