"""The one rule for every output path of every verb: nothing is written into a folder that holds sparsetrain data.

Three kinds of folder hold data: a dataset (``meta.json``: its arrays are checksummed, and ``preprocess --overwrite``
deletes the folder), a partitioned folder (``manifest.json``: ``partition --overwrite`` deletes it) and a part (a
dataset inside a partitioned folder). A file written into any of them would either damage the data (a summary over
``meta.json``, a log appended to ``owner.npy``) or go with the folder at the next ``--overwrite`` (checkpoints). So
``train``'s ``--checkpoint-dir`` / ``--metrics-log`` / ``--summary-json`` / ``--tensorboard``,
``preprocess``/``synth``'s ``--out``, ``partition``'s ``--out`` and ``predict``/``plot``'s ``--out`` all pass
through :func:`check_output_path`, which walks the path's folders up to the root
and refuses one inside any data folder (and a new folder that would hold one of the command's inputs, which its
``--overwrite`` would delete).
"""

from __future__ import annotations

import os
from pathlib import Path

from sparsetrain.datasets.format import META_FILE
from sparsetrain.errors import SettingError

PARTITION_MANIFEST = "manifest.json"
"""The file that makes a folder a partitioned folder (``sparsetrain.partition.manifest.MANIFEST``)."""

DATASET, PARTITIONED, PART = "dataset folder", "partitioned folder", "part"


def folder_kind(folder: Path) -> str | None:
    """What ``folder`` holds: ``DATASET``, ``PARTITIONED``, ``PART`` (a dataset inside a partitioned folder) or
    None."""
    try:
        if (folder / PARTITION_MANIFEST).is_file():
            return PARTITIONED
        if (folder / META_FILE).is_file():
            return PART if (folder.parent / PARTITION_MANIFEST).is_file() else DATASET
    except OSError:
        return None
    return None


def enclosing_data_folder(path: str | os.PathLike) -> tuple[str, Path] | None:
    """The outermost data folder that ``path`` is (or lies inside), with its kind; None when there is none. A part
    is reported as its partitioned folder (which ``partition --overwrite`` deletes whole). Symlinks are resolved."""
    resolved = Path(os.path.realpath(path))
    found = None
    for folder in (resolved, *resolved.parents):
        kind = folder_kind(folder)
        if kind is not None:
            found = (kind, folder)
    return found


def check_output_path(flag: str, path: str | os.PathLike, *, inputs: tuple = (), creates: str | None = None) -> None:
    """Refuse ``path`` (given as ``flag``) in one line when it is, or lies inside, a dataset folder, a partitioned
    folder or a part, or inside one of ``inputs``. ``creates``: the kind of data folder the command makes at
    ``path`` (``DATASET`` or ``PARTITIONED``): ``path`` itself may then be one (``--overwrite`` replaces it, checked
    by the writer), but not lie inside one, nor hold one of ``inputs`` (the replacement would delete it)."""
    path = Path(path)
    resolved = Path(os.path.realpath(path))
    existing = resolved.parent  # the nearest folder above that exists: the command creates the rest
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SettingError(f"{flag} {path}: {existing} is a file, not a folder; give a path under a folder")
    for given in inputs:
        if given is None:
            continue
        folder = Path(os.path.realpath(given))
        kind = folder_kind(folder) or "input folder"
        if resolved == folder or folder in resolved.parents:
            raise SettingError(f"{flag} {path}: is in the {kind} {given} this command reads; give a path "
                               "outside it")
        if creates is not None and resolved in folder.parents:
            raise SettingError(f"{flag} {path}: holds the {kind} {given} this command reads (replacing it would "
                               "delete it); choose a path outside it")
    start = resolved.parent if creates is not None else resolved
    found = enclosing_data_folder(start)
    if found is not None:
        kind, folder = found
        where = "is the" if folder == resolved else "is in the"
        raise SettingError(f"{flag} {path}: {where} {kind} {folder}; sparsetrain writes nothing into a data "
                           "folder (it would damage the data, or go with the folder at its next --overwrite), "
                           "give a path outside it")
