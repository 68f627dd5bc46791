"""Datasets by name: Cora (shipped with the package; the default) and a synthetic graph, built on first use and
cached."""

from __future__ import annotations

import os
from pathlib import Path

from sparsetrain.datasets import GraphDataset, load, synthesize
from sparsetrain.datasets.builtin import build_planetoid
from sparsetrain.errors import DatasetError, OutputExistsError

DEFAULT_GRAPH = {"num_nodes": 20_000, "num_edges": 400_000, "feature_dim": 64, "num_classes": 8, "seed": 0}
DEFAULT_NAME = "cora"
BUILTIN = {"cora": "cora-planetoid-v1", "synthetic": "default-synth-v1"}
"""Built-in dataset name -> its folder in :func:`cache_dir` (a new version suffix when what is built changes)."""
BUILTIN_LINK = {"cora": "cora-planetoid-link-v1"}
"""Built-in datasets for ``--task link``: the same graph with an edge split made by ``LINK_SPLIT``."""
LINK_SPLIT = {"link_split": (0.85, 0.05, 0.10), "seed": 0}


def cache_dir() -> Path:
    """``$SPARSETRAIN_CACHE``, else ``$XDG_CACHE_HOME/sparsetrain``, else ``~/.cache/sparsetrain``."""
    if "SPARSETRAIN_CACHE" in os.environ:
        return Path(os.environ["SPARSETRAIN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sparsetrain"


def builtin_dataset(name: str, quiet: bool = False, task: str = "node") -> GraphDataset:
    """The built-in dataset ``name`` (see ``BUILTIN``): Cora's public split from the packaged Planetoid files, or the
    synthetic graph (20K nodes, 400K edges, 64 features, 8 learnable classes); built once into :func:`cache_dir`.
    ``task="link"``: Cora with the edge split ``LINK_SPLIT`` (``BUILTIN_LINK``)."""
    link = task == "link"
    if link and name not in BUILTIN_LINK:
        raise DatasetError(f"--task link has no built-in {name!r} dataset; use {', '.join(BUILTIN_LINK)} or a folder "
                           "made with --link-split")
    path = cache_dir() / (BUILTIN_LINK if link else BUILTIN)[name]
    if not (path / "meta.json").is_file():
        if not quiet:
            print(f"building the {name} dataset in {path} (once)", flush=True)
        try:
            if name == "synthetic":
                synthesize(path, DEFAULT_GRAPH["num_nodes"], DEFAULT_GRAPH["num_edges"],
                           feature_dim=DEFAULT_GRAPH["feature_dim"], num_classes=DEFAULT_GRAPH["num_classes"],
                           seed=DEFAULT_GRAPH["seed"], quiet=quiet)
            else:
                build_planetoid(name, path, quiet=quiet, **(LINK_SPLIT if link else {}))
        except OutputExistsError:  # another process (e.g. another rank) finished it first
            pass
    return load(path)


def default_dataset(quiet: bool = False, task: str = "node") -> GraphDataset:
    """The dataset ``sparsetrain train`` uses without ``--data``: Cora (public split), built from the packaged files."""
    return builtin_dataset(DEFAULT_NAME, quiet, task)


def open_dataset(data: str | os.PathLike | None, quiet: bool = False, task: str = "node") -> GraphDataset:
    """``--data``: a dataset folder; else, when no such folder exists, a built-in name (cora, synthetic); None: the
    default."""
    if data is None:
        return default_dataset(quiet, task)
    name = str(data).lower()
    if Path(data).exists():
        return load(data)
    if name in BUILTIN:
        return builtin_dataset(name, quiet, task)
    raise DatasetError(f"{data}: no such dataset folder, nor a built-in dataset ({', '.join(BUILTIN)}); "
                       "give a folder made by `sparsetrain preprocess` or `sparsetrain synth`, or a built-in name")
