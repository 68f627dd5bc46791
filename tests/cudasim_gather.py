"""The zero-copy gather and the call around it (``storage/cuda_gather.py``) under the Numba CUDA simulator.

Run by tests/test_storage_gpu.py in a subprocess with NUMBA_ENABLE_CUDASIM=1 (set before numba.cuda is imported).
Prints one JSON object: check name -> "ok" or the failure.
"""

from __future__ import annotations

import os

import numpy as np
import torch

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "run with NUMBA_ENABLE_CUDASIM=1"

from sparsetrain._launch_counts import LaunchCounts  # noqa: E402
from sparsetrain.errors import InputError  # noqa: E402
from sparsetrain.storage import cuda_gather  # noqa: E402
from sparsetrain.storage.cuda_gather import (  # noqa: E402
    NumpyOps,
    ZeroCopyGather,
    launch_aligned_gather,
    launch_gather,
    use_aligned,
    word_bytes,
)

WORD_DTYPES = {16: np.complex128, 8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}
DTYPE_WIDTHS = [(np.float32, 4), (np.float32, 6), (np.float32, 3), (np.float16, 3), (np.float16, 8), (np.int8, 5),
                (np.float64, 2), (np.uint8, 1)]


def table_of(dtype, width, rows=37, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((rows, width)) * 20).astype(dtype)


def store(table: np.ndarray) -> ZeroCopyGather:
    return ZeroCopyGather(NumpyOps(), table, table.shape[0], table[0].nbytes, "PinnedFeatures.gather")


def call(g: ZeroCopyGather, ids, out=None, shape=None):
    """One ``PinnedFeatures.gather`` as the store makes it: begin, the output unless given, the gather."""
    g.begin()
    if out is None:
        out = g.output(shape, g._table.dtype)
    g.gather(ids, out)
    return out


def check_kernel_every_word_and_only_n_ids():
    """``table[ids]`` for every load width; ids past ``n`` in the kept buffers (out of range here) are never read."""
    rng = np.random.default_rng(0)
    checked = []
    for dtype, width in DTYPE_WIDTHS:
        table = table_of(dtype, width)
        for ids in (rng.integers(0, 37, 23), np.array([36]), np.array([5, 5, 0, 36, 5]), np.empty(0, np.int64)):
            order = np.argsort(ids, kind="stable")
            n = ids.size
            sorted_ids = np.concatenate([ids[order], [-3, 99]]).astype(np.int64)  # a kept buffer longer than n
            positions = np.concatenate([order, [0, 1]]).astype(np.int64)
            raw = table.view(np.uint8).reshape(37, -1)
            out = np.zeros((n, raw.shape[1]), np.uint8)
            bad = np.zeros(1, np.int64)
            word = word_bytes(raw.shape[1], raw.ctypes.data, out.ctypes.data)
            launch_gather(raw.view(WORD_DTYPES[word]), sorted_ids, positions, n, out.view(WORD_DTYPES[word]), bad)
            assert np.array_equal(out.view(dtype).reshape(n, width), table[ids]), (dtype, width, ids)
            assert bad[0] == 0, bad
            checked.append(word)
    assert sorted(set(checked)) == [1, 2, 4, 8, 16], sorted(set(checked))


def check_aligned_kernel_reads_odd_widths_and_unaligned_outputs():
    """The warp-a-row kernel of 8-byte aligned loads: ``table[ids]`` for rows of 188 bytes (47 float32), 400 bytes
    written to an output 4 bytes off alignment, 6 (3 float16) and 5 (int8) bytes, with duplicates, runs of consecutive
    ids, more rows than a warp's batch of ROWS_IN_FLIGHT and an id outside the table (zeroed, flagged)."""
    rng = np.random.default_rng(3)
    for dtype, width, rows, offset in [(np.float32, 47, 40, 0), (np.float32, 100, 16, 4), (np.float16, 3, 32, 0),
                                       (np.int8, 5, 48, 0), (np.float32, 47, 40, 4)]:
        table = table_of(dtype, width, rows=rows)
        raw = table.view(np.uint8).reshape(rows, -1)
        row_bytes = raw.shape[1]
        for ids in (rng.integers(0, rows, 19), np.arange(5, 14), np.array([rows - 1, 0, 0, 7, 8, 9, rows - 1])):
            order = np.argsort(ids, kind="stable")
            n = ids.size
            sorted_ids, positions = ids[order].astype(np.int64), order.astype(np.int64)
            backing = np.zeros(n * row_bytes + 16, np.uint8)
            out = backing[offset: offset + n * row_bytes].reshape(n, row_bytes)  # (offset: an unaligned output)
            word = word_bytes(row_bytes, raw.ctypes.data, out.ctypes.data)
            assert use_aligned(row_bytes, word, raw.ctypes.data, raw.nbytes), (dtype, width, word)
            bad = np.zeros(1, np.int64)
            src8 = raw.reshape(1, -1).view(np.uint64)
            launch_aligned_gather(src8, rows, row_bytes, sorted_ids, positions, n, out.view(WORD_DTYPES[word]), bad)
            assert np.array_equal(out.view(dtype).reshape(n, width), table[ids]), (dtype, width, offset, ids)
            assert bad[0] == 0
        ids = np.array([2, rows + 3, 4])  # an id outside the table: never read, its row zero, the id flagged
        backing = np.full(3 * row_bytes + 16, 255, np.uint8)
        out = backing[offset: offset + 3 * row_bytes].reshape(3, row_bytes)
        bad = np.zeros(1, np.int64)
        word = word_bytes(row_bytes, raw.ctypes.data, out.ctypes.data)
        launch_aligned_gather(raw.reshape(1, -1).view(np.uint64), rows, row_bytes, ids, np.arange(3), 3,
                              out.view(WORD_DTYPES[word]), bad)
        assert bad[0] == rows + 3 and not out[1].any()
        assert np.array_equal(out[[0, 2]].view(dtype).reshape(2, width), table[[2, 4]])
    # where it does not apply: rows of whole 8-byte words, a table not 8-byte aligned or not whole words
    assert not use_aligned(400, 16, 0, 4000) and not use_aligned(188, 4, 4, 1880) and not use_aligned(188, 4, 0, 188)


def check_store_calls_take_the_aligned_kernel_and_equal_the_word_kernel():
    """A store of 188-byte rows reads through the aligned kernel; its calls equal the word kernel's and the table's."""
    rng = np.random.default_rng(5)
    table = table_of(np.float32, 47, rows=64)
    launched = []
    real = cuda_gather.launch_aligned_gather

    def counting(*args, **kwargs):
        launched.append(1)
        return real(*args, **kwargs)

    cuda_gather.launch_aligned_gather = counting
    try:
        for aligned in (True, False):
            cuda_gather.ALIGNED = aligned
            g, before = store(table), len(launched)
            for n in (5, 33):
                ids = rng.integers(0, 64, n)
                assert np.array_equal(call(g, ids, shape=(n, 47)), table[ids])
            assert len(launched) - before == (2 if aligned else 0), launched
    finally:
        cuda_gather.launch_aligned_gather = real
        cuda_gather.ALIGNED = True


def check_store_calls_equal_table_rows():
    """Ids on the device (int64, int32) and on the host, duplicates, growing counts, ``out=``: always ``table[ids]``."""
    cuda_gather.MIN_CAPACITY = 4  # the kept buffers grow within a few small calls
    rng = np.random.default_rng(1)
    for dtype, width in DTYPE_WIDTHS[:3]:
        table = table_of(dtype, width)
        g = store(table)
        for n in (3, 9, 1, 12):
            ids = rng.integers(0, 37, n)
            ids[0] = ids[-1]
            for given in (ids, ids.astype(np.int32), torch.from_numpy(ids), torch.from_numpy(ids.astype(np.int32))):
                got = call(g, given, shape=(n, width))
                assert np.array_equal(got, table[ids]), (dtype, width, given)
                out = np.full((n, width), 7, dtype)
                assert call(g, given, out=out) is out and np.array_equal(out, table[ids])


def check_counts_per_call():
    """What each call queues, counted by the store: after its buffers have grown, a sort and one kernel; no host wait,
    no allocation with ``out=`` (one, the output, without); host ids add one copy through a kept pinned buffer."""
    cuda_gather.MIN_CAPACITY = 16
    table = table_of(np.float32, 6)
    g = store(table)
    ids = np.random.default_rng(2).integers(0, 37, 10)
    out = np.empty((10, 6), np.float32)
    expect = [
        ("device ids, first call", ids, None, dict(kernels=1, torch_ops=1, allocations=3)),
        ("device ids", ids, None, dict(kernels=1, torch_ops=1, allocations=1)),
        ("device ids, out=", ids, out, dict(kernels=1, torch_ops=1)),
        ("host ids, first call, out=", torch.from_numpy(ids), out,
         dict(kernels=1, torch_ops=2, copies=1, allocations=1, pinned_allocations=2)),
        ("host ids, out=", torch.from_numpy(ids), out, dict(kernels=1, torch_ops=2, copies=1)),
        ("host ids again, out=", torch.from_numpy(ids), out, dict(kernels=1, torch_ops=2, copies=1)),
        ("device ids, out=, after host ids", ids, out, dict(kernels=1, torch_ops=1)),
    ]
    for name, given, given_out, counts in expect:
        got = call(g, given, given_out, shape=(10, 6))
        assert np.array_equal(got, table[ids]), name
        want = LaunchCounts(**counts).as_dict()
        assert g.counts.as_dict() == want, (name, g.counts.as_dict(), want)
    call(g, np.random.default_rng(3).integers(0, 37, 17), shape=(17, 6))  # past the kept capacity: the buffers grow
    assert g.counts == LaunchCounts(kernels=1, torch_ops=1, allocations=3), g.counts


def check_out_of_range_ids_raise_at_the_next_call():
    """The kernel checks the ids: a bad one is not read, its row is zeros, and the store raises it at its next call
    (or ``check()``), naming it; the calls after that are clean again."""
    table = table_of(np.float32, 4)
    for bad in (37, -2, 10**12):
        g = store(table)
        ids = np.array([3, bad, 0, 3])
        got = call(g, ids, shape=(4, 4))
        ok = ids != bad
        assert np.array_equal(got[ok], table[ids[ok]]) and not got[~ok].any(), got
        try:
            call(g, np.array([1]), shape=(1, 4))
        except InputError as exc:
            assert f"row id {bad} is out of range for a table of 37 rows" in str(exc), exc
        else:
            raise AssertionError(f"id {bad} was not raised at the next call")
        assert np.array_equal(call(g, np.array([1, 36]), shape=(2, 4)), table[[1, 36]])
        call(g, torch.tensor([bad]), shape=(1, 4))  # host ids: checked by the same kernel
        try:
            g.check()
        except InputError as exc:
            assert f"row id {bad} is out of range" in str(exc), exc
        else:
            raise AssertionError(f"id {bad} was not raised by check()")
        g.check()


class HostTorchOps(cuda_gather.TorchOps):
    """The GPU's array calls (``torch.empty``, ``torch.sort(out=)``, slices of kept buffers) on CPU tensors; only
    what needs a device is replaced: kernel views are NumPy views of the same memory, no streams or events."""

    def __init__(self) -> None:
        super().__init__(torch.device("cpu"))

    def pinned(self, n, dtype):
        return torch.empty(n, dtype=dtype)

    def view(self, a):
        return a.numpy()

    def words(self, a, rows, row_bytes, word):
        return NumpyOps().words(a.numpy(), rows, row_bytes, word)

    def stream_key(self):
        return 0

    def numba_stream(self, key):
        return 0

    def event(self):
        return None

    record = wait = wait_for = NumpyOps.record
    done = NumpyOps.done

    def synchronize(self):
        pass

    def scope(self):
        return NumpyOps().scope()


def check_torch_array_calls():
    """The store's torch calls on kept buffers (sort into slices of them, int32 and int64 ids, growing counts)."""
    cuda_gather.MIN_CAPACITY = 4
    table = torch.from_numpy(table_of(np.float32, 4))
    g = ZeroCopyGather(HostTorchOps(), table, 37, 16, "PinnedFeatures.gather")
    rng = np.random.default_rng(4)
    for n in (3, 7, 2, 9):
        for dtype in (torch.int64, torch.int32):
            ids = torch.from_numpy(rng.integers(0, 37, n)).to(dtype)
            g.begin()
            out = g.output((n, 4), torch.float32)
            g.gather(ids, out)
            assert torch.equal(out, table[ids.long()]), (n, dtype)
    g.begin()
    assert g._ids["int64"].capacity == 16 and g._ids["int32"].capacity == 16


if __name__ == "__main__":
    from cudasim_main import run_checks

    run_checks(globals())
