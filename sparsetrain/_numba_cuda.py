"""``numba.cuda`` for the GPU paths, imported through here so the shim below is in place first.

numba-cuda up to at least 0.30 registers an overload of ``np.row_stack`` while it loads its
targets at the first kernel compile; NumPy 2.4 removed that alias, so every kernel launch
failed with ``AttributeError: module 'numpy' has no attribute 'row_stack'`` (seen on the lent
H100: numba-cuda 0.30.4, NumPy 2.5). Restoring the alias (it was ``np.vstack``) is harmless.

Numba warns about low occupancy on every launch of a small grid; the samplers launch small grids on purpose (a hop's
bookkeeping), so the warning is off: it filled the logs of the lent GPU's runs and costs the launch path time.
"""

import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import (
    config,  # noqa: E402
    cuda,  # noqa: E402
)

config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
try:  # numba-cuda keeps its own config module (the lent GPUs' image); numba's built-in CUDA target reads numba's
    from numba.cuda.core import config as cuda_config  # noqa: E402
except ImportError:
    pass
else:
    cuda_config.CUDA_LOW_OCCUPANCY_WARNINGS = 0

__all__ = ["cuda"]
