"""``manifest.json`` of a partitioned folder: the parts, who owns which node, the dataset and the partitioning they
came from, checksummed; and the checks that refuse a folder whose parts do not belong together."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.checks import SMALL_FILE_BYTES, check_files
from sparsetrain.datasets.outputs import PARTITION_MANIFEST
from sparsetrain.errors import DatasetError

MANIFEST = PARTITION_MANIFEST
FORMAT_NAME = "sparsetrain-partition"
FORMAT_VERSION = 2  # 2: every graph's parts by type (node.<t>.* / edge.<et>.* files); 1 is refused
OWNER_FILE = "owner.npy"
PART_META = "partition"  # the field of a part's meta.json naming its partitioning
_PART = re.compile(r"^part-(\d+)$")
_RERUN = "re-run `sparsetrain partition`"


def part_folder(part: int) -> str:
    return f"part-{part}"


def digest(value: dict) -> str:
    """sha256 of a JSON value written canonically (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_manifest(folder: Path, manifest: dict) -> None:
    """``manifest`` with its own checksum, written and fsynced."""
    body = dict(manifest) | {"checksum": digest(manifest)}
    path = folder / MANIFEST
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def read_manifest(folder: Path) -> dict:
    """The checked manifest of a partitioned folder."""
    path = folder / MANIFEST
    if not path.is_file():
        raise DatasetError(f"{path}: missing; {folder} is not a partitioned folder (make one with `sparsetrain "
                           "partition DATA --parts N --out DIR`)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc}); {_RERUN}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise DatasetError(f"{path}: field 'format' is not {FORMAT_NAME!r}; this is not a partitioned folder")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DatasetError(f"{path}: field 'format_version' is {manifest.get('format_version')!r} but this "
                           f"sparsetrain reads {FORMAT_VERSION}; {_RERUN}")
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    if manifest.get("checksum") != digest(body):
        raise DatasetError(f"{path}: its checksum does not match its content (the manifest was edited); {_RERUN}")
    _check_fields(path, manifest)
    return manifest


_NUMBER = (int, float)
_FIELDS = {"partition_id": str, "num_parts": int, "method": str, "dataset": dict, "owner": dict, "parts": list,
           "quality": dict}
_NESTED = {"dataset": {"checksum": str, "num_nodes": int, "num_edges": int}, "owner": {"file": str, "sha256": str},
           "quality": {"edge_cut": int, "edge_cut_fraction": _NUMBER, "node_balance": _NUMBER,
                       "edge_balance": _NUMBER, "halo_fraction": _NUMBER}}
_PART_FIELDS = {"folder": str, "num_owned": int, "num_halo": int, "num_edges": int, "splits": dict,
                "meta_sha256": str}


def _check_fields(path: Path, manifest: dict) -> None:
    """Every field this package reads is there with its type, and the parts are ``part-0`` .. ``part-<P-1>``: a
    manifest re-signed after an edit is refused here, in one line, not by a KeyError where a field is read."""

    def check(where: str, value: dict, fields: dict) -> None:
        for name, kind in fields.items():
            got = value.get(name)
            if not isinstance(got, kind) or isinstance(got, bool):
                raise DatasetError(f"{path}: field '{where}{name}' is {got!r}, not {_kind_name(kind)}; {_RERUN}")

    check("", manifest, _FIELDS)
    for name, fields in _NESTED.items():
        check(f"{name}.", manifest[name], fields)
    parts = manifest["parts"]
    if manifest["num_parts"] != len(parts) or not parts:
        raise DatasetError(f"{path}: field 'num_parts' is {manifest['num_parts']} but {len(parts)} parts are listed; "
                           f"{_RERUN}")
    for p, entry in enumerate(parts):
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: part {p}'s entry is {entry!r}, not an object; {_RERUN}")
        check(f"parts[{p}].", entry, _PART_FIELDS)
        if entry["folder"] != part_folder(p):
            raise DatasetError(f"{path}: part {p}'s folder is {entry['folder']!r}, not {part_folder(p)!r}; {_RERUN}")


def _kind_name(kind) -> str:
    names = {str: "a string", int: "an integer", dict: "an object", list: "a list"}
    return "a number" if kind == _NUMBER else names[kind]


ARRAY_CHECKS = {"sizes": 0, "small": SMALL_FILE_BYTES, "sha256": 2**63}
"""How much of a part's arrays :func:`check_parts` reads: ``sizes`` (each file's shape, dtype and size against its
meta.json: a stat and a header read), ``small`` (also the sha256 of files up to ``SMALL_FILE_BYTES``, what ``train``
checks of a dataset), ``sha256`` (every file's sha256: a full read, ``--verify`` and ``partition-info``)."""


def check_parts(folder: Path, manifest: dict, arrays: str | None = None, which: list[int] | None = None) -> None:
    """Every part the manifest lists is there and is the one it recorded; no other part is there. ``arrays``: also
    check the arrays of the parts in ``which`` (default: all) and the owner map against the checksums the manifest
    chain recorded (manifest -> part's meta.json -> array), as :data:`ARRAY_CHECKS` says."""
    if arrays is not None and arrays not in ARRAY_CHECKS:
        raise DatasetError(f"arrays={arrays!r}: choose one of {', '.join(ARRAY_CHECKS)}")
    parts = manifest["parts"]
    listed = {p["folder"] for p in parts}
    for entry in sorted(os.listdir(folder)):
        if _PART.match(entry) and entry not in listed:
            raise DatasetError(f"{folder / entry}: is not a part of this partitioning (its manifest lists "
                               f"{len(parts)} parts); remove it or {_RERUN}")
    if not (folder / manifest["owner"]["file"]).is_file():
        raise DatasetError(f"{folder / manifest['owner']['file']}: missing; restore it or {_RERUN}")
    for p, entry in enumerate(parts):
        meta = check_part(folder, manifest, entry)
        if arrays is not None and (which is None or p in which):
            check_files(folder / entry["folder"], meta, ARRAY_CHECKS[arrays], fix=_EDITED)
    if arrays is not None:
        owner = {manifest["owner"]["file"]: {"sha256": manifest["owner"]["sha256"], "dtype": "int16",
                                            "shape": [manifest["dataset"]["num_nodes"]]}}
        check_files(folder, {"files": owner}, ARRAY_CHECKS[arrays], fix=_EDITED, record=MANIFEST)


_EDITED = f"the partitioned folder was edited after `sparsetrain partition` wrote it; {_RERUN}"


def check_part(folder: Path, manifest: dict, entry: dict) -> dict:
    """One part's meta.json, checked against the manifest; returns it."""
    path = folder / entry["folder"]
    if not (path / fmt.META_FILE).is_file():
        raise DatasetError(f"{path}: missing (the manifest lists {len(manifest['parts'])} parts); restore it or "
                           f"{_RERUN}")
    meta_bytes = (path / fmt.META_FILE).read_bytes()
    try:
        meta = json.loads(meta_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError):
        meta = None
    own = meta.get(PART_META) if isinstance(meta, dict) else None
    if not isinstance(own, dict):
        raise DatasetError(f"{path / fmt.META_FILE}: not a part's meta.json (no JSON object with a "
                           f"'{PART_META}' field); restore the part or {_RERUN}")
    if own.get("dataset_checksum") != manifest["dataset"]["checksum"]:
        raise DatasetError(f"{path}: is a part of another dataset (checksum {str(own.get('dataset_checksum'))[:12]}, "
                           f"the manifest's {manifest['dataset']['checksum'][:12]}); {_RERUN}")
    if own.get("id") != manifest["partition_id"] or own.get("part") != parts_index(entry):
        raise DatasetError(f"{path}: is part {own.get('part')} of partitioning {own.get('id')}, not part "
                           f"{parts_index(entry)} of {manifest['partition_id']} (the manifest's); {_RERUN}")
    if hashlib.sha256(meta_bytes).hexdigest() != entry["meta_sha256"]:
        raise DatasetError(f"{path / fmt.META_FILE}: differs from the one the manifest recorded (the part was "
                           f"replaced or edited); {_RERUN}")
    return meta


def parts_index(entry: dict) -> int:
    return int(_PART.match(entry["folder"]).group(1))
