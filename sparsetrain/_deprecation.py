"""Names that left a package's namespace keep resolving for one release, with a ``DeprecationWarning``."""

from __future__ import annotations

import importlib
import warnings


def moved_attribute(package: str, moved: dict[str, str], name: str):
    """``package.name`` looked up in ``moved`` (name -> module now holding it); warns, or raises ``AttributeError``.

    Meant for a package's module-level ``__getattr__``.
    """
    module = moved.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(
        f"{package}.{name} is deprecated and leaves {package} in the next release; import it from {module}",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(module), name)
