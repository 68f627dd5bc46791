"""PyG's own samplers (``NeighborLoader``, ``LinkNeighborLoader``, typed sampling) need pyg-lib or torch-sparse.

Neither is on PyPI as a wheel for every torch, so the tests that use PyG's sampler as the reference carry the
``pyg_sampler`` marker and skip without one, saying how to get it (``tests/conftest.py`` applies the marker);
sparsetrain's own loaders need neither. With ``SPARSETRAIN_REQUIRE_PYG_SAMPLER=1`` (set by ``.ci/run`` after it
installs the wheels) a missing or broken backend fails those tests instead of skipping them.
"""

import os

import pytest
import torch

# PyG's own verdict: it imports the package and disables it (with a warning) when the build does not load
import torch_geometric.typing as pyg_typing

HAS_TORCH_SPARSE = pyg_typing.WITH_TORCH_SPARSE
HAS_PYG_SAMPLER = pyg_typing.WITH_PYG_LIB or HAS_TORCH_SPARSE
REQUIRED = os.environ.get("SPARSETRAIN_REQUIRE_PYG_SAMPLER", "") not in ("", "0")

_version = torch.__version__.split("+")[0]
_variant = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
HINT = (
    "install torch-scatter and torch-sparse built for this torch: "
    f"pip install torch-scatter torch-sparse -f https://data.pyg.org/whl/torch-{_version}+{_variant}.html "
    "(PyG's wheel index), or where it has no wheels for this torch, build them: "
    "pip install --no-build-isolation torch-scatter torch-sparse (a C++ compiler, 15+ min); README, 'Run the tests'"
)

needs_pyg_sampler = pytest.mark.pyg_sampler  # pyg-lib or torch-sparse
needs_torch_sparse = pytest.mark.pyg_sampler(backend="torch_sparse")  # calls torch.ops.torch_sparse directly


def missing_backend(marker: pytest.Mark) -> str | None:
    """What a ``pyg_sampler``-marked test lacks here, or None when its backend loads."""
    if marker.kwargs.get("backend") == "torch_sparse":
        return None if HAS_TORCH_SPARSE else "torch-sparse"
    return None if HAS_PYG_SAMPLER else "PyG's reference sampler (pyg-lib or torch-sparse)"
