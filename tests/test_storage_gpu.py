"""GPU paths: the zero-copy kernel's logic under the Numba CUDA simulator, and real-GPU checks (``gpu`` marker)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsetrain._launch_counts import LaunchCounts

SIMULATOR_SCRIPT = Path(__file__).with_name("cudasim_gather.py")
SIMULATOR_CHECKS = ["check_kernel_every_word_and_only_n_ids",
                    "check_aligned_kernel_reads_odd_widths_and_unaligned_outputs",
                    "check_store_calls_take_the_aligned_kernel_and_equal_the_word_kernel",
                    "check_store_calls_equal_table_rows",
                    "check_counts_per_call", "check_out_of_range_ids_raise_at_the_next_call", "check_torch_array_calls"]


@pytest.fixture(scope="module")
def simulator_results() -> dict[str, str]:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, str(SIMULATOR_SCRIPT), *SIMULATOR_CHECKS], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("check", SIMULATOR_CHECKS)
def test_zero_copy_gather_under_cuda_simulator(simulator_results, check):
    assert simulator_results[check] == "ok", simulator_results[check]


def test_gather_kernel_compiles_for_a_gpu_without_one():
    """The simulator runs the kernel as Python and never types it: compile it to PTX for sm_90 (NVVM, no GPU) with
    the argument types the store passes (word arrays, int64 or int32 ids, the int64 count and flag)."""
    code = textwrap.dedent(
        """
        from numba import types
        from sparsetrain._numba_cuda import cuda
        from sparsetrain.storage.cuda_gather import aligned_gather_kernel, zero_copy_gather_kernel

        for word, ids in ((types.complex128, types.int64), (types.uint32, types.int32), (types.uint8, types.int64)):
            words, ids, i64 = types.Array(word, 2, "C"), types.Array(ids, 1, "C"), types.Array(types.int64, 1, "C")
            ptx, _ = cuda.compile_ptx(zero_copy_gather_kernel.py_func, (words, ids, i64, types.int64, words, i64),
                                      cc=(9, 0))
            assert ".entry" in ptx
        src8 = types.Array(types.uint64, 2, "C")
        for word, ids in ((types.uint32, types.int64), (types.uint16, types.int32), (types.uint8, types.int64)):
            words, ids, i64 = types.Array(word, 2, "C"), types.Array(ids, 1, "C"), types.Array(types.int64, 1, "C")
            ptx, _ = cuda.compile_ptx(aligned_gather_kernel.py_func, (src8, types.int64, types.int64, ids, i64,
                                                                      types.int64, words, i64), cc=(9, 0))
            assert ".entry" in ptx and "ld.global.u64" in ptx  # (8-byte loads)
        print("compiled")
        """
    )
    from numba.cuda.cudadrv import nvvm

    if not nvvm.is_available():
        pytest.skip("no NVVM to compile with")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]


def test_word_width_selection():
    from sparsetrain.storage.cuda_gather import word_bytes

    assert word_bytes(512, 0, 4096) == 16  # 128 float32
    assert word_bytes(188, 0, 512) == 4  # 47 float32: 4-byte loads
    assert word_bytes(200, 0, 512) == 8  # 100 float16
    assert word_bytes(512, 8, 512) == 8  # misaligned base
    assert word_bytes(3, 0, 0) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8])
@pytest.mark.parametrize("width", [128, 47, 100, 3])
def test_pinned_zero_copy_gather_on_gpu(dtype, width):
    from sparsetrain.storage import PinnedFeatures

    table = (torch.randn(5000, width) * 20).to(dtype)
    gen = torch.Generator().manual_seed(0)
    for copy in (False, True):
        store = PinnedFeatures(table.clone(), device="cuda", copy=copy)
        assert store.pinned
        for ids in (
            torch.randint(0, 5000, (3000,), generator=gen),
            torch.tensor([4999]),
            torch.tensor([], dtype=torch.long),
            torch.tensor([7, 7, 0]),
        ):
            got = store.gather(ids.cuda())
            assert got.device.type == "cuda" and torch.equal(got.cpu(), table[ids])
        store.close()


@pytest.mark.gpu
def test_pinned_cpu_path_returns_pinned_rows():
    from sparsetrain.storage import PinnedFeatures

    table = torch.randn(1000, 64)
    store = PinnedFeatures(table, device="cpu")
    ids = torch.randint(0, 1000, (500,))
    out = store.gather(ids)
    assert out.is_pinned() and torch.equal(out, table[ids])
    assert torch.equal(out.to("cuda", non_blocking=True).cpu(), table[ids])


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["static", "lru", "clock", "sieve", "hybrid"])
def test_gpu_cache_with_device_bookkeeping_over_direct_reads(tmp_path, policy):
    """No victim buffer: slots are looked up on the GPU; the policy catches up on its own thread."""
    from sparsetrain.storage import CachedFeatures, MmapFeatures

    table = np.random.default_rng(0).standard_normal((4000, 128)).astype(np.float16)
    np.save(tmp_path / "f.npy", table)
    cache = CachedFeatures(
        MmapFeatures(tmp_path / "f.npy", mode="direct"), 400 * 256, policy, device="cuda", hotness=np.arange(4000.0)
    )
    assert cache.bookkeeping == "device" and cache._slot_of.device.type == "cuda"
    gen = torch.Generator().manual_seed(1)
    for step in range(50):
        ids = torch.randint(0, 4000, (700,), generator=gen)
        if step % 3 == 0:
            cache.prefetch(torch.randint(0, 4000, (300,), generator=gen))
        got = cache.gather(ids.cuda())
        assert got.device.type == "cuda" and np.array_equal(got.cpu().numpy(), table[ids.numpy()])
    cache.close()
    assert torch.equal(cache._slot_of.cpu(), torch.from_numpy(cache.policy.slot_of))


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["static", "lru", "clock", "sieve", "hybrid"])
def test_gpu_cache_over_mmap(tmp_path, policy):
    from sparsetrain.storage import CachedFeatures, MmapFeatures

    table = np.random.default_rng(0).standard_normal((4000, 100)).astype(np.float16)
    np.save(tmp_path / "f.npy", table)
    cache = CachedFeatures(
        MmapFeatures(tmp_path / "f.npy"),
        400 * 200,
        policy,
        device="cuda",
        hotness=np.arange(4000.0),
        victim_bytes=100 * 200,
    )
    gen = torch.Generator().manual_seed(1)
    for step in range(50):
        ids = torch.randint(0, 4000, (700,), generator=gen)
        if step % 2:
            cache.prefetch(torch.randint(0, 4000, (300,), generator=gen))
        got = cache.gather(ids.cuda())
        assert got.device.type == "cuda" and np.array_equal(got.cpu().numpy(), table[ids.numpy()])
    cache.close()
    assert cache.memory_bytes <= 400 * 200 + 100 * 200


@pytest.mark.gpu
def test_gather_into_an_out_on_the_indexed_device():
    """A store made on "cuda" fills an ``out`` allocated on "cuda:0" (the same device, named with its index)."""
    from sparsetrain.storage import PinnedFeatures

    table = torch.randn(100, 16)
    store = PinnedFeatures(table, device="cuda")
    out = torch.empty(3, 16, device="cuda:0")
    assert store.gather(torch.tensor([5, 0, 99], device="cuda"), out=out) is out
    assert torch.equal(out.cpu(), table[[5, 0, 99]])


@pytest.mark.gpu
def test_zero_copy_gather_counts_and_late_id_check_on_gpu():
    """On a GPU: with ``out=`` a call queues a sort and one kernel (host ids: one copy more), no host wait, no
    allocation; an id out of range is raised by ``check()``, its row zeros, the other rows exact."""
    from sparsetrain.errors import InputError
    from sparsetrain.storage import PinnedFeatures

    table = torch.randn(5000, 64)
    store = PinnedFeatures(table, device="cuda")
    ids = torch.randint(0, 5000, (3000,))
    out = torch.empty(3000, 64, device="cuda")
    for given in (ids.cuda(), ids):
        store.gather(given, out=out)
        store.gather(given, out=out)
        counts = store.last_gather_counts
        host = given.device.type == "cpu"
        assert counts == LaunchCounts(kernels=1, torch_ops=1 + host, copies=int(host)), counts
        assert torch.equal(out.cpu(), table[ids])
    bad = ids.clone()
    bad[7] = 5000
    got = store.gather(bad.cuda())
    with pytest.raises(InputError, match="row id 5000 is out of range for a table of 5000 rows"):
        store.check()
    keep = torch.arange(3000) != 7
    assert torch.equal(got.cpu()[keep], table[bad[keep]]) and not got[7].any()
    store.gather(torch.tensor([-1], device="cuda"))
    with pytest.raises(InputError, match="row id -1"):
        store.close()
    with pytest.raises(InputError, match="row id 5000"):  # host ids: checked before any read, as on the CPU
        PinnedFeatures(table, device="cuda").gather(bad)


@pytest.mark.gpu
def test_a_gpu_tensor_store_checks_device_ids_on_the_device_and_raises_at_check():
    from sparsetrain.errors import InputError
    from sparsetrain.storage import TensorFeatures

    table = torch.randn(50, 6)
    store = TensorFeatures(table.cuda())
    ids = torch.tensor([3, 7, 3, 49], device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # no host read of the ids
    try:
        rows = store.gather(ids)
        bad = store.gather(torch.tensor([1, 50, -2], device="cuda"))  # not read; raised at check()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(rows.cpu(), table[[3, 7, 3, 49]]) and torch.equal(bad[0].cpu(), table[1])
    with pytest.raises(InputError, match="50"):
        store.check()
    store.check()  # (reported once)
