"""PyG's own samplers (``NeighborLoader``, ``LinkNeighborLoader``, typed sampling) need pyg-lib or torch-sparse.

Neither is on PyPI for every torch (pyg-lib not at all; torch-sparse builds from source for 12+ minutes), so
the tests that use PyG's sampler as the reference skip without them; sparsetrain's own loaders need neither.
Prebuilt wheels: ``pip install --no-deps ../shared/wheels/*.whl``.
"""

import importlib.util

import pytest

HAS_PYG_SAMPLER = any(importlib.util.find_spec(m) is not None for m in ("pyg_lib", "torch_sparse"))
needs_pyg_sampler = pytest.mark.skipif(not HAS_PYG_SAMPLER, reason="PyG's reference sampler needs pyg-lib or torch-sparse "
                                                                    "(pip install --no-deps ../shared/wheels/*.whl)")
