"""Checks of what an importer was given, shared by the importers: each refuses in one line naming the input and the fix.

The target type must be clear (the writer's one set of checks, :func:`~sparsetrain.datasets.build.build_dataset`,
asks it of every graph); split files come as a set.
"""

from __future__ import annotations

from sparsetrain.errors import DatasetError

SPLIT_FLAGS = {"train": "--train-idx", "val": "--val-idx", "test": "--test-idx"}


def target_type_of(labelled: list[str], target_type: str | None) -> str | None:
    """The node type labels and splits are for: ``target_type``, else the only labelled type; refused when unclear."""
    if target_type is not None:
        if labelled and target_type not in labelled:
            raise DatasetError(f"target type {target_type!r} has no labels (labelled types: {', '.join(labelled)}); "
                               "give its labels or choose one of those (--target-type)")
        return target_type
    if len(labelled) > 1:
        raise DatasetError(f"{len(labelled)} node types have labels ({', '.join(labelled)}); "
                           "pass --target-type (target_type=...) to say which one is trained on")
    return labelled[0] if labelled else None


def check_split_parts(names) -> None:
    """A given split is a set: train, val and test together (an empty file for a part you lack), or none at all."""
    given = [n for n in SPLIT_FLAGS if n in names]
    if given and len(given) != len(SPLIT_FLAGS):
        missing = [SPLIT_FLAGS[n] for n in SPLIT_FLAGS if n not in names]
        flags = " and ".join(missing)
        raise DatasetError(f"a split needs train, validation and test nodes, but {flags} "
                           f"{'is' if len(missing) == 1 else 'are'} missing; give {flags} too (an empty .npy for a "
                           "part you do not have), or no split files for a random split (--split)")
