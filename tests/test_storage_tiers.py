"""Every tier and cache policy returns exactly ``numpy_array[ids]``; the gather contract's checks."""

import pickle

import numpy as np
import pytest
import torch

import sparsetrain.storage as st_storage
from sparsetrain.errors import DamagedFileError, InputError
from sparsetrain.storage import CachedFeatures, MmapFeatures, PinnedFeatures, TensorFeatures
from sparsetrain.storage.policies import POLICIES

NUM_ROWS = 1500
DTYPES = [np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_]
ROW_SHAPES = [(24,), (5,), (3, 4), ()]


def make_table(dtype, row_shape=(24,), rows=NUM_ROWS, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((rows, *row_shape)) * 50
    return values.astype(dtype)


def id_cases(rows=NUM_ROWS, seed=1):
    rng = np.random.default_rng(seed)
    return {
        "random_with_duplicates": rng.integers(0, rows, 3 * rows),
        "unsorted_distinct": rng.permutation(rows)[: rows // 3],
        "empty": np.empty(0, np.int64),
        "single": np.array([rows // 2]),
        "last_row": np.array([rows - 1]),
        "first_and_last_repeated": np.array([rows - 1, 0, rows - 1, 0, 0]),
        "descending_run": np.arange(rows)[::-1][:200].copy(),
        "int32": rng.integers(0, rows, 500).astype(np.int32),
    }


def stores_for(table, tmp_path, dtype_name):
    """One store of every kind (and every cache policy) over the same table."""
    path = tmp_path / f"features_{dtype_name}.npy"
    np.save(path, table)
    row_bytes = table[0].nbytes if table.ndim > 1 else table.itemsize
    hotness = np.random.default_rng(2).random(table.shape[0])
    stores = {
        "tensor": TensorFeatures(torch.from_numpy(table.copy())),
        "mmap": MmapFeatures(path),
        "mmap_advise": MmapFeatures(path, advise=True),
        "mmap_advise_auto": MmapFeatures(path, advise="auto"),
        "mmap_pread": MmapFeatures(path, mode="pread"),
        "mmap_pread_nocoalesce_advise": MmapFeatures(path, mode="pread", coalesce_bytes=0, advise=True),
        "disk_direct": MmapFeatures(path, mode="direct"),
        "disk_direct_one_thread_coalesce": MmapFeatures(path, mode="direct", io_threads=1, coalesce_bytes=16384),
        "pinned_cpu": PinnedFeatures(table.copy(), device="cpu"),
    }
    for policy in POLICIES:
        stores[f"cached_{policy}_over_mmap"] = CachedFeatures(
            MmapFeatures(path),
            capacity_bytes=150 * row_bytes,
            policy=policy,
            hotness=hotness,
            victim_bytes=40 * row_bytes,
        )
        stores[f"cached_{policy}_over_tensor"] = CachedFeatures(
            torch.from_numpy(table.copy()), 150 * row_bytes + 7, policy=policy, hotness=hotness
        )
    return stores


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_tier_returns_numpy_rows(tmp_path, dtype):
    table = make_table(dtype)
    for name, store in stores_for(table, tmp_path, np.dtype(dtype).name).items():
        assert store.shape == torch.Size(table.shape) and store.device == torch.device("cpu")
        assert store.dtype == torch.from_numpy(table[:1]).dtype, name
        for _ in range(2):  # the second round hits the caches
            for case, ids in id_cases().items():
                got = store.gather(torch.from_numpy(ids))
                assert got.dtype == store.dtype and got.shape == (ids.size, *table.shape[1:]), (name, case)
                assert np.array_equal(got.numpy(), table[ids.astype(np.int64)]), (name, case)


@pytest.mark.parametrize("row_shape", ROW_SHAPES, ids=str)
def test_row_shapes_and_odd_widths(tmp_path, row_shape):
    table = make_table(np.float32, row_shape, rows=300)
    ids = np.random.default_rng(5).integers(0, 300, 700)
    for name, store in stores_for(table, tmp_path, "f32").items():
        assert np.array_equal(store.gather(torch.from_numpy(ids)).numpy(), table[ids]), name


def test_bfloat16_tensor_and_pinned_stores():
    table = torch.randn(400, 10).to(torch.bfloat16)
    ids = torch.randint(0, 400, (900,), generator=torch.Generator().manual_seed(0))
    for store in (TensorFeatures(table), PinnedFeatures(table, device="cpu"), CachedFeatures(table, 40 * 20, "lru")):
        assert torch.equal(store.gather(ids), table[ids])
        assert torch.equal(store.gather(ids), table[ids])


def test_gather_into_out_and_stats(tmp_path):
    table = make_table(np.float32, rows=500)
    path = tmp_path / "f.npy"
    np.save(path, table)
    store = MmapFeatures(path)
    ids = torch.tensor([4, 499, 4, 0])
    out = torch.full((4, 24), -1.0)
    assert store.gather(ids, out=out) is out
    assert np.array_equal(out.numpy(), table[ids.numpy()])
    assert store.stats.rows_served == 4 and store.stats.bytes_served == 4 * 96 and store.stats.gathers == 1
    assert 3 * 96 <= store.stats.bytes_moved <= 500 * 96  # distinct rows only (plus coalesced gaps)
    with pytest.raises(InputError, match="shape"):
        store.gather(ids, out=torch.empty(3, 24))
    with pytest.raises(InputError, match="float16"):
        store.gather(ids, out=torch.empty(4, 24, dtype=torch.float16))
    with pytest.raises(InputError, match="contiguous"):
        store.gather(ids, out=torch.empty(24, 4).t())


@pytest.mark.parametrize("kind", ["tensor", "mmap", "mmap_pread", "pinned_cpu", "cached_hybrid_over_mmap"])
def test_bad_ids_raise_before_any_read(tmp_path, kind):
    table = make_table(np.float32, rows=100)
    store = stores_for(table, tmp_path, "f32")[kind]
    before = store.stats.bytes_moved
    cases = [
        (torch.tensor([0, 100]), "row id 100 is out of range.*100 rows"),
        (torch.tensor([3, -1]), "row id -1 is out of range"),
        (torch.tensor([1.0, 2.0]), "int64.*float32"),
        (torch.tensor([True, False]), "int64.*bool"),
        (torch.tensor([[1, 2]]), "1-D"),
        ([1, 2], "torch.LongTensor"),
        (np.array([0.5]), "integers"),
    ]
    for ids, message in cases:
        with pytest.raises(InputError, match=message):
            store.gather(ids)
        with pytest.raises(ValueError):  # InputError is a ValueError for callers that do not know it
            store.gather(ids)
    assert store.stats.bytes_moved == before and store.stats.rows_served == 0


def test_numpy_ids_and_getitem(tmp_path):
    table = make_table(np.float16, rows=200)
    np.save(tmp_path / "f.npy", table)
    store = MmapFeatures(tmp_path / "f.npy")
    ids = np.array([5, 1, 5, 199])
    assert np.array_equal(store.gather(ids).numpy(), table[ids])
    assert np.array_equal(store[torch.from_numpy(ids)].numpy(), table[ids])
    assert np.array_equal(store[2:4].numpy(), table[2:4])  # slices read the mapped table
    assert torch.equal(store, torch.from_numpy(table))  # torch functions see the whole table
    assert np.array_equal(store.numpy(), table) and len(store) == 200
    assert torch.equal(store.clone(), torch.from_numpy(table)) and np.array_equal(np.asarray(store), table)
    assert store.to(torch.float32).dtype == torch.float32


def test_mmap_store_pickles_and_reopens(tmp_path):
    table = make_table(np.float32, rows=64)
    np.save(tmp_path / "f.npy", table)
    clone = pickle.loads(pickle.dumps(MmapFeatures(tmp_path / "f.npy")))
    assert np.array_equal(clone.gather(torch.tensor([63, 1])).numpy(), table[[63, 1]])


def test_dataset_feature_store_checks_meta(tmp_path):
    import json

    import sparsetrain as st

    ds = st.datasets.synthesize(
        tmp_path / "g", 300, 1200, feature_dim=6, num_classes=3, seed=0, overwrite=True, quiet=True
    )
    table = np.load(tmp_path / "g" / "features.npy")
    ids = torch.randint(0, 300, (50,), generator=torch.Generator().manual_seed(1))
    store = ds.feature_store(mode="pread")
    assert store is not ds.features and store.mode == "pread"
    assert np.array_equal(store.gather(ids).numpy(), table[ids.numpy()])

    meta = json.loads((tmp_path / "g" / "meta.json").read_text())
    meta["files"]["features.npy"]["shape"] = [300, 7]
    with pytest.raises(DamagedFileError, match=r"meta\.json records float32\[300, 7\]"):
        st.datasets.GraphDataset(ds.path, meta, ds.graph).feature_store()
    del meta["files"]["features.npy"]
    with pytest.raises(DamagedFileError, match="has no node features"):
        st.datasets.GraphDataset(ds.path, meta, ds.graph).feature_store()


def test_mmap_reads_only_requested_rows(tmp_path):
    """A gather of a few far-apart rows reads about those rows, not the file."""
    table = make_table(np.float32, (256,), rows=4000)
    np.save(tmp_path / "f.npy", table)
    store = MmapFeatures(tmp_path / "f.npy", mode="pread", coalesce_bytes=0)
    ids = torch.tensor([10, 900, 3999, 2000, 10])
    assert np.array_equal(store.gather(ids).numpy(), table[ids.numpy()])
    assert store.stats.bytes_moved == 4 * 1024


def test_direct_reads_blocks_of_requested_rows_and_bypasses_the_page_cache(tmp_path):
    """mode="direct": O_DIRECT reads of the blocks holding the rows (512 B to 4 KiB), none of them left in the page
    cache."""
    import mmap
    import os

    from sparsetrain.storage.file_reads import resident_fraction

    table = make_table(np.float16, (128,), rows=40_000)  # 256 B rows: 16 per block
    path = tmp_path / "f.npy"
    np.save(path, table)
    store = MmapFeatures(path, mode="direct", coalesce_bytes=0)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    # the header read (and its readahead) went through the page cache
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if not store.direct:
        pytest.skip(f"{tmp_path}: the file system does not take O_DIRECT")
    ids = np.array([5, 6, 39_999, 20_000, 5, 17 * 16, 17 * 16 + 15])
    assert np.array_equal(store.gather(torch.from_numpy(ids)).numpy(), table[ids])
    data, block = store.data_offset, store.block_bytes
    assert block in (512, 1024, 2048, 4096)
    blocks = {(data + i * 256) // block for i in ids} | {(data + i * 256 + 255) // block for i in ids}
    assert store.stats.bytes_moved == len(blocks) * block
    mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    base = np.frombuffer(mapping, dtype=np.uint8, count=1).ctypes.data
    assert resident_fraction(base, data, 256, np.unique(ids)) == 0.0
    del base
    mapping.close()
    os.close(fd)


def test_cpu_only_import_does_not_load_cuda_modules():
    import subprocess
    import sys

    code = "import sys, sparsetrain.storage as s; print(any(m.startswith('numba.cuda') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    assert hasattr(st_storage, "CachedFeatures")


def test_misaligned_out_buffer(tmp_path):
    """An ``out`` view at an odd offset still gets exact rows (kernels fall back to narrower words)."""
    table = make_table(np.float16, (4,), rows=300)
    ids = np.random.default_rng(9).integers(0, 300, 100)
    for name, store in stores_for(table, tmp_path, "f16").items():
        backing = torch.zeros(ids.size * 4 + 1, dtype=torch.float16)
        out = backing[1:].view(ids.size, 4)
        assert out.data_ptr() % 8 != 0
        store.gather(torch.from_numpy(ids), out=out)
        assert np.array_equal(out.numpy(), table[ids]), name


def test_large_gathers_take_the_parallel_paths(tmp_path):
    """Big id lists use the parallel kernels (small ones run on the calling thread)."""
    from sparsetrain.storage.gather_kernels import PARALLEL_MIN_ROWS

    table = make_table(np.float32, (64,), rows=30_000)
    np.save(tmp_path / "f.npy", table)
    ids = np.random.default_rng(3).integers(0, 30_000, 40_000)
    assert ids.size >= 4 * PARALLEL_MIN_ROWS
    cached = CachedFeatures(
        torch.from_numpy(table), capacity_bytes=3000 * 256, policy="hybrid", hotness=np.ones(30_000)
    )
    stores = [
        TensorFeatures(torch.from_numpy(table)),
        PinnedFeatures(table, device="cpu"),
        MmapFeatures(tmp_path / "f.npy"),
        MmapFeatures(tmp_path / "f.npy", mode="pread"),
        MmapFeatures(tmp_path / "f.npy", mode="direct", io_threads=3),
        cached,
    ]
    for store in stores:
        for _ in range(2):
            assert np.array_equal(store.gather(torch.from_numpy(ids)).numpy(), table[ids]), store


def test_streaming_store_gather_matches_and_is_chosen_only_when_it_applies():
    """Large outputs of whole 64-byte lines take the non-temporal-store kernel, serial and parallel; others do not."""
    from sparsetrain.storage import gather_kernels as gk

    rng = np.random.default_rng(4)
    table = rng.standard_normal((20_000, 64), dtype=np.float32)  # 256 B rows
    ids = rng.integers(0, 20_000, gk.STREAMING_MIN_BYTES // 256 + 77)
    out = torch.empty(ids.size, 64).numpy()  # torch allocates 64-byte aligned (NumPy only 16)
    assert gk.streams(out)
    gk._gather_rows_serial(table, ids, out, gk.PREFETCH_DISTANCE, True)
    assert np.array_equal(out, table[ids])
    out[:] = 0
    gk._gather_rows(table, ids, out, gk.PREFETCH_DISTANCE, 2, True)
    assert np.array_equal(out, table[ids])
    assert not gk.streams(out[:100])  # small: the reader finds it in cache
    assert not gk.streams(np.empty((ids.size, 47), dtype=np.float32))  # 188 B rows are not whole lines
    shifted = torch.empty(out.size + 1).numpy()[1:].reshape(out.shape)
    assert not gk.streams(shifted)  # not 64-byte aligned
    gk.gather_rows(table, shifted, ids=ids)
    assert np.array_equal(shifted, table[ids])
