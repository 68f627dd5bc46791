"""The sampler's one source: the per-node draws and the RNG compiled for another target give the CPU kernels'
numbers."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from sparsetrain.sampling import draw, rng
from sparsetrain.sampling.retarget import retarget

SHARED = [
    rng.mix64, rng.uniform, rng.below, rng.node_stream, draw.edge_count, draw.count_node, draw.es_key,
    draw.draw_positions,
]
MASK = (1 << 64) - 1


def splitmix64_finalizer(z: int) -> int:
    """The published splitmix64 finalizer on Python ints (an independent reference)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def traced_python_target():
    """Retarget to plain Python, counting the calls each retargeted function receives."""
    calls: collections.Counter[str] = collections.Counter()

    def compile(f):
        def run(*args):
            calls[f.__name__] += 1
            return f(*args)

        return run

    return retarget(SHARED, compile), calls


def test_mixer_is_splitmix64():
    for z in [0, 1, 2**63, MASK, 0x0123456789ABCDEF, 987654321]:
        assert int(rng.mix64(np.uint64(z))) == splitmix64_finalizer(z)


def test_retargeted_calls_resolve_to_the_retargeted_functions():
    fns, calls = traced_python_target()
    with np.errstate(over="ignore"):
        stream = fns["node_stream"](np.uint64(12345), 7)
        value = fns["uniform"](stream, 3)
    assert calls["mix64"] == 2, "node_stream and uniform must call the retargeted mix64, not the CPU dispatcher"
    assert value == rng.uniform(rng.node_stream(np.uint64(12345), 7), 3)
    assert rng.mix64 not in fns.values() and set(fns) == {f.py_func.__name__ for f in SHARED}


@pytest.mark.parametrize(
    "fanout, replace, weighted",
    [(3, False, False), (40, False, False), (-1, False, False), (5, True, False), (4, False, True), (4, True, True),
     (100, False, True)],
)
def test_draws_on_another_target_equal_the_cpu_draws(fanout, replace, weighted):
    fns, _ = traced_python_target()
    gen = np.random.default_rng(0)
    weights = gen.random(400).astype(np.float32)
    weights[gen.random(400) < 0.2] = 0  # weight-0 edges are never drawn
    key = np.uint64(rng.hop_key(7, 3, 1))
    checked = 0
    with np.errstate(over="ignore"):
        for node, (lo, d) in enumerate([(0, 0), (0, 1), (5, 3), (10, 50), (60, 200), (0, 400), (300, 45)]):
            k_cpu = draw.edge_count(weights, lo, d, fanout, replace, weighted)
            k_py = fns["edge_count"](weights, lo, d, fanout, replace, weighted)
            assert k_cpu == k_py
            ranges = np.zeros((2, 1), np.int64)

            def count(indptr):
                return fns["count_node"](np.array(indptr), weights, np.array([0]), 0, fanout, replace, weighted,
                                         len(weights), ranges[0], ranges[1])

            assert count([lo, lo + d]) == k_cpu
            assert ranges[:, 0].tolist() == [lo, d]
            for damaged in ([lo + d + 1, lo], [-1, d], [lo, len(weights) + 1]):  # decreasing, negative, past the edges
                assert count(damaged) == -1
                assert ranges[:, 0].tolist() == [0, 0]
            stream = np.uint64(rng.node_stream(key, node))
            cpu = np.full(k_cpu + 2, -7, np.int64)
            py = cpu.copy()
            draw.draw_positions(weights, lo, d, k_cpu, fanout, replace, weighted, stream, cpu, 1)
            fns["draw_positions"](weights, lo, d, k_py, fanout, replace, weighted, fns["node_stream"](key, node), py, 1)
            assert np.array_equal(cpu, py)
            assert cpu[0] == cpu[-1] == -7 and ((cpu[1:-1] >= 0) & (cpu[1:-1] < max(d, 1))).all()
            checked += k_cpu
    assert checked > 0
