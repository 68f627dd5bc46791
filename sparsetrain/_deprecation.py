"""Names that left a package's namespace keep resolving for one release, with a ``DeprecationWarning``."""

from __future__ import annotations

import importlib
import warnings


def moved_attribute(package: str, moved: dict[str, str], name: str):
    """``package.name`` looked up in ``moved`` (name -> module now holding it); warns, or raises ``AttributeError``.

    The warning names the public package of the new home when it exports the name, else the module.
    Meant for a package's module-level ``__getattr__``.
    """
    module = moved.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    parent = importlib.import_module(module.rsplit(".", 1)[0])
    where = parent.__name__ if name in getattr(parent, "__all__", ()) else module
    warnings.warn(f"{package}.{name} is deprecated: it moved to {where}.{name}; import it from {where} "
                  "(the old name goes away in the next release)", DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(module), name)
