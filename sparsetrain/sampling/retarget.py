"""Compile the Python source of CPU (``numba.njit``) functions for another Numba target.

The sampler's per-node logic and RNG are written once as ``@numba.njit`` functions.
:func:`retarget` takes their ``py_func`` and compiles it again with another
decorator (``cuda.jit(device=True)``), rebinding every call among them: a
function's globals are copied, and each name bound to one of the retargeted
dispatchers (under any alias) is pointed at the new version. Numba resolves
globals when it compiles, so calls in either direction and in any order work.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence


def retarget(functions: Sequence, compile: Callable) -> dict[str, Callable]:
    """``{name: compile(copy of f)}`` for Numba dispatchers (or plain functions) ``functions``, calls among them
    rebound."""
    sources = [getattr(f, "py_func", f) for f in functions]
    namespaces: dict[int, dict] = {}
    compiled: dict[str, Callable] = {}
    swaps: dict[int, Callable] = {}
    for f, py in zip(functions, sources):
        ns = namespaces.setdefault(id(py.__globals__), dict(py.__globals__))
        clone = types.FunctionType(py.__code__, ns, py.__name__, py.__defaults__, py.__closure__)
        clone.__qualname__ = py.__qualname__
        clone.__doc__ = py.__doc__
        compiled[py.__name__] = swaps[id(f)] = swaps[id(py)] = compile(clone)
    for ns in namespaces.values():
        for name, value in ns.items():
            if id(value) in swaps:
                ns[name] = swaps[id(value)]
    return compiled
