"""The structure checks stream a dataset's big arrays with positioned reads (``array_chunks`` over a read-only map):
the chunks equal the map's, a damaged entry is still found, and walking a file leaves none of its pages resident (a
check over IGBH-large's tens of GB of topology must not count them in ``partition``'s peak RSS)."""

import os

import numpy as np
import pytest

import sparsetrain as st
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.checks import array_chunks
from sparsetrain.datasets.dataset import verify_structure
from sparsetrain.errors import DatasetError


def _status_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _peak_growth_kb(run) -> int:
    """How far the resident set's peak (VmHWM, reset first) rose above the resident set while ``run()`` ran."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current VmRSS
    before = _status_kb("VmRSS")
    run()
    return _status_kb("VmHWM") - before


def test_chunks_of_read_only_map_slices_equal_the_array(tmp_path):
    x = np.arange(3 * 1001, dtype=np.int64).reshape(1001, 3)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    cow = np.load(tmp_path / "x.npy", mmap_mode="c")
    for array, ref in ((mapped, x), (mapped[17:950], x[17:950]), (mapped[5:6], x[5:6]), (cow[3:], x[3:]),
                       (mapped[:, 1], x[:, 1]), (x[2:], x[2:])):
        got = list(array_chunks(array, 100))
        assert [lo for lo, _ in got] == list(range(0, len(ref), 100))
        assert np.array_equal(np.concatenate([part for _, part in got]), ref)
        assert all(type(part) is np.ndarray for _, part in got)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/self/status")
def test_verify_structure_leaves_no_pages_resident_and_still_finds_damage(tmp_path):
    rng = np.random.default_rng(0)
    n, e = 100_000, 4_000_000  # 16 MB of int32 sources + 32 MB of int64 edge ids
    np.save(tmp_path / "e.npy", np.stack([rng.integers(0, n, e), rng.integers(0, 1000, e)], 1))
    ds = st.datasets.from_files(tmp_path / "ds", {("a", "to", "b"): tmp_path / "e.npy"},
                                num_nodes={"a": n, "b": 1000}, quiet=True)
    # KiB; a walk through the maps peaks ~46 MB higher (the 48 MB of indices and edge ids)
    assert _peak_growth_kb(lambda: verify_structure(ds, chunk=1 << 18)) < 8 << 10
    indices = np.load(ds.path / fmt.INDICES, mmap_mode="r+")
    indices[123_456] = n  # out of range for the source type
    indices.flush()
    del indices
    with pytest.raises(DatasetError, match=r"entry 123456 is 'a' node 100000"):
        verify_structure(ds, chunk=1 << 18)
