"""Importers from CSV / Parquet / NumPy and the OGB folder layout, against independent references."""

import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import torch

import sparsetrain as st


def reference_csc(src, dst, n, weights=None):
    """(indptr, indices, data) of the CSC matrix A[src, dst], duplicates kept, rows sorted within a column."""
    w = np.ones(len(src)) if weights is None else weights
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    order = np.lexsort((src, dst))
    return indptr, np.asarray(src)[order], np.asarray(w)[order]


@pytest.fixture
def graph():
    rng = np.random.default_rng(7)
    n, e = 300, 2500
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    feats = rng.standard_normal((n, 12)).astype(np.float32)
    labels = rng.integers(0, 5, n)
    return n, src, dst, feats, labels


def write_edges(tmp_path, kind, src, dst, weights=None):
    if kind == "csv":
        path = tmp_path / "edges.csv"
        cols = [src, dst] + ([weights] if weights is not None else [])
        header = "src,dst" + (",weight" if weights is not None else "")
        np.savetxt(
            path,
            np.stack(cols, 1),
            fmt=["%d", "%d"] + (["%.6f"] if weights is not None else []),
            delimiter=",",
            header=header,
            comments="",
        )
    elif kind == "csv.gz":
        path = tmp_path / "edges.csv.gz"
        with gzip.open(path, "wt") as f:
            f.writelines(f"{s},{d}\n" for s, d in zip(src, dst))
    elif kind == "parquet":
        path = tmp_path / "edges.parquet"
        table = {"src": src, "dst": dst} | ({"weight": weights.astype(np.float32)} if weights is not None else {})
        pq.write_table(pa.table(table), path, row_group_size=700)
    else:
        path = tmp_path / "edges.npy"
        np.save(path, np.stack([src, dst]))
    return path


@pytest.mark.parametrize("kind", ["csv", "csv.gz", "parquet", "npy"])
def test_edge_list_formats_give_the_reference_csc(tmp_path, graph, kind):
    n, src, dst, feats, labels = graph
    path = write_edges(tmp_path, kind, src, dst)
    ds = st.datasets.from_files(tmp_path / "out", path, num_nodes=n, quiet=True)
    indptr, indices, _ = reference_csc(src, dst, n)
    assert np.array_equal(ds.graph.indptr.numpy(), indptr)
    assert np.array_equal(ds.graph.indices.numpy(), indices)
    assert ds.meta["directed"] is True


def test_weights_follow_their_edges(tmp_path, graph):
    n, src, dst, *_ = graph
    w = np.random.default_rng(1).random(len(src)).astype(np.float32)
    path = write_edges(tmp_path, "parquet", src, dst, w)
    ds = st.datasets.from_files(tmp_path / "out", path, num_nodes=n, quiet=True)
    m = sp.csc_matrix((w.astype(np.float64), (src, dst)), shape=(n, n))  # duplicates summed
    got = sp.csc_matrix(
        (ds.graph.weights.numpy().astype(np.float64), ds.graph.indices.numpy(), ds.graph.indptr.numpy()), shape=(n, n)
    )
    assert abs(m - got).max() < 1e-5


def test_cleaning_options_match_pyg(tmp_path, graph):
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    n, src, dst, *_ = graph
    src = np.concatenate([src, np.arange(10)])  # add self loops and duplicates
    dst = np.concatenate([dst, np.arange(10)])
    src, dst = np.concatenate([src, src[:50]]), np.concatenate([dst, dst[:50]])
    path = write_edges(tmp_path, "npy", src, dst)
    ds = st.datasets.from_files(tmp_path / "out", path, num_nodes=n, undirected=True, drop_self_loops=True, quiet=True)
    ei = torch.from_numpy(np.stack([src, dst]))
    ei, _ = remove_self_loops(to_undirected(ei, num_nodes=n))
    ei = coalesce(ei[[1, 0]], num_nodes=n)  # sort by (dst, src): CSC order
    assert ds.num_edges == ei.shape[1]
    assert torch.equal(ds.graph.indices.long(), ei[1])
    assert ds.meta["directed"] is False

    ds2 = st.datasets.from_files(tmp_path / "dedup", path, num_nodes=n, drop_duplicates=True, quiet=True)
    ref = coalesce(torch.from_numpy(np.stack([dst, src])), num_nodes=n)
    assert torch.equal(ds2.graph.indices.long(), ref[1])


@pytest.mark.parametrize("kind", ["npy", "csv", "parquet"])
def test_node_tables(tmp_path, graph, kind):
    n, src, dst, feats, labels = graph
    edges = write_edges(tmp_path, "npy", src, dst)
    if kind == "npy":
        np.save(fp := tmp_path / "f.npy", feats)
        np.save(lp := tmp_path / "l.npy", labels)
    elif kind == "csv":
        np.savetxt(fp := tmp_path / "f.csv", feats, delimiter=",", fmt="%.9g")
        np.savetxt(lp := tmp_path / "l.csv", labels, fmt="%d")
    else:
        pq.write_table(pa.table({f"f{i}": feats[:, i] for i in range(feats.shape[1])}), fp := tmp_path / "f.parquet")
        pq.write_table(pa.table({"label": labels}), lp := tmp_path / "l.parquet")
    ds = st.datasets.from_files(tmp_path / "out", edges, features=fp, labels=lp, quiet=True)
    assert ds.num_nodes == n
    assert np.array_equal(ds.features.numpy(), feats)
    assert np.array_equal(ds.labels.numpy(), labels)
    assert ds.num_classes == labels.max() + 1
    sizes = {k: v.numel() for k, v in ds.split.items()}
    assert sizes == {"train": 180, "val": 60, "test": 60}
    all_idx = torch.cat(list(ds.split.values()))
    assert all_idx.unique().numel() == all_idx.numel()


def test_parquet_list_column_features_and_float16(tmp_path, graph):
    n, src, dst, feats, _ = graph
    edges = write_edges(tmp_path, "npy", src, dst)
    pq.write_table(pa.table({"x": list(feats)}), fp := tmp_path / "f.parquet")
    ds = st.datasets.from_files(tmp_path / "out", edges, features=fp, feature_dtype="float16", quiet=True)
    assert ds.features.dtype == torch.float16
    assert np.array_equal(ds.features.numpy(), feats.astype(np.float16))


def test_ogb_folder_layout(tmp_path, graph):
    n, src, dst, feats, labels = graph
    root = tmp_path / "ogbn_toy"
    (root / "raw").mkdir(parents=True)
    (root / "split" / "random").mkdir(parents=True)

    def gz(path, rows):
        with gzip.open(path, "wt") as f:
            f.writelines(",".join(map(str, r)) + "\n" for r in rows)

    gz(root / "raw" / "edge.csv.gz", zip(src, dst))
    gz(root / "raw" / "node-feat.csv.gz", [[repr(float(v)) for v in row] for row in feats])
    gz(root / "raw" / "node-label.csv.gz", [[v] for v in labels])
    gz(root / "raw" / "num-node-list.csv.gz", [[n]])
    perm = np.random.default_rng(0).permutation(n)
    for name, part in zip(["train", "valid", "test"], np.split(perm, [200, 250])):
        gz(root / "split" / "random" / f"{name}.csv.gz", [[v] for v in part])
    ds = st.datasets.from_ogb(root, tmp_path / "out", undirected=True, quiet=True)
    assert ds.num_nodes == n
    assert np.array_equal(ds.features.numpy(), feats)
    assert np.array_equal(ds.labels.numpy(), labels)
    assert np.array_equal(ds.split["train"].numpy(), np.sort(perm[:200]))
    assert np.array_equal(ds.split["test"].numpy(), np.sort(perm[250:]))
    ei = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], 1)
    keys = np.unique(ei[1] * n + ei[0])
    assert ds.num_edges == len(keys)
    assert np.array_equal(ds.graph.indices.numpy(), keys % n)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("layout", ["2E", "E2"])
def test_npy_edges_and_features_in_either_memory_order(tmp_path, graph, order, layout):
    n, src, dst, feats, _ = graph
    pairs = np.stack([src, dst]) if layout == "2E" else np.stack([src, dst], 1)
    np.save(edges := tmp_path / "e.npy", np.asarray(pairs, order=order))
    np.save(fp := tmp_path / "f.npy", np.asarray(feats, order=order))
    ds = st.datasets.from_files(tmp_path / "out", edges, features=fp, quiet=True)
    keys = np.sort(dst.astype(np.int64) * n + src)
    assert np.array_equal(ds.graph.indices.numpy(), keys % n)
    assert np.array_equal(ds.features.numpy(), feats)


def test_many_small_buckets_give_the_same_csc_as_pyg(tmp_path, graph, monkeypatch):
    """The bucketed build at a bucket size far below the edge count (as at papers100M scale)."""
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    import sparsetrain.datasets.csc as csc

    monkeypatch.setattr(csc, "BUCKET_EDGES", 97)
    n, src, dst, *_ = graph
    w = np.random.default_rng(3).random(len(src)).astype(np.float32)
    src, dst = np.concatenate([src, np.arange(10)]), np.concatenate([dst, np.arange(10)])  # self loops
    w = np.concatenate([w, np.ones(10, np.float32)])
    path = write_edges(tmp_path, "csv", src, dst, w)
    ds = st.datasets.from_files(tmp_path / "out", path, num_nodes=n, undirected=True, drop_self_loops=True, quiet=True)
    ei, ew = to_undirected(
        torch.from_numpy(np.stack([src, dst])),
        torch.from_numpy(np.loadtxt(path, delimiter=",", skiprows=1)[:, 2]).float(),
        num_nodes=n,
    )
    ei, ew = remove_self_loops(ei, ew)
    ei, ew = coalesce(ei[[1, 0]], ew, num_nodes=n)
    assert torch.equal(ds.graph.indices.long(), ei[1])
    assert torch.equal(
        ds.graph.indptr, torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(ei[0], minlength=n).cumsum(0)])
    )
    assert torch.allclose(ds.graph.weights, ew, atol=1e-6)
    assert ds.meta["directed"] is False
    directed = st.datasets.from_files(tmp_path / "directed", path, num_nodes=n, quiet=True)
    assert directed.meta["directed"] is True
