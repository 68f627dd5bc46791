"""A run's settings as a file: ``train --config run.toml`` (or ``.yaml``, ``.json``) reads one, a run writes its own.

A file holds the same fields as the ``train`` flags, in either of two layouts (mixed if you like):

* **flat**: the flags' names with underscores (``batch_size = 512``, ``fanouts = [15, 10]``, ``model = "gat"``,
  ``checkpoint_dir = "runs/a"``; :data:`~sparsetrain.engine.settings.FLAGS`);
* **nested** by settings part: a table per part named as :class:`~sparsetrain.engine.settings.TrainSettings`' fields
  (``[sampling]`` ``batch_size = 512``; ``[model]`` ``name = "gat"``; ``[checkpoint]`` ``dir = "runs/a"``), its keys
  the part's field names.

A part's table is told from a flat key of the same name (``data``, ``features``, ``model``) by its value: a table is the
part, a value the flag. Values have the field's type (``fanouts`` a list of ints, or the flag's ``"15,10"``; paths as
strings); flags given on the command line override the file. An unknown key or a value of the wrong type is one line
naming the file and the key. TOML is read with the standard library's ``tomllib``, YAML with PyYAML when it is
installed. What a run writes (:func:`write_config`, ``config.json`` beside its checkpoints, and the summary's
``config``) is the nested layout of every field, which ``--config`` reads back.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

from sparsetrain.engine.checkpoint import write_atomic
from sparsetrain.engine.settings import (
    FLAGS,
    PARTS,
    TrainSettings,
    field_types,
    fields_of,
    flag_names,
    plain_value,
    typed_value,
)
from sparsetrain.errors import InputError, SettingError
from sparsetrain.sampling.fanouts import Fanouts

CONFIG_NAME = "config.json"
"""The file a run writes its resolved settings to, in ``--checkpoint-dir``."""
_FLAT_OF = {where: flat for flat, where in FLAGS.items()}
_KEY_OF = {name[2:].replace("-", "_"): flat for flat, (part, key) in FLAGS.items()
           for name in (*flag_names(flat), *fields_of(PARTS[part])[key].metadata.get("hidden_flags", ()))}
_KEY_OF.update({flat: flat for flat in FLAGS})
"""A flat key of a config file -> its flat keyword: the keyword itself (``fanouts``, ``log``) or its flag's name
(``fanout`` for ``--fanout``, ``metrics_log`` for ``--metrics-log``), so a key copied from the command line reads."""


def read_config(path: str | os.PathLike) -> dict:
    """The settings a config file sets, as flat keywords of :class:`TrainSettings` (``{"batch_size": 512, ...}``),
    each checked against its field's type; one-line :class:`SettingError` for an unreadable file, an unknown key or a
    wrong type."""
    path = Path(path)
    content = _load(path)
    if not isinstance(content, dict):
        raise SettingError(f"{path}: holds a {type(content).__name__}, not a table of settings; write `key = value` "
                           "lines (the train flags' names) or a [part] table per settings part")
    flat: dict = {}
    for key, value in content.items():
        if isinstance(value, dict) and key in PARTS:
            names = {f.name for f in fields(PARTS[key])}
            for name, inner in value.items():
                if name not in names:
                    raise SettingError(f"{path}: unknown key {key}.{name}; [{key}] takes {', '.join(sorted(names))}")
                _put(path, flat, _FLAT_OF[(key, name)], inner, f"{key}.{name}")
        else:
            name = _KEY_OF.get(str(key).replace("-", "_"))
            if name is None:
                raise SettingError(f"{path}: unknown key {key!r}; the keys are the train flags' names (batch_size, "
                                   f"fanouts, ...; see `sparsetrain train --help`) or [part] tables "
                                   f"({', '.join(PARTS)})")
            _put(path, flat, name, value, str(key))
    return flat


def _load(path: Path):
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SettingError(f"--config {path}: no such file; give the path of a .toml, .yaml or .json file") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(raw.decode())
        if suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise SettingError(f"{path}: reading YAML needs PyYAML: pip install pyyaml (or write the file as "
                                   ".toml)") from None
            return yaml.safe_load(raw) or {}
        if suffix == ".json":
            return json.loads(raw)
    except SettingError:
        raise
    except Exception as exc:  # each parser's own error class; its message says where
        raise SettingError(f"{path}: not valid {suffix[1:].upper()}: {' '.join(str(exc).split())}") from None
    raise SettingError(f"--config {path}: unknown format {suffix or '(no suffix)'}; give a .toml, .yaml or .json file")


def _put(path: Path, flat: dict, name: str, value, key: str) -> None:
    """``flat[name] = value`` once ``value`` has the type of the field ``name`` routes to."""
    if name in flat:
        raise SettingError(f"{path}: {key} sets {name}, which another key of the file already sets (its flag's name, "
                          "its field's name or its part's table); keep one")
    part, field_name = FLAGS[name]
    cls = PARTS[part]
    kinds = field_types(cls, field_name)
    if Fanouts in kinds:
        try:
            value = Fanouts.parse(value) if isinstance(value, str) else Fanouts.of(_edge_type_keys(value))
        except (InputError, TypeError) as exc:
            raise SettingError(f"{path}: {key}={value!r}: {exc}") from None
    elif isinstance(value, str) and Path in kinds:
        value = Path(value)
    try:
        value = typed_value(cls, field_name, value)
    except SettingError as exc:
        raise SettingError(f"{path}: {key}={value!r}: {str(exc).split(': ', 1)[-1]}") from None
    flat[name] = value


def _edge_type_keys(value):
    """Fanouts per edge type as a file writes them (``{"paper,cites,paper": [10, 5]}``) keyed by edge-type tuples."""
    if isinstance(value, dict):
        return {tuple(k.split(",")) if isinstance(k, str) else tuple(k): v for k, v in value.items()}
    return value


def config_of(settings: TrainSettings) -> dict:
    """Every field of ``settings``, nested by part, as plain values (paths as strings, fanouts as lists): what
    :func:`write_config` writes and :func:`read_config` reads back."""
    return {part: {f.name: plain_value(getattr(getattr(settings, part), f.name)) for f in fields(cls)}
            for part, cls in PARTS.items()}


def write_config(config: dict, folder: str | os.PathLike) -> Path:
    """``folder/config.json``: a run's settings as :func:`config_of` gives them, written atomically (temp file, fsync,
    rename)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CONFIG_NAME
    write_atomic(path, lambda f: f.write((json.dumps(config, indent=2) + "\n").encode()))
    return path
