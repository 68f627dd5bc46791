"""Datasets shipped inside the package: Cora's Planetoid files (MIT licence, ``cora/LICENSE``), read offline."""

from __future__ import annotations

import os
from pathlib import Path

from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.datasets.pyg import from_pyg
from sparsetrain.errors import DatasetError

RAW = Path(__file__).resolve().parent
PLANETOID = ("cora",)
"""Built-in Planetoid datasets: their raw files are ``<name>/ind.<name>.*`` beside this module."""


def planetoid_raw_dir(name: str) -> Path:
    """The folder holding the packaged Planetoid raw files of ``name`` (e.g. ``"cora"``)."""
    if name not in PLANETOID:
        raise DatasetError(f"{name!r} is not a built-in Planetoid dataset; choose one of {', '.join(PLANETOID)}")
    return RAW / name


def planetoid_data(name: str = "cora"):
    """The built-in Planetoid graph as a PyG ``Data`` with its public split, read with PyG's Planetoid reader."""
    from torch_geometric.io import read_planetoid_data

    return read_planetoid_data(str(planetoid_raw_dir(name)), name)


def build_planetoid(name: str, out_dir: str | os.PathLike, quiet: bool = False, **options) -> GraphDataset:
    """Write the built-in Planetoid dataset ``name`` as a dataset folder (atomically; keeps the public split).

    ``options`` go to :func:`~sparsetrain.datasets.from_pyg` (e.g. ``link_split=(0.85, 0.05, 0.10)``)."""
    return from_pyg(planetoid_data(name), out_dir, quiet=quiet, **options)
