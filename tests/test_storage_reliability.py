"""Reliability: feature files that change under an open store, memory that stays in budget, pinning fallbacks."""

import gc
import os

import numpy as np
import pytest
import torch

from sparsetrain.errors import BackendError, DamagedFileError
from sparsetrain.storage import CachedFeatures, MmapFeatures, PinnedFeatures
from sparsetrain.storage.host_memory import PAGE, register_chunks


@pytest.fixture
def feature_file(tmp_path):
    table = np.random.default_rng(0).standard_normal((2000, 32)).astype(np.float32)
    path = tmp_path / "features.npy"
    np.save(path, table)
    return path, table


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_file_shrinking_under_open_store_raises_clear_error(feature_file, mode):
    path, table = feature_file
    store = MmapFeatures(path, mode=mode)
    assert np.array_equal(store.gather(torch.tensor([1999])).numpy(), table[[1999]])
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(DamagedFileError, match="shrank.*truncated"):
        store.gather(torch.tensor([1999]))
    with pytest.raises(DamagedFileError, match="shrank"):
        store.gather(torch.tensor([0]))  # even rows still present: the table is no longer what was opened
    with pytest.raises(RuntimeError):  # DamagedFileError is a RuntimeError
        store.gather(torch.tensor([0]))


def test_file_shrinking_during_a_read_gives_error_not_crash(feature_file, monkeypatch):
    """The race between the size check and the reads (mode="pread"): a short read is reported, never a SIGBUS."""
    path, _ = feature_file
    store = MmapFeatures(path, mode="pread")
    monkeypatch.setattr(store, "check_file", lambda: None)
    os.truncate(path, 128 + 100 * 128)
    with pytest.raises(DamagedFileError, match="shrank|short"):
        store.gather(torch.tensor([5, 1500, 1999]))


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_file_vanishing_or_replaced_raises(feature_file, mode):
    path, table = feature_file
    store = MmapFeatures(path, mode=mode)
    os.unlink(path)
    with pytest.raises(DamagedFileError, match="deleted"):
        store.gather(torch.tensor([3]))
    np.save(path, table)  # a new file at the same path is a different table
    with pytest.raises(DamagedFileError, match="replaced"):
        store.gather(torch.tensor([3]))
    store.close()
    with pytest.raises(DamagedFileError, match="closed"):
        store.gather(torch.tensor([3]))


def test_bad_feature_files_are_refused(tmp_path):
    with pytest.raises(DamagedFileError, match="no such feature file"):
        MmapFeatures(tmp_path / "missing.npy")
    (tmp_path / "junk.npy").write_bytes(b"not an npy file at all")
    with pytest.raises(DamagedFileError, match="not a readable .npy"):
        MmapFeatures(tmp_path / "junk.npy")
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.ones((4, 3), np.float32)))
    with pytest.raises(DamagedFileError, match="Fortran"):
        MmapFeatures(tmp_path / "fortran.npy")
    np.save(tmp_path / "short.npy", np.ones((100, 8), np.float32))
    os.truncate(tmp_path / "short.npy", 500)
    with pytest.raises(DamagedFileError, match="truncated"):
        MmapFeatures(tmp_path / "short.npy")


def test_cache_over_file_that_vanishes_reports_it(feature_file):
    path, table = feature_file
    cache = CachedFeatures(MmapFeatures(path), capacity_bytes=100 * 128, policy="lru")
    cache.gather(torch.arange(50))
    os.unlink(path)
    assert np.array_equal(cache.gather(torch.arange(50)).numpy(), table[:50])  # all hits: no file read
    with pytest.raises(DamagedFileError, match="deleted"):
        cache.gather(torch.arange(40, 60))


def proc_status_bytes(field: str) -> int:
    """A memory field of /proc/self/status (``VmRSS``: resident; ``RssAnon``: resident anonymous memory)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/self/status has no {field}")


def rss_bytes() -> int:
    return proc_status_bytes("VmRSS")


def anon_rss_bytes() -> int:
    """What a leak grows; mapped file pages are not counted."""
    return proc_status_bytes("RssAnon")


@pytest.mark.parametrize("kind", ["mmap", "pread", "cached_hybrid_victim"])
def test_memory_stays_in_budget_over_10000_random_gathers(tmp_path, kind):
    rows, dim = 50_000, 64  # 12.8 MB of features
    table = np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)
    np.save(tmp_path / "f.npy", table)
    del table
    store = MmapFeatures(tmp_path / "f.npy", mode="pread" if kind == "pread" else "mmap")
    budget = 2 << 20
    if kind != "mmap":
        store = CachedFeatures(
            store,
            capacity_bytes=budget,
            policy="hybrid",
            hotness=np.arange(rows, dtype=np.float64),
            victim_bytes=budget // 4,
        )
        assert store.memory_bytes <= budget + budget // 4
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):  # warm up allocators and JIT
        store.gather(torch.randint(0, rows, (256,), generator=gen))
    gc.collect()
    before, before_anon = rss_bytes(), anon_rss_bytes()
    for _ in range(10_000):
        store.gather(torch.randint(0, rows, (256,), generator=gen))
    gc.collect()
    growth, growth_anon = rss_bytes() - before, anon_rss_bytes() - before_anon
    assert growth_anon < 8 << 20, f"anonymous RSS grew by {growth_anon / 2**20:.1f} MiB over 10,000 gathers"
    assert growth < (8 << 20) + rows * dim * 4, (
        f"RSS grew by {growth / 2**20:.1f} MiB (more than the mapped file) over 10,000 gathers"
    )
    assert store.stats.gathers == 10_200


def test_chunked_registration_fallback():
    """One huge registration fails -> page-aligned chunks that halve until they fit; all-or-nothing."""
    calls, registered = [], []

    def register(address, size):
        calls.append(size)
        if size > 10 * PAGE:
            return False
        registered.append((address, size))
        return True

    pieces = register_chunks(
        PAGE * 1000 + 100, 100 * PAGE, register, registered.remove, chunk_bytes=64 * PAGE, min_chunk_bytes=PAGE
    )
    assert calls[0] == 100 * PAGE and pieces == registered
    assert sum(size for _, size in pieces) == 100 * PAGE
    assert all((a + s) % PAGE == 0 for a, s in pieces[:-1])  # chunk ends on page boundaries: no page registered twice
    assert all(pieces[i][0] + pieces[i][1] == pieces[i + 1][0] for i in range(len(pieces) - 1))

    undone = []
    with pytest.raises(BackendError, match="ulimit -l"):
        register_chunks(
            0,
            100 * PAGE,
            lambda a, s: s <= PAGE and a < 5 * PAGE,
            undone.append,
            chunk_bytes=4 * PAGE,
            min_chunk_bytes=PAGE,
        )
    assert undone == [0, PAGE, 2 * PAGE, 3 * PAGE, 4 * PAGE]


def test_pinned_store_without_cuda_stays_usable():
    table = torch.randn(100, 6)
    store = PinnedFeatures(table, device="cpu")
    out = store.gather(torch.tensor([99, 0]))
    assert torch.equal(out, table[[99, 0]])
    if not torch.cuda.is_available():
        assert not store.pinned
        with pytest.raises(BackendError, match="needs a CUDA GPU"):
            PinnedFeatures(table, device="cuda")
