"""Issue 16: inputs and dataset folders that used to crash, wrap, or import silently wrong.

Every bad input ends in one line naming the file, the line/row or field, and the fix;
exit code 1; nothing written.
"""

import gzip
import json

import numpy as np
import pytest
import torch

import sparsetrain as st
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.build import BuildOptions
from sparsetrain.datasets.dataset import verify_checksums
from sparsetrain.errors import DatasetError


def _write(path, text):
    path.write_text(text)
    return path


def _fails_cleanly(cli, tmp_path, *argv, expected=()):
    out = tmp_path / "out"
    code, _, stderr = cli("preprocess", *argv, "--out", out, "--quiet")
    message = stderr.strip()
    assert code == 1, (code, message)
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message, message
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    return message


# ---------------------------------------------------------------- item 1: both ends of every edge are checked

def test_source_id_beyond_every_destination_sets_the_node_count(tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n0,1\n7,2\n")
    ds = st.datasets.from_files(tmp_path / "ds", edges, quiet=True)
    assert ds.num_nodes == 8
    # CSC of A[src, dst]: column 1 holds 0, column 2 holds 7
    assert ds.graph.indptr.tolist() == [0, 0, 1, 2, 2, 2, 2, 2, 2]
    assert ds.graph.indices.tolist() == [0, 7]


def test_source_id_beyond_the_given_node_count_is_refused(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n0,1\n9,2\n")
    _fails_cleanly(
        cli, tmp_path, "--edges", edges, "--num-nodes", "4", expected=["e.csv", "line 3", "src", "9", "--num-nodes"]
    )


def test_source_id_at_2_pow_32_never_wraps(cli, tmp_path):
    np.save(tmp_path / "e.npy", np.array([[2**32, 0, 1], [1, 2, 0]]))
    _fails_cleanly(
        cli, tmp_path, "--edges", tmp_path / "e.npy", expected=["e.npy", "row 0", "src", str(2**32), "--num-nodes"]
    )


def test_pyg_source_beyond_num_nodes_is_refused(tmp_path):
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[5, 0], [1, 2]]), num_nodes=3)
    with pytest.raises(DatasetError, match=r"data.edge_index: row 0, src: node id 5 is out of range \[0, 3\)"):
        st.datasets.from_pyg(data, tmp_path / "ds", quiet=True)
    assert not (tmp_path / "ds").exists()


# ---------------------------------------------------------------- item 3: ids far beyond the edge count

def test_id_far_beyond_the_edge_count_is_refused_without_allocating(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n0,1\n1,3000000000\n2,0\n")
    _fails_cleanly(cli, tmp_path, "--edges", edges, expected=["e.csv", "line 3", "dst", "3000000000", "--num-nodes"])


def test_id_far_beyond_the_edge_count_in_a_later_chunk(tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(50)) + "3000000000,4\n")
    reader = st.datasets.readers.EdgeListReader(edges, chunk_rows=8)
    from sparsetrain.datasets.build import EdgeSource, GraphInput, build_dataset

    source = EdgeSource(str(edges), reader, reader.num_rows(), reader.where, weighted=reader.weighted)
    with pytest.raises(DatasetError, match="line 52, src: node id 3000000000"):
        build_dataset(tmp_path / "ds", GraphInput.one_type(source), BuildOptions(quiet=True))


def test_huge_given_num_nodes_is_a_clear_error(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n0,1\n")
    _fails_cleanly(cli, tmp_path, "--edges", edges, "--num-nodes", str(10**15), expected=["--num-nodes", str(10**15)])


def test_many_isolated_nodes_are_allowed_when_num_nodes_says_so(tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n0,1\n1,200000\n")
    ds = st.datasets.from_files(tmp_path / "ds", edges, num_nodes=200001, quiet=True)
    assert ds.num_nodes == 200001 and ds.graph.indices.tolist() == [0, 1]


# ---------------------------------------------------------------- item 2: load(verify=True) and info check structure

@pytest.fixture
def dataset(tmp_path):
    return st.datasets.synthesize(tmp_path / "ds", 300, 3000, feature_dim=4, num_classes=5, quiet=True).path


def _rewrite(folder, name, array):
    """Replace an array and fix its checksum, as a lie that checksums cannot catch."""
    np.save(folder / name, array)
    meta = json.loads((folder / fmt.META_FILE).read_text())
    meta["files"][name].update(dtype=str(array.dtype), shape=list(array.shape), sha256=fmt.sha256_file(folder / name))
    (folder / fmt.META_FILE).write_text(json.dumps(meta))


def _corrupt(folder, case):
    ds = st.datasets.load(folder)
    if case == "indptr not monotone":
        indptr = ds.graph.indptr.numpy().copy()
        indptr[100], indptr[101] = indptr[101] + 5, indptr[100]
        _rewrite(folder, fmt.INDPTR, indptr)
        return [fmt.INDPTR, "entry 101"]
    if case == "index beyond the nodes":
        indices = ds.graph.indices.numpy().copy()
        indices[1234] = 10**6
        _rewrite(folder, fmt.INDICES, indices)
        return [fmt.INDICES, "entry 1234", "1000000", "[0, 300)"]
    if case == "negative index":
        indices = ds.graph.indices.numpy().copy()
        indices[7] = -3
        _rewrite(folder, fmt.INDICES, indices)
        return [fmt.INDICES, "entry 7", "-3"]
    if case == "label beyond the classes":
        labels = ds.labels.numpy().copy()
        labels[42] = 5
        _rewrite(folder, fmt.LABELS, labels)
        return [fmt.LABELS, "entry 42", "[-1, 5)"]
    if case == "split id out of range":
        train = ds.split["train"].numpy().copy()
        train[-1] = 300
        _rewrite(folder, "train_idx.npy", train)
        return ["train_idx.npy", f"entry {len(train) - 1}", "300"]
    raise AssertionError(case)


STRUCTURE = [
    "indptr not monotone", "index beyond the nodes", "negative index", "label beyond the classes",
    "split id out of range",
]


@pytest.mark.parametrize("case", STRUCTURE)
def test_verify_catches_structure_that_checksums_cannot(dataset, case):
    expected = _corrupt(dataset, case)
    assert all(verify_checksums(dataset).values())
    with pytest.raises(DatasetError) as info:
        st.datasets.load(dataset, verify=True)
    for fragment in expected:
        assert fragment in str(info.value), (fragment, str(info.value))


@pytest.mark.parametrize("case", STRUCTURE)
def test_info_reports_bad_structure_as_one_line(dataset, cli, case):
    expected = _corrupt(dataset, case)
    code, stdout, stderr = cli("info", dataset)
    message = stderr.strip()
    assert code == 1 and "OK" not in stdout
    assert message.startswith("error: ") and "\n" not in message
    for fragment in expected:
        assert fragment in message, (fragment, message)


def test_verify_structure_streams_in_chunks(dataset):
    from sparsetrain.datasets.dataset import verify_structure

    _corrupt(dataset, "index beyond the nodes")
    with pytest.raises(DatasetError, match="entry 1234"):
        verify_structure(st.datasets.load(dataset), chunk=64)
    assert (
        verify_structure(
            st.datasets.synthesize(dataset.parent / "ok", 300, 3000, feature_dim=4, num_classes=5, quiet=True), chunk=64
        )
        is None
    )


# ---------------------------------------------------------------- item 5: meta.json is confined and complete

def _edit_meta(folder, change):
    meta = json.loads((folder / fmt.META_FILE).read_text())
    change(meta)
    (folder / fmt.META_FILE).write_text(json.dumps(meta))


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "sub/x.npy", "..", ".hidden.npy", "a\\b.npy"])
def test_meta_file_names_stay_inside_the_folder(dataset, cli, name):
    _edit_meta(dataset, lambda m: m["files"].update({name: dict(m["files"][fmt.LABELS])}))
    with pytest.raises(DatasetError, match="meta.json: 'files' entry"):
        st.datasets.load(dataset)
    code, stdout, stderr = cli("info", dataset)
    assert code == 1 and stdout == "" and "meta.json" in stderr and "passwd" not in stdout


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda m: m["files"][fmt.INDICES].pop("sha256"), "sha256"),
        (lambda m: m["files"][fmt.LABELS].pop("dtype"), "dtype"),
        (lambda m: m["files"][fmt.INDPTR].pop("shape"), "shape"),
        (lambda m: m["files"].update({fmt.LABELS: "labels"}), "labels.npy"),
        (lambda m: m.update(files=[]), "files"),
        (lambda m: m["files"].pop(fmt.INDPTR), "indptr.npy"),
        (lambda m: m["node_types"].update({"_N": "300"}), "node_types"),
        (lambda m: m["labels"]["_N"].update(num_classes=-2), "num_classes"),
        (lambda m: m["labels"]["_N"].pop("num_classes"), "num_classes"),
        (lambda m: m.update(permutation={"method": "rcm"}), "permutation"),
    ],
)
def test_meta_entries_missing_a_field_are_clear_errors(dataset, cli, change, field):
    _edit_meta(dataset, change)
    with pytest.raises(DatasetError, match=field):
        st.datasets.load(dataset, verify=True)
    code, _, stderr = cli("info", dataset)
    assert code == 1 and field in stderr and "Traceback" not in stderr and "\n" not in stderr.strip()


# ---------------------------------------------------------------- inputs accepted that should not be

def test_weight_column_with_a_typo_is_refused(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst,wieght\n0,1,0.5\n1,2,0.7\n")
    _fails_cleanly(cli, tmp_path, "--edges", edges, expected=["e.csv", "'wieght'", "weight"])


def test_headerless_three_column_csv_is_refused(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "0,1,0.5\n1,2,0.7\n")
    _fails_cleanly(cli, tmp_path, "--edges", edges, expected=["e.csv", "line 1", "3 columns", "src,dst,weight"])


@pytest.mark.parametrize("value, line", [("-0.5", 3), ("inf", 4), ("nan", 4), ("1e39", 4)])
def test_negative_or_non_finite_weights_are_refused(cli, tmp_path, value, line):
    rows = ["0,1,1.0", "1,2,0.5", "2,0,2.0"]
    rows[line - 2] = rows[line - 2].rsplit(",", 1)[0] + f",{value}"
    edges = _write(tmp_path / "e.csv", "src,dst,weight\n" + "\n".join(rows) + "\n")
    _fails_cleanly(cli, tmp_path, "--edges", edges, expected=["e.csv", f"line {line}", "weight"])


def test_pyg_negative_weight_is_refused(tmp_path):
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), edge_weight=torch.tensor([1.0, -2.0]), num_nodes=3)
    with pytest.raises(DatasetError, match="data.edge_weight: row 1"):
        st.datasets.from_pyg(data, tmp_path / "ds", quiet=True)


def test_one_huge_label_does_not_set_a_billion_classes(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n0,1\n1,2\n2,3\n")
    np.save(tmp_path / "l.npy", np.array([0, 1, 10**9, 1]))
    _fails_cleanly(
        cli, tmp_path, "--edges", edges, "--labels",
        tmp_path / "l.npy",
        expected=["l.npy", "row 2", str(10**9), "--num-classes"],
    )
    ds = st.datasets.from_files(tmp_path / "ok", edges, labels=tmp_path / "l.npy", num_classes=10**9 + 1, quiet=True)
    assert ds.num_classes == 10**9 + 1


def test_class_count_stays_near_the_labels_in_use(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n" + "".join(f"{i},{(i + 1) % 100}\n" for i in range(100)))
    labels = np.arange(100) % 7 + 1  # 1-based labels: 8 classes, class 0 unused
    np.save(tmp_path / "l.npy", labels)
    assert st.datasets.from_files(tmp_path / "ok", edges, labels=tmp_path / "l.npy", quiet=True).num_classes == 8
    labels[60] = 150  # below 2 * num_nodes, but far beyond the 8 labels in use
    np.save(tmp_path / "l.npy", labels)
    _fails_cleanly(
        cli, tmp_path, "--edges", edges, "--labels",
        tmp_path / "l.npy",
        expected=["l.npy", "row 60", "150", "--num-classes 151"],
    )


def test_two_by_two_npy_edge_index_is_ambiguous(cli, tmp_path):
    np.save(tmp_path / "e.npy", np.array([[0, 1], [2, 3]]))
    _fails_cleanly(cli, tmp_path, "--edges", tmp_path / "e.npy", expected=["e.npy", "[2, 2]", "ambiguous"])


def test_not_gzip_csv_gz_is_a_clear_error(cli, tmp_path):
    edges = _write(tmp_path / "e.csv.gz", "src,dst\n0,1\n")
    _fails_cleanly(cli, tmp_path, "--edges", edges, expected=["e.csv.gz", "gzip"])


def test_truncated_csv_gz_is_a_clear_error(cli, tmp_path):
    data = gzip.compress(b"src,dst\n" + b"".join(b"%d,%d\n" % (i, i + 1) for i in range(20000)))
    (tmp_path / "e.csv.gz").write_bytes(data[: len(data) // 2])
    _fails_cleanly(cli, tmp_path, "--edges", tmp_path / "e.csv.gz", expected=["e.csv.gz", "truncated"])


def test_non_utf8_header_is_a_clear_error(cli, tmp_path):
    (tmp_path / "e.csv").write_bytes("sr\xe9,dst\n0,1\n".encode("latin-1"))
    _fails_cleanly(cli, tmp_path, "--edges", tmp_path / "e.csv", expected=["e.csv", "line 1", "UTF-8"])


@pytest.mark.parametrize(
    "text, role, expected",
    [
        ("src,dst\n0,1\n1,2\n2,\n", "edges", ["line 4", "'dst'"]),
        ("src,dst,weight\n0,1,1\n1,2,\n", "edges", ["line 3", "'weight'"]),
        ("label\n0\n1\n\n2\n1.5\n", "labels", ["line 6", "1.5"]),
        ("label\n0\n1\n2\n3,4\n", "labels", ["line 5", "'3,4'"]),
        ("src,dst\n0,1\n\n1,2,3\n", "edges", ["line 4", "3 fields"]),
    ],
)
def test_csv_errors_name_the_file_line(cli, tmp_path, text, role, expected):
    path = _write(tmp_path / "t.csv", text)
    if role == "edges":
        argv = ["--edges", path]
    else:
        argv = ["--edges", _write(tmp_path / "e.csv", "src,dst\n0,1\n1,2\n2,3\n"), "--labels", path]
    message = _fails_cleanly(cli, tmp_path, *argv, expected=["t.csv", *expected])
    assert "row " not in message


def test_feature_row_mismatch_blames_the_features(cli, tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n0,1\n1,2\n2,3\n")
    np.save(tmp_path / "f.npy", np.ones((5, 2), np.float32))
    np.save(tmp_path / "l.npy", np.array([0, 1, 1, 0]))
    message = _fails_cleanly(
        cli, tmp_path, "--edges", edges, "--features", tmp_path / "f.npy", "--labels", tmp_path / "l.npy"
    )
    assert (
        message.startswith(f"error: {tmp_path / 'f.npy'}")
        and "5 rows" in message
        and "l.npy" in message
        and "4 rows" in message
    )
    _write(tmp_path / "f.csv", "1,2\n" * 5)
    message = _fails_cleanly(
        cli, tmp_path, "--edges", edges, "--features", tmp_path / "f.csv", "--labels", tmp_path / "l.npy"
    )
    assert message.startswith(f"error: {tmp_path / 'f.csv'}") and "l.npy" in message


def test_cli_errors_exit_with_1(cli, tmp_path):
    code, _, stderr = cli("preprocess", "--edges", tmp_path / "nope.csv", "--out", tmp_path / "out")
    assert code == 1 and "nope.csv" in stderr


def test_unsigned_ids_beyond_int64_never_wrap(cli, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"src": pa.array([0, 2**64 - 1], pa.uint64()), "dst": pa.array([1, 2], pa.uint64())}),
        tmp_path / "e.parquet",
    )
    _fails_cleanly(
        cli, tmp_path, "--edges", tmp_path / "e.parquet", expected=["e.parquet", "row 1", "src", str(2**64 - 1)]
    )
    np.save(tmp_path / "e.npy", np.array([[0, 1, 2], [1, 2**64 - 1, 0]], dtype=np.uint64))
    _fails_cleanly(cli, tmp_path, "--edges", tmp_path / "e.npy", expected=["e.npy", "row 1", "dst", str(2**64 - 1)])


def test_unused_parquet_column_is_refused(cli, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"src": [0, 1], "dst": [1, 2], "wieght": [0.5, 1.0]}), tmp_path / "e.parquet")
    _fails_cleanly(cli, tmp_path, "--edges", tmp_path / "e.parquet", expected=["e.parquet", "'wieght'"])


def test_header_case_and_spacing_do_not_hide_the_weight(tmp_path):
    edges = _write(tmp_path / "e.csv", "Src, Dst, Weight\n0,1,0.5\n1,2,2.0\n")
    ds = st.datasets.from_files(tmp_path / "ds", edges, quiet=True)
    assert ds.graph.weights.tolist() == [0.5, 2.0] and ds.graph.indices.tolist() == [0, 1]


def test_feature_array_lying_about_its_dtype_is_refused_on_load(dataset):
    _rewrite(dataset, fmt.FEATURES, np.ones((300, 4), np.float64))
    with pytest.raises(DatasetError, match="features.npy: holds float64"):
        st.datasets.load(dataset)


def test_clusters_count_must_be_a_positive_integer(tmp_path):
    edges = _write(tmp_path / "e.csv", "src,dst\n" + "".join(f"{i},{(i + 1) % 50}\n" for i in range(50)))
    ds = st.datasets.from_files(tmp_path / "ds", edges, reorder="cluster", undirected=True, quiet=True)
    assert st.datasets.load(ds.path, verify=True).meta["clusters"]["count"] >= 1
    _edit_meta(ds.path, lambda m: m["clusters"].update(count="3"))
    with pytest.raises(DatasetError, match="'count'"):
        st.datasets.load(ds.path)


def test_ogb_node_count_must_be_a_whole_number(tmp_path):
    raw = tmp_path / "ogb" / "raw"
    raw.mkdir(parents=True)
    _write(raw / "edge.csv", "0,1\n1,2\n")
    _write(raw / "num-node-list.csv", "2.5\n")
    with pytest.raises(DatasetError, match="num-node-list.csv: line 1.*'2.5' is not an integer"):
        st.datasets.from_ogb(tmp_path / "ogb", tmp_path / "out", quiet=True)


def test_system_errors_are_one_line(cli, tmp_path, monkeypatch):
    import errno

    import sparsetrain.datasets.files as files

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out"))

    monkeypatch.setattr(files, "from_files", full)
    message = _fails_cleanly(
        cli, tmp_path, "--edges", _write(tmp_path / "e.csv", "0,1\n"), expected=["No space left", "disk space"]
    )
    assert str(tmp_path / "out") in message


def test_wide_utf8_header_longer_than_one_read(tmp_path):
    # a first line past 64 KiB, multi-byte characters across the boundary
    names = ",".join(f"é{i}" for i in range(12000))
    path = _write(tmp_path / "f.csv", names + "\n" + "\n".join(",".join(["1"] * 12000) for _ in range(3)) + "\n")
    from sparsetrain.datasets.readers import NodeTableReader

    chunk = np.concatenate(list(NodeTableReader(path, "features")()))
    assert chunk.shape == (3, 12000) and (chunk == 1).all()


def test_feature_check_maps_read_only(tmp_path, monkeypatch):
    """A copy-on-write map is charged to the commit limit; the load-time feature check must not need one."""
    from sparsetrain.datasets import format as fmt_module

    ds = st.datasets.synthesize(tmp_path / "g", 200, 2000, feature_dim=4, num_classes=3, quiet=True)
    modes = []
    real_load = np.load

    def spy(path, *args, **kwargs):
        if str(path).endswith(fmt_module.FEATURES):
            modes.append(kwargs.get("mmap_mode"))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(fmt_module.np, "load", spy)
    st.datasets.load(ds.path)
    assert modes and all(mode == "r" for mode in modes)
