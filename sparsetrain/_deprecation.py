"""Names that left a package's namespace keep resolving for one release, with a ``DeprecationWarning``."""

from __future__ import annotations

import importlib
import warnings


def moved_attribute(package: str, moved: dict[str, str], name: str):
    """``package.name`` looked up in ``moved`` (name -> module now holding it); warns, or raises ``AttributeError``.

    A name that was also renamed maps to ``"module:new_name"``. The warning names the public package of the
    new home when it exports the name, else the module. Meant for a package's module-level ``__getattr__``.
    """
    target = moved.get(name)
    if target is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, _, new_name = target.partition(":")
    new_name = new_name or name
    parent = importlib.import_module(module.rsplit(".", 1)[0])
    where = parent.__name__ if new_name in getattr(parent, "__all__", ()) else module
    if new_name == name:
        warnings.warn(f"{package}.{name} is deprecated: it moved to {where}.{name}; import it from {where} "
                      "(the old name goes away in the next release)", DeprecationWarning, stacklevel=3)
    else:
        warnings.warn(f"{package}.{name} is deprecated: it was renamed {where}.{new_name}; import {new_name} from "
                      f"{where} (the old name goes away in the next release)", DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(module), new_name)


def renamed_module(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that module ``old`` was renamed ``new``: called from the old module's body, which stays for one release."""
    warnings.warn(f"{old} is deprecated: the module was renamed {new}; import from {new} (the old name goes away in "
                  "the next release)", DeprecationWarning, stacklevel=stacklevel)


def renamed_flag(command: str, old: str, new: str) -> None:
    """Warn that ``command``'s flag ``old`` was renamed ``new``: the old flag keeps working (hidden) for one release.

    Shown even under Python's default filters (a command line's user is who has to change), as one line.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("always", DeprecationWarning)
        warnings.warn(f"{command} {old} is deprecated: use {new} (the old flag goes away in the next release)",
                      DeprecationWarning, stacklevel=2)
