"""GPU paths: the zero-copy kernel's logic under the Numba CUDA simulator, and real-GPU checks (``gpu`` marker)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

SIMULATED_KERNEL_CHECK = textwrap.dedent(
    """
    import os
    assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
    import numpy as np
    from sparsetrain.storage.cuda_gather import launch_gather, word_bytes

    WORD_DTYPES = {16: np.complex128, 8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}
    rng = np.random.default_rng(0)
    checked = []
    dtype_widths = [(np.float32, 4), (np.float32, 6), (np.float32, 3), (np.float16, 3), (np.float16, 8), (np.int8, 5),
                    (np.float64, 2), (np.uint8, 1)]
    for dtype, width in dtype_widths:
        table = (rng.standard_normal((37, width)) * 20).astype(dtype)
        for ids in (rng.integers(0, 37, 23), np.array([36]), np.array([5, 5, 0, 36, 5]), np.empty(0, np.int64)):
            order = np.argsort(ids, kind="stable")
            sorted_ids = ids[order].astype(np.int64)
            raw = table.view(np.uint8).reshape(37, -1)
            out = np.zeros((ids.size, raw.shape[1]), np.uint8)
            word = word_bytes(raw.shape[1], raw.ctypes.data, out.ctypes.data)
            launch_gather(raw.view(WORD_DTYPES[word]), sorted_ids, order.astype(np.int64), out.view(WORD_DTYPES[word]))
            got = out.view(dtype).reshape(ids.size, width)
            assert np.array_equal(got, table[ids]), (dtype, width, ids)
            checked.append(word)
    print("words", sorted(set(checked)))
    """
)


def test_zero_copy_kernel_logic_under_cuda_simulator():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    result = subprocess.run(
        [sys.executable, "-c", SIMULATED_KERNEL_CHECK], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "words [1, 2, 4, 8, 16]" in result.stdout  # every load width was exercised


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
