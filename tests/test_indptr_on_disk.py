"""The writer streams the column pointers to disk edge type by edge type: a typed graph has one per (edge type,
destination node) (IGBH-large: 734M, 5.9 GB; IGBH-full ~1.9B), so ``build_topology`` keeps none of them in memory and
hands back a mapped file whose values are the CSC's, checked against NumPy."""

import numpy as np

import sparsetrain as st
from sparsetrain.datasets.build import BuildOptions
from sparsetrain.datasets.sources import EdgeSource
from sparsetrain.datasets.topology import build_topology
from sparsetrain.datasets.writer import DatasetWriter

COUNTS = {"a": 700, "b": 50}
EDGES = {("a", "cites", "a"): 3000, ("a", "to", "b"): 900, ("b", "rev_to", "a"): 900}


def _edges(seed=0):
    rng = np.random.default_rng(seed)
    return {et: (rng.integers(0, COUNTS[et[0]], n), rng.integers(0, COUNTS[et[2]], n)) for et, n in EDGES.items()}


def _reference_indptr(edges) -> np.ndarray:
    """The flat CSC's pointers by NumPy: edge type after edge type, one column per destination node."""
    parts, written = [], 0
    for et, (_, dst) in edges.items():
        degrees = np.bincount(dst, minlength=COUNTS[et[2]])
        parts.append(written + np.concatenate([[0], np.cumsum(degrees)[:-1]]))
        written += len(dst)
    return np.concatenate([*parts, [written]]).astype(np.int64)


def test_build_topology_streams_the_pointers_to_a_mapped_file(tmp_path):
    edges = _edges()
    sources = {et: EdgeSource(str(et), lambda s=s, d=d: iter([(s, d, None)]), len(s)) for et, (s, d) in edges.items()}
    with DatasetWriter(tmp_path / "out") as writer:
        topology = build_topology(writer, sources, dict(COUNTS), {t: t for t in COUNTS}, BuildOptions(quiet=True),
                                  with_ids=True)
        indptr = topology.csc.indptr
        assert isinstance(indptr, np.memmap) and str(indptr.filename) == str(writer.scratch("indptr.npy"))
        assert np.array_equal(indptr, _reference_indptr(edges))


def test_typed_dataset_pointers_and_sources_equal_numpy(tmp_path):
    edges = _edges(1)
    files = {}
    for k, (et, (s, d)) in enumerate(edges.items()):
        np.save(tmp_path / f"e{k}.npy", np.stack([s, d], 1))
        files[et] = tmp_path / f"e{k}.npy"
    ds = st.datasets.from_files(tmp_path / "ds", files, num_nodes=dict(COUNTS), quiet=True)
    assert np.array_equal(ds.graph.indptr.numpy(), _reference_indptr(edges))
    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    column = 0
    for et, (s, d) in edges.items():  # each column holds its in-edges' sources (sorted within a column)
        for v in range(COUNTS[et[2]]):
            got = np.sort(indices[indptr[column + v] : indptr[column + v + 1]])
            assert np.array_equal(got, np.sort(s[d == v]))
        column += COUNTS[et[2]]
