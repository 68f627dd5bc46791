"""Counter-based random numbers for sampling: a pure function of (seed, batch, hop, node, draw).

No state is carried between draws, so the result does not depend on how the
frontier is split across threads (CPU) or thread blocks (GPU). The mixer is the
splitmix64 finalizer. This is the one definition: the GPU sampler compiles these
same functions as CUDA device functions (:func:`sparsetrain.sampling.retarget.retarget`),
and the dataset synthesizer and dropout kernels call them from their own kernels.
"""

from __future__ import annotations

import numba
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_INV53 = 1.0 / 9007199254740992.0


@numba.njit(cache=True, inline="always")
def mix64(z):
    """splitmix64 finalizer: a bijection of uint64 with good avalanche."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True)
def hop_key(seed: int, batch: int, hop: int) -> np.uint64:
    """Key of one hop of one batch; combine with a node id through :func:`node_stream`."""
    s = mix64(np.uint64(seed) + GOLDEN)
    b = mix64(s ^ (np.uint64(batch) * GOLDEN))
    return mix64(b + np.uint64(hop) + _ONE)


@numba.njit(cache=True, inline="always")
def node_stream(key, node):
    """Stream of one (batch, hop, node): the draws of that node's neighbors come from it."""
    return mix64(key ^ (np.uint64(node) * GOLDEN))


@numba.njit(cache=True, inline="always")
def uniform(stream, j):
    """Uniform float in [0, 1) for draw ``j`` of a stream."""
    return (mix64(stream + (np.uint64(j) + _ONE) * GOLDEN) >> _S11) * _INV53


@numba.njit(cache=True, inline="always")
def below(stream, j, n):
    """Integer uniform in [0, n) for draw ``j`` of a stream (bias < n / 2**53)."""
    r = np.int64(uniform(stream, j) * n)
    return r if r < n else n - 1
