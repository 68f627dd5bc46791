"""The one "peer missing" helper of the benchmarks: whether a peer (PyG's compiled sampler, DGL's environment,
Hugging Face ``transformers``) can run here, and the one line a benchmark prints when it cannot.

A benchmark without its peer still measures and prints its own half, with no ratio, and records the line under
the peer's name in its JSON (``{"error": ...}``), instead of failing with a traceback after its half.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
_said: set[str] = set()


def _pyg_wheels() -> str:
    version = torch.__version__.split("+")[0]
    variant = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    return (f"pip install pyg-lib torch-sparse -f https://data.pyg.org/whl/torch-{version}+{variant}.html, or build "
            "torch-sparse for this torch (README, 'Set up')")


def pyg_sampler_missing(backend: str = "any") -> str | None:
    """Why PyG's compiled sampler cannot run here (``backend="torch_sparse"``: torch-sparse itself), or None."""
    import torch_geometric.typing as pyg_typing  # PyG's own verdict: imports each backend, disables a broken build

    has = pyg_typing.WITH_TORCH_SPARSE if backend == "torch_sparse" else (
        pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE)
    if has:
        return None
    what = "torch-sparse" if backend == "torch_sparse" else "pyg-lib or torch-sparse"
    return f"{what} is not installed for torch {torch.__version__}; {_pyg_wheels()}"


def dgl_missing(python: str | os.PathLike) -> str | None:
    """Why the DGL environment at ``python`` cannot run the DGL peer, or None."""
    if Path(python).is_file():
        return None
    return (f"no DGL environment at {python}: DGL 2.1 needs torch 2.2.x, so it lives in a venv of its own "
            "(python -m venv venv-dgl && venv-dgl/bin/pip install torch==2.2.1 dgl==2.1.0 'numpy<2'), named by "
            "SPARSETRAIN_DGL_PYTHON")


def module_missing(module: str, extra: str) -> str | None:
    """Why ``module`` cannot be imported here (install hint: the ``extra`` of setup.py), or None."""
    if importlib.util.find_spec(module) is not None:
        return None
    return f"{module} is not installed; pip install -e \".[{extra}]\""


def say_missing(peer: str, why: str) -> dict:
    """Print, once per peer, ``<peer>: not run (<why>); only sparsetrain's half is measured``; returns the JSON entry
    ``{"error": ...}`` the benchmark records in the peer's place."""
    line = f"{peer}: not run ({why}); only sparsetrain's half is measured"
    if peer not in _said:
        _said.add(peer)
        print(line, flush=True)
    return {"error": line}
