"""The embedded default dataset: a deterministic synthetic graph, built on first use and cached."""

from __future__ import annotations

import os
from pathlib import Path

from sparsetrain.datasets import GraphDataset, load, synthesize
from sparsetrain.errors import OutputExistsError

DEFAULT_GRAPH = {"num_nodes": 20_000, "num_edges": 400_000, "feature_dim": 64, "num_classes": 8, "seed": 0}
_NAME = "default-synth-v1"


def cache_dir() -> Path:
    """``$SPARSETRAIN_CACHE``, else ``$XDG_CACHE_HOME/sparsetrain``, else ``~/.cache/sparsetrain``."""
    if "SPARSETRAIN_CACHE" in os.environ:
        return Path(os.environ["SPARSETRAIN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sparsetrain"


def default_dataset(quiet: bool = False) -> GraphDataset:
    """The default graph (20K nodes, 400K edges, 64 features, 8 learnable classes); a few seconds to build once."""
    path = cache_dir() / _NAME
    if not (path / "meta.json").is_file():
        if not quiet:
            print(f"building the default dataset in {path} (once)", flush=True)
        try:
            synthesize(path, DEFAULT_GRAPH["num_nodes"], DEFAULT_GRAPH["num_edges"], feature_dim=DEFAULT_GRAPH["feature_dim"],
                       num_classes=DEFAULT_GRAPH["num_classes"], seed=DEFAULT_GRAPH["seed"], quiet=quiet)
        except OutputExistsError:  # another process (e.g. another rank) finished it first
            pass
    return load(path)
