"""Every importer's input handling, as classes of cases: each bad input is one line, exit 1, nothing written;
each harmless variation (BOM, CRLF, quotes, header case) gives the same graph as the plain file.

Routes: --edges (CSV, CSV.gz, Parquet, NumPy), the per-type files of --typed-edges / --node-features /
--node-labels / split files, OGB CSV folders (homogeneous and typed), OGB split_dict.pt files.
"""

import contextlib
import gzip
import io
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import sparsetrain as st
from sparsetrain.errors import DatasetError, InputNote
from tests.conftest import run_module
from tests.test_hetero_dataset import csc_pairs, edge_multiset

# ---------------------------------------------------------------- helpers

EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]
N = 4


def _csv(path, text, gz=False):
    data = text.encode("utf-8") if isinstance(text, str) else text
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def _parquet(path, columns: dict):
    pq.write_table(pa.Table.from_arrays([pa.array(v) for v in columns.values()], names=list(columns)), path)
    return path


def _refused(cli, argv, out, words):
    """One ``error:`` line naming ``words``, exit 1, no traceback, and ``out`` not created."""
    code, stdout, stderr = cli("preprocess", *argv, "--out", out, "--quiet")
    message = stderr.strip()
    assert code == 1, (code, stderr)
    assert "Traceback" not in stderr and message.startswith("error: ") and "\n" not in message, stderr
    for word in words:
        assert word in message, (word, message)
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]  # no temp folder left
    return message


def _graph_edges(path):
    ds = st.datasets.load(path, verify=True)
    if hasattr(ds.graph, "edges"):  # typed: the one edge type
        (csc,) = ds.graph.edges.values()
        return edge_multiset(*csc_pairs(csc))
    dst = np.repeat(np.arange(ds.num_nodes), np.diff(ds.graph.indptr.numpy()))
    return edge_multiset(ds.graph.indices.numpy(), dst)


def _edge_route(route, path):
    return ["--edges", path] if route == "edges" else ["--typed-edges", f"paper,cites,paper={path}"]


# ---------------------------------------------------------------- edge list headers and values

def _edge_file(tmp_path, kind, spec):
    """``spec``: CSV text (kind csv/csv.gz), a dict of columns (parquet), or an array (npy)."""
    if kind == "parquet":
        return _parquet(tmp_path / "e.parquet", spec)
    if kind == "npy":
        np.save(tmp_path / "e.npy", spec)
        return tmp_path / "e.npy"
    return _csv(tmp_path / "e.csv", spec, gz=kind == "csv.gz")


BAD_EDGES = {  # name: (kind, spec, words); every case runs as --edges and as a --typed-edges file
    "one known column, one weight (src,weight)": ("csv", "src,weight\n0,1\n1,2\n", ["'src'", "no destination column"]),
    "one known column, one weight (weight,dst)": ("csv", "weight,dst\n0,1\n1,2\n", ["'dst'", "no source column"]),
    "one known, one unknown (dst,sorce)": (
        "csv",
        "dst,sorce\n0,1\n1,2\n",
        ["'sorce' is not a known name", "no source column"],
    ),
    "one known, one unknown, gzipped": (
        "csv.gz",
        "to,sorce\n0,1\n1,2\n",
        ["'sorce' is not a known name", "no source column"],
    ),
    "one known, one unknown, Parquet": ("parquet", {"dst": [0, 1], "sorce": [1, 2]}, ["'sorce'", "no source column"]),
    "src and weight, Parquet": ("parquet", {"src": [0, 1], "weight": [1.0, 2.0]}, ["'src'", "no destination column"]),
    "a column named twice": ("csv", "src,dst,src\n0,1,2\n", ["'src' twice"]),
    "a column named twice in another case": ("csv", "SRC,Dst,src\n0,1,2\n", ["twice"]),
    "a column named twice, Parquet": ("parquet", {"Src": [0], "src": [1]}, ["twice"]),
    "two names for the source": ("csv", "src,source,dst\n0,1,2\n", ["'src' and 'source'", "keep one"]),
    "a column without a name": ("csv", "src,,dst\n0,1,2\n", ["column 2 has no name"]),
    "a trailing delimiter in the header": ("csv", "src,dst,\n0,1,\n", ["column 3 has no name"]),
    "an extra column": ("csv", "src,dst,extra\n0,1,5\n", ["'extra' is not used"]),
    "three unknown names": ("csv", "a,b,c\n0,1,2\n", ["no source or destination column", "3 columns"]),
    "one column": ("csv", "src\n0\n1\n", ["no destination column"]),
    "three columns and no header": ("csv", "0,1,2\n1,2,3\n", ["3 columns and no header"]),
    "an empty file": ("csv", "", ["empty"]),
    "an empty gzipped file": ("csv.gz", "", ["first line is empty"]),
    "a header and no rows": ("csv", "src,dst\n", ["no edges"]),
    "a blank first line": ("csv", "\n0,1\n", ["first line is empty"]),
    "a fractional id": ("csv", "src,dst\n0,1.5\n", ["line 2", "'1.5' is not an integer"]),
    "a whole id written as a float": ("csv", "src,dst\n0,1\n1.0,2\n", ["line 3", "'1.0' is not an integer"]),
    "a text id": ("csv", "src,dst\n0,1\n1,abc\n", ["line 3", "'abc'"]),
    "a missing id": ("csv", "src,dst\n0,1\n1,\n", ["line 3", "empty value"]),
    "a missing id without a header": ("csv", "0,1\n,2\n", ["line 2", "column 1", "empty value"]),
    "float ids, Parquet": ("parquet", {"src": [0.0, 1.0], "dst": [1.0, 2.0]}, ["type double", "int64"]),
    "text ids, Parquet": ("parquet", {"src": ["0", "1"], "dst": ["1", "2"]}, ["'src'", "int64"]),
    "a float edge_index": ("npy", np.array([[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]), ["dtype float64", "astype(np.int64)"]),
    "a bool edge_index": ("npy", np.ones((2, 3), bool), ["dtype bool", "int64"]),
    "an edge_index of shape [3, E]": ("npy", np.zeros((3, 3), np.int64), ["shape [3, 3]", "[2, E]"]),
    "a negative id": ("csv", "0,1\n2,-1\n", ["line 2", "-1"]),
}
BAD_WEIGHTS = {  # homogeneous only: a typed dataset refuses any weight column (below)
    "a NaN weight": ("csv", "src,dst,weight\n0,1,1\n1,2,nan\n", ["line 3", "nan is not a finite number"]),
    "an inf weight": ("csv", "src,dst,weight\n0,1,inf\n", ["line 2", "inf is not a finite number"]),
    "a NaN weight, Parquet": (
        "parquet",
        {"src": [0, 1], "dst": [1, 2], "weight": [1.0, float("nan")]},
        ["row 1", "nan"],
    ),
    "a text weight": ("csv", "src,dst,weight\n0,1,heavy\n", ["line 2", "'heavy'"]),
}


@pytest.mark.parametrize("route", ["edges", "typed"])
@pytest.mark.parametrize("case", list(BAD_EDGES))
def test_bad_edge_lists_are_one_line(cli, tmp_path, route, case):
    kind, spec, words = BAD_EDGES[case]
    path = _edge_file(tmp_path, kind, spec)
    _refused(cli, _edge_route(route, path), tmp_path / "out", [path.name, *words])


@pytest.mark.parametrize("case", list(BAD_WEIGHTS))
def test_bad_weights_are_one_line(cli, tmp_path, case):
    kind, spec, words = BAD_WEIGHTS[case]
    path = _edge_file(tmp_path, kind, spec)
    _refused(cli, ["--edges", path], tmp_path / "out", [path.name, *words])


def test_a_typed_edge_list_with_weights_is_refused_not_dropped(cli, tmp_path):
    path = _csv(tmp_path / "e.csv", "src,dst,weight\n0,1,0.5\n")
    _refused(cli, _edge_route("typed", path), tmp_path / "out", ["e.csv", "edge weight column", "drop the column"])


PLAIN = "src,dst\n" + "".join(f"{s},{d}\n" for s, d in EDGES)
SAME_EDGES = {  # name: (kind, file content): each must give exactly EDGES
    "UTF-8 BOM": ("csv", "\ufeff" + PLAIN),
    "CRLF line ends": ("csv", PLAIN.replace("\n", "\r\n")),
    "BOM and CRLF, no header": ("csv", "\ufeff" + "".join(f"{s},{d}\r\n" for s, d in EDGES)),
    "BOM and CRLF, gzipped": ("csv.gz", "\ufeff" + PLAIN.replace("\n", "\r\n")),
    "quoted integers": ("csv", '"src","dst"\n' + "".join(f'"{s}","{d}"\n' for s, d in EDGES)),
    "spaces after the commas": ("csv", "src, dst\n" + "".join(f"{s}, {d}\n" for s, d in EDGES)),
    "header in capitals": ("csv", PLAIN.replace("src,dst", "SRC,DST")),
    "columns swapped by name": ("csv", "dst,src\n" + "".join(f"{d},{s}\n" for s, d in EDGES)),
    "aliases source,target": ("csv", PLAIN.replace("src,dst", "source,target")),
    "tab-separated": ("csv", PLAIN.replace(",", "\t")),
    "a trailing blank line": ("csv", PLAIN + "\n"),
}


@pytest.mark.parametrize("route", ["edges", "typed"])
@pytest.mark.parametrize("case", list(SAME_EDGES))
def test_harmless_variations_give_the_same_edges(cli, tmp_path, route, case):
    kind, text = SAME_EDGES[case]
    path = _edge_file(tmp_path, kind, text)
    code, _, stderr = cli("preprocess", *_edge_route(route, path), "--out", tmp_path / "out", "--quiet")
    assert code == 0, stderr
    assert stderr == ""
    assert _graph_edges(tmp_path / "out") == sorted(EDGES)


@pytest.mark.parametrize("route", ["edges", "typed"])
def test_two_unknown_column_names_are_read_by_position_and_said(cli, tmp_path, route):
    path = _csv(tmp_path / "e.csv", "a,b\n" + "".join(f"{s},{d}\n" for s, d in EDGES))
    with pytest.warns(InputNote, match="reading 'a' as the source and 'b' as the destination"):
        code, _, stderr = cli("preprocess", *_edge_route(route, path), "--out", tmp_path / "out", "--quiet")
    assert code == 0, stderr
    assert _graph_edges(tmp_path / "out") == sorted(EDGES)


def test_the_positional_reading_is_one_warning_line_from_the_shell(tmp_path):
    path = _csv(tmp_path / "e.csv", "a,b\n0,1\n")
    result = run_module("preprocess", "--edges", path, "--out", tmp_path / "out", "--quiet")
    assert result.returncode == 0
    assert result.stderr.startswith("warning: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "'a' as the source" in result.stderr


# ---------------------------------------------------------------- node tables: features, labels, split files

BAD_TABLES = {  # name: (role, kind, spec, words)
    "labels with an id column": (
        "labels",
        "csv",
        "id,label\n3,0\n2,1\n1,1\n0,2\n",
        ["2 columns (id, label)", "one column"],
    ),
    "labels with an extra column": (
        "labels",
        "parquet",
        {"label": [0, 1, 1, 2], "x": [9, 9, 9, 9]},
        ["2 columns", "one column"],
    ),
    "labels without a header, two columns": ("labels", "csv", "0,1\n1,1\n1,0\n2,0\n", ["2 columns", "one column"]),
    "a fractional label": ("labels", "csv", "0\n1\n1.5\n2\n", ["line 3", "1.5"]),
    "features with an id column": ("features", "csv", "id,f0\n0,1\n1,1\n2,1\n3,1\n", ["'id'", "node ids or labels"]),
    "features with a label column": ("features", "parquet", {"f0": [1.0] * 4, "label": [0, 1, 0, 1]}, ["'label'"]),
    "features with a column named twice": ("features", "csv", "f,f\n1,2\n1,2\n1,2\n1,2\n", ["'f' twice"]),
    "a NaN feature": ("features", "csv", "1,2\n1,nan\n1,2\n1,2\n", ["line 2", "nan"]),
    "an empty label file": ("labels", "csv", "", ["empty"]),
    "split ids as floats, .npy": ("index", "npy", np.array([0.0, 1.0]), ["dtype float64", "int64"]),
    "split ids as floats, Parquet": ("index", "parquet", {"id": [0.0, 1.0]}, ["type double", "int64"]),
    "a whole split id written as a float": ("index", "csv", "0\n1.0\n", ["line 2", "'1.0' is not an integer"]),
    "a split file with two columns": ("index", "csv", "node,x\n0,1\n", ["2 columns", "one column"]),
}


def _table_argv(route, role, path, tmp_path):
    """Arguments giving ``path`` as a table of ``role`` next to a valid rest (4 nodes, labels, a full split)."""
    np.save(labels := tmp_path / "labels.npy", np.array([0, 1, 1, 2]))
    for name, ids in (("train", [0]), ("val", [1]), ("test", [2])):
        np.save(tmp_path / f"{name}.npy", np.array(ids))
    edges = _csv(tmp_path / "edges.csv", PLAIN)
    splits = {n: tmp_path / f"{n}.npy" for n in ("train", "val", "test")}
    if role == "index":
        splits["val"] = path
    if role == "labels":
        labels = path
    argv = [f"--{n}-idx={p}" for n, p in splits.items()] if role in ("index", "labels") else []
    if route == "edges":
        table = ["--features", path] if role == "features" else ["--labels", labels]
        return ["--edges", edges, *table, *argv]
    table = ["--node-features", f"paper={path}"] if role == "features" else ["--node-labels", f"paper={labels}"]
    return ["--typed-edges", f"paper,cites,paper={edges}", *table, *argv]


@pytest.mark.parametrize("route", ["edges", "typed"])
@pytest.mark.parametrize("case", list(BAD_TABLES))
def test_bad_node_tables_are_one_line(cli, tmp_path, route, case):
    role, kind, spec, words = BAD_TABLES[case]
    if kind == "parquet":
        path = _parquet(tmp_path / "t.parquet", spec)
    elif kind == "npy":
        np.save(path := tmp_path / "t.npy", spec)
    else:
        path = _csv(tmp_path / "t.csv", spec)
    _refused(cli, _table_argv(route, role, path, tmp_path), tmp_path / "out", [path.name, *words])


@pytest.mark.parametrize("route", ["edges", "typed"])
def test_node_tables_with_bom_crlf_and_quotes_are_read(cli, tmp_path, route):
    feats = _csv(tmp_path / "f.csv", '\ufeff"f0","f1"\r\n' + "".join(f'"{i}.5",{i}\r\n' for i in range(N)))
    argv = _table_argv(route, "features", feats, tmp_path)
    labels = _csv(tmp_path / "l.csv", "\ufefflabel\r\n0\r\n1\r\n1\r\n2\r\n")
    argv += ["--labels", labels] if route == "edges" else ["--node-labels", f"paper={labels}"]
    for i, name in enumerate(("train", "val", "test")):
        part = _csv(tmp_path / f"{name}.csv", str(i) + "\r\n")
        argv.append(f"--{name}-idx={part}")
    code, _, stderr = cli("preprocess", *argv, "--out", tmp_path / "out", "--quiet")
    assert code == 0, stderr
    ds = st.datasets.load(tmp_path / "out", verify=True)
    features = ds.features if route == "edges" else ds.features["paper"]
    labels = ds.labels if route == "edges" else ds.labels["paper"]
    assert np.array_equal(features.numpy(), np.array([[i + 0.5, i] for i in range(N)], np.float32))
    assert labels.tolist() == [0, 1, 1, 2]
    assert {k: v.tolist() for k, v in ds.split.items()} == {"train": [0], "val": [1], "test": [2]}


# ---------------------------------------------------------------- flags: repeated, not applicable, honoured

@pytest.fixture
def inputs(tmp_path):
    """Valid inputs for every route: a 4-node edge list, features, labels (0..3), a split, an OGB CSV folder of each
    kind."""
    d = tmp_path / "in"
    d.mkdir()
    f = {"edges": _csv(d / "edges.csv", PLAIN), "edges2": _csv(d / "edges2.csv", "src,dst\n0,1\n")}
    np.save(f.setdefault("x", d / "x.npy"), np.ones((N, 3), np.float32))
    np.save(f.setdefault("x2", d / "x2.npy"), np.zeros((N, 2), np.float32))
    np.save(f.setdefault("y", d / "y.npy"), np.array([0, 1, 2, 3]))
    for name, ids in (("train", [0]), ("val", [1]), ("test", [2])):
        np.save(f.setdefault(name, d / f"{name}.npy"), np.array(ids))
    f["ogb"] = _ogb_csv_folder(d / "ogb", np.array(EDGES).T, np.array([0, 1, 2, 3]))
    f["mag"] = _ogb_typed_folder(d / "mag")
    return {k: str(v) for k, v in f.items()}


def _gz(path, rows, header=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", newline="") as out:
        if header is not None:
            out.write(",".join(header) + "\n")
        out.writelines(",".join(map(str, r)) + "\n" for r in rows)


def _ogb_csv_folder(root, edge_index, labels, split_dict=True):
    """An OGB node-property folder with CSV ``raw/`` and a split written by ogb's own ``DatasetSaver``."""
    raw = root / "raw"
    n = len(labels)
    _gz(raw / "edge.csv.gz", edge_index.T.tolist())
    _gz(raw / "num-node-list.csv.gz", [[n]])
    _gz(raw / "node-feat.csv.gz", [[float(i), 1.0] for i in range(n)])
    _gz(raw / "node-label.csv.gz", [[v] for v in labels])
    perm = np.arange(n)
    split = {"train": perm[: n // 2], "valid": perm[n // 2 : 3 * n // 4], "test": perm[3 * n // 4 :]}
    if split_dict:
        _save_split_with_ogb(root, split, "random")
    return root


def _save_split_with_ogb(root, split, name):
    """``split/<name>/split_dict.pt`` exactly as ogb's ``DatasetSaver.save_split`` writes it (a dict of NumPy
    arrays)."""
    ogb_io = pytest.importorskip("ogb.io")
    scratch = root.parent / f"saver-{root.name}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        saver = ogb_io.DatasetSaver("ogbn-toy", is_hetero=False, version=1, root=str(scratch))
        saver.save_split(split, name)
    written = scratch.parent / f"{scratch.name}_ogbn_toy" / "toy" / "split" / name / "split_dict.pt"
    (root / "split" / name).mkdir(parents=True, exist_ok=True)
    shutil.copy(written, root / "split" / name / "split_dict.pt")
    shutil.rmtree(written.parents[3])


def _ogb_typed_folder(root, labelled=("paper",), split_parts=("train", "valid", "test")):
    """An ogbn-mag-shaped CSV folder: papers (4, labels 0..3) cite papers, authors (3) write papers."""
    raw = root / "raw"
    _gz(raw / "num-node-dict.csv.gz", [[3, 4]], header=["author", "paper"])
    _gz(raw / "relations" / "paper___cites___paper" / "edge.csv.gz", EDGES)
    _gz(raw / "relations" / "author___writes___paper" / "edge.csv.gz", [(0, 0), (1, 1), (2, 3)])
    _gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", [[1.0, 2.0]] * 4)
    for t in labelled:
        _gz(raw / "node-label" / t / "node-label.csv.gz", [[v] for v in ([0, 1, 2, 3] if t == "paper" else [0, 1, 0])])
    for part, ids in zip(("train", "valid", "test"), ([0, 1], [2], [3])):
        if part in split_parts:
            _gz(root / "split" / "random" / "paper" / f"{part}.csv.gz", [[i] for i in ids])
    return root


def _argv(spec, inputs):
    return [a.format(**inputs) for a in spec]


TYPED = ["--typed-edges", "paper,cites,paper={edges}"]
REPEATED = {  # name: (argv, words)
    "an edge type twice": (
        TYPED + ["--typed-edges", "paper,cites,paper={edges2}"],
        ["--typed-edges", "twice", "paper,cites,paper"],
    ),
    "an edge type twice, other spelling": (
        TYPED + ["--typed-edges", "paper___cites___paper={edges2}"],
        ["--typed-edges", "twice"],
    ),
    "a node type's features twice": (
        TYPED + ["--node-features", "paper={x}", "--node-features", "paper={x2}"],
        ["--node-features", "twice", "paper"],
    ),
    "a node type's labels twice": (
        TYPED + ["--node-labels", "paper={y}", "--node-labels", "paper={y}"],
        ["--node-labels", "paper"],
    ),
    "a node type's count twice": (
        TYPED + ["--node-count", "paper=4", "--node-count", "paper=9"],
        ["--node-count", "paper"],
    ),
    "--edges twice": (["--edges", "{edges}", "--edges", "{edges2}"], ["--edges", "2 times"]),
    "--features twice": (["--edges", "{edges}", "--features", "{x}", "--features", "{x2}"], ["--features", "2 times"]),
    "--train-idx twice": (
        ["--edges", "{edges}", "--labels", "{y}", "--train-idx", "{train}", "--train-idx", "{val}"],
        ["--train-idx"],
    ),
    "--num-nodes twice": (["--edges", "{edges}", "--num-nodes", "4", "--num-nodes", "9"], ["--num-nodes", "2 times"]),
    "--ogb-split twice": (["--ogb", "{ogb}", "--ogb-split", "random", "--ogb-split", "random"], ["--ogb-split"]),
}
NOT_APPLICABLE = {  # name: (argv, words)
    "--link-split on --typed-edges": (TYPED + ["--link-split", "0.8,0.1,0.1"], ["--link-split", "--typed-edges"]),
    "--features on --typed-edges": (TYPED + ["--features", "{x}"], ["--features", "--node-features"]),
    "--labels on --typed-edges": (TYPED + ["--labels", "{y}"], ["--labels", "--node-labels"]),
    "--num-nodes on --typed-edges": (TYPED + ["--num-nodes", "9"], ["--num-nodes", "--node-count"]),
    "--undirected on --typed-edges": (TYPED + ["--undirected"], ["--undirected", "--add-reverse"]),
    "--reorder on --typed-edges": (TYPED + ["--reorder", "degree"], ["--reorder"]),
    "--ogb-split on --typed-edges": (TYPED + ["--ogb-split", "random"], ["--ogb-split"]),
    "--num-classes on --typed-edges without labels": (
        TYPED + ["--num-classes", "4"],
        ["--num-classes", "without labels"],
    ),
    "--feature-dtype on --typed-edges without features": (TYPED + ["--feature-dtype", "float16"], ["--feature-dtype"]),
    "--split on --typed-edges without labels": (TYPED + ["--split", "random"], ["--split", "no labels"]),
    "--node-features on --edges": (
        ["--edges", "{edges}", "--node-features", "paper={x}"],
        ["--node-features", "--edges"],
    ),
    "--node-count on --edges": (["--edges", "{edges}", "--node-count", "paper=4"], ["--node-count"]),
    "--target-type on --edges": (["--edges", "{edges}", "--target-type", "paper"], ["--target-type"]),
    "--add-reverse on --edges": (["--edges", "{edges}", "--add-reverse"], ["--add-reverse", "--undirected"]),
    "--ogb-split on --edges": (["--edges", "{edges}", "--ogb-split", "x"], ["--ogb-split"]),
    "--link-negatives without --link-split": (
        ["--edges", "{edges}", "--link-negatives", "5"],
        ["--link-negatives", "--link-split"],
    ),
    "--link-negatives 0": (
        ["--edges", "{edges}", "--link-split", "0.5,0.25,0.25", "--link-negatives", "0"],
        ["negatives 0", "at least 1"],
    ),
    "--num-classes on --edges without labels": (["--edges", "{edges}", "--num-classes", "4"], ["--num-classes"]),
    "--split with split files": (
        [
            "--edges", "{edges}", "--labels", "{y}", "--split", "random", "--train-idx", "{train}", "--val-idx",
            "{val}", "--test-idx", "{test}",
        ],
        ["--split", "split files"],
    ),
    "--features on --ogb": (["--ogb", "{ogb}", "--features", "{x}"], ["--features", "--ogb"]),
    "--train-idx on --ogb": (["--ogb", "{ogb}", "--train-idx", "{train}"], ["--train-idx", "--ogb-split"]),
    "--split with --ogb-split": (["--ogb", "{ogb}", "--split", "random", "--ogb-split", "random"], ["--split"]),
    "--node-labels on --ogb": (["--ogb", "{ogb}", "--node-labels", "paper={y}"], ["--node-labels"]),
    "--num-nodes on a typed --ogb": (["--ogb", "{mag}", "--num-nodes", "9"], ["--num-nodes", "typed --ogb"]),
    "--link-split on a typed --ogb": (
        ["--ogb", "{mag}", "--link-split", "0.8,0.1,0.1"],
        ["--link-split", "typed --ogb"],
    ),
    "--node-count on a typed --ogb": (["--ogb", "{mag}", "--node-count", "paper=4"], ["--node-count"]),
    "--features on a typed --ogb": (["--ogb", "{mag}", "--features", "{x}"], ["--features"]),
    "--train-idx on a typed --ogb": (["--ogb", "{mag}", "--train-idx", "{train}"], ["--train-idx"]),
    "--drop-duplicates on a typed --ogb": (["--ogb", "{mag}", "--drop-duplicates"], ["--drop-duplicates"]),
}
LABELS_BEYOND_NUM_CLASSES = {  # labels go up to 3: --num-classes 2 is refused for every kind of input
    "--edges": ["--edges", "{edges}", "--labels", "{y}"],
    "--typed-edges": TYPED + ["--node-labels", "paper={y}"],
    "a homogeneous --ogb": ["--ogb", "{ogb}"],
    "a typed --ogb": ["--ogb", "{mag}"],
}


@pytest.mark.parametrize("case", list(REPEATED))
def test_a_repeated_flag_is_refused_not_overwritten(cli, inputs, tmp_path, case):
    argv, words = REPEATED[case]
    _refused(cli, _argv(argv, inputs), tmp_path / "out", words)


@pytest.mark.parametrize("case", list(NOT_APPLICABLE))
def test_a_flag_the_input_does_not_use_is_refused(cli, inputs, tmp_path, case):
    argv, words = NOT_APPLICABLE[case]
    _refused(cli, _argv(argv, inputs), tmp_path / "out", words)


@pytest.mark.parametrize("kind", list(LABELS_BEYOND_NUM_CLASSES))
def test_num_classes_is_honoured_by_every_kind(cli, inputs, tmp_path, kind):
    argv = _argv(LABELS_BEYOND_NUM_CLASSES[kind], inputs)
    _refused(cli, [*argv, "--num-classes", "2"], tmp_path / "out", ["label 2", "[0, 2)"])
    code, _, stderr = cli("preprocess", *argv, "--num-classes", "6", "--out", tmp_path / "ok", "--quiet")
    assert code == 0, stderr
    assert st.datasets.load(tmp_path / "ok").num_classes == 6


def test_refused_flags_leave_an_existing_dataset_untouched(cli, inputs, tmp_path):
    out = tmp_path / "out"
    assert cli("preprocess", "--edges", inputs["edges"], "--out", out, "--quiet")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for argv, _ in [*REPEATED.values(), *NOT_APPLICABLE.values()]:
        code, _, stderr = cli("preprocess", *_argv(argv, inputs), "--out", out, "--overwrite", "--quiet")
        assert code == 1 and "Traceback" not in stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ---------------------------------------------------------------- typed imports: the checks the homogeneous path has

def _typed_files(tmp_path, edges_text=PLAIN, extra=()):
    edges = _csv(tmp_path / f"cites-{abs(hash(edges_text))}.csv", edges_text)
    return ["--typed-edges", f"paper,cites,paper={edges}", *extra]


def test_typed_inputs_are_checked_before_anything_is_written(cli, inputs, tmp_path):
    y, x = inputs["y"], inputs["x"]
    np.save(tmp_path / "y_unlabelled.npy", np.array([0, -1, 1, 2]))
    np.save(tmp_path / "y_author.npy", np.array([0, 1, 0]))
    writes = _csv(tmp_path / "writes.csv", "src,dst\n0,0\n1,1\n2,3\n")
    split = [f"--{n}-idx={inputs[n]}" for n in ("train", "val", "test")]
    cases = {
        "a split with only train": (
            _typed_files(tmp_path, extra=["--node-labels", f"paper={y}", f"--train-idx={inputs['train']}"]),
            ["--val-idx and --test-idx are missing"],
        ),
        "two labelled types, no --target-type": (
            _typed_files(
                tmp_path,
                extra=[
                    "--typed-edges",
                    f"author,writes,paper={writes}",
                    "--node-labels",
                    f"paper={y}",
                    "--node-labels",
                    f"author={tmp_path / 'y_author.npy'}",
                ],
            ),
            ["2 node types have labels", "--target-type"],
        ),
        "a target type without labels": (
            _typed_files(
                tmp_path,
                extra=[
                    "--node-labels",
                    f"paper={y}",
                    "--typed-edges",
                    f"author,writes,paper={writes}",
                    "--target-type",
                    "author",
                ],
            ),
            ["'author' has no labels"],
        ),
        "an id of 2**31 with an inferred count": (
            _typed_files(tmp_path, "src,dst\n0,1\n2147483648,2\n"),
            ["line 3", "2147483648", "--node-count paper=2147483649"],
        ),
        "a type named only in --node-features": (
            _typed_files(tmp_path, extra=["--node-features", f"papr={x}"]),
            ["'papr'", "node types: paper"],
        ),
        "a type named only in --node-labels": (
            _typed_files(tmp_path, extra=["--node-labels", f"venue={y}"]),
            ["'venue'"],
        ),
        "a type named only in --node-count": (_typed_files(tmp_path, extra=["--node-count", "venue=4"]), ["'venue'"]),
        "split ids as floats": (
            _typed_files(
                tmp_path,
                extra=["--node-labels", f"paper={y}", *split[:2], f"--test-idx={_csv(tmp_path / 't.csv', '2.0')}"],
            ),
            ["t.csv", "'2.0' is not an integer"],
        ),
    }
    for name, (argv, words) in cases.items():
        _refused(cli, argv, tmp_path / "out", words)


def test_a_typed_import_without_split_says_it_drew_a_random_one(cli, inputs, tmp_path):
    code, stdout, _ = cli(
        "preprocess", *_typed_files(tmp_path, extra=["--node-labels", f"paper={inputs['y']}"]), "--out", tmp_path / "o"
    )
    assert code == 0 and "random split 0.6/0.2/0.2 (seed 0)" in stdout
    assert st.datasets.load(tmp_path / "o").meta["splits_from"]["random"] == [0.6, 0.2, 0.2]


def test_typed_ogb_folder_split_checks(cli, tmp_path):
    cases = {
        "no split folder": (_ogb_typed_folder(tmp_path / "a", split_parts=()), ["no split folder", "--split random"]),
        "only train for the target type": (
            _ogb_typed_folder(tmp_path / "b", split_parts=("train",)),
            ["valid.csv.gz", "'paper'"],
        ),
        "two labelled types": (
            _ogb_typed_folder(tmp_path / "c", labelled=("paper", "author")),
            ["2 node types", "--target-type"],
        ),
    }
    for name, (folder, words) in cases.items():
        _refused(cli, ["--ogb", folder], tmp_path / "out", words)
    # --split random is honoured for a typed folder as for a homogeneous one
    code, _, stderr = cli(
        "preprocess", "--ogb", tmp_path / "a", "--split", "random", "--out", tmp_path / "r", "--quiet"
    )
    assert code == 0, stderr
    ds = st.datasets.load(tmp_path / "r")
    assert ds.meta["splits_from"]["random"] == [0.6, 0.2, 0.2] and sum(v.numel() for v in ds.split.values()) == 4
    _refused(
        cli,
        ["--ogb", tmp_path / "c", "--target-type", "author"],
        tmp_path / "out",
        ["train.csv.gz", "target type 'author'"],
    )


def test_typed_ogb_count_file_bom_duplicates_and_stray_types(cli, tmp_path):
    folder = _ogb_typed_folder(tmp_path / "mag")
    count = folder / "raw" / "num-node-dict.csv.gz"
    with gzip.open(count, "wt", newline="") as f:
        f.write("\ufeffauthor,paper\r\n3,4\r\n")
    code, _, stderr = cli("preprocess", "--ogb", folder, "--out", tmp_path / "ok", "--quiet")
    assert code == 0, stderr
    assert st.datasets.load(tmp_path / "ok").num_nodes == {"author": 3, "paper": 4}
    with gzip.open(count, "wt") as f:
        f.write("paper,paper\n3,4\n")
    _refused(cli, ["--ogb", folder], tmp_path / "out", ["num-node-dict.csv.gz", "'paper' is named twice"])
    _gz(count, [[3, 4]], header=["author", "paper"])
    _gz(folder / "raw" / "node-feat" / "papr" / "node-feat.csv.gz", [[1.0]] * 4)
    _refused(cli, ["--ogb", folder], tmp_path / "out", ["papr", "not in num-node-dict", "node types: author, paper"])

    # a relation naming a type the count file lacks: refused, not a type counted from its largest id (issue 39)
    _gz(count, [[4]], header=["paper"])
    shutil.rmtree(folder / "raw" / "node-feat" / "papr")
    _refused(cli, ["--ogb", folder], tmp_path / "out", ["author___writes___paper", "'author' is not in "
                                                          "num-node-dict.csv.gz", "node types: paper"])


# ---------------------------------------------------------------- unlabelled nodes: one rule for every import

def test_unlabelled_nodes_are_accepted_by_every_import(cli, inputs, tmp_path):
    """-1 and NaN are "no label" in homogeneous and typed imports alike (issue 39): stored as -1, kept out of the
    random split, the other labels as given."""
    np.save(tmp_path / "y.npy", np.array([0, -1, np.nan, 1.0]))
    expected = np.array([0, -1, -1, 1])
    edges = _csv(tmp_path / "w.csv", "src,dst\n0,0\n1,1\n2,3\n")
    runs = {"edges": ["--edges", inputs["edges"], "--labels", tmp_path / "y.npy"],
            "typed": _typed_files(tmp_path, extra=["--node-labels", f"paper={tmp_path / 'y.npy'}"]),
            "typed, two types": _typed_files(tmp_path, extra=["--typed-edges", f"author,writes,paper={edges}",
                                                              "--node-labels", f"paper={tmp_path / 'y.npy'}"])}
    for name, argv in runs.items():
        out = tmp_path / name.replace(", ", "_")
        code, _, stderr = cli("preprocess", *argv, "--out", out, "--quiet")
        assert code == 0, (name, stderr)
        ds = st.datasets.load(out, verify=True)
        target = ds.target_type
        assert np.array_equal(ds.labels_by_type[target].numpy(), expected), name
        assert ds.num_classes == 2
        drawn = np.concatenate([ds.split[k].numpy() for k in ("train", "val", "test")])
        assert len(drawn) and set(drawn.tolist()) <= {0, 3}, name
    folder = _ogb_typed_folder(tmp_path / "mag")
    _gz(folder / "raw" / "node-label" / "paper" / "node-label.csv.gz", [["nan"], [1], [-1], [3]])
    code, _, stderr = cli("preprocess", "--ogb", folder, "--split", "random", "--out", tmp_path / "ogb", "--quiet")
    assert code == 0, stderr
    assert st.datasets.load(tmp_path / "ogb").labels["paper"].tolist() == [-1, 1, -1, 3]
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["paper"].y, data["paper"].x = torch.tensor([0.0, float("nan"), 2.0, -1.0]), torch.ones(4, 2)
    data["paper", "cites", "paper"].edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    ds = st.datasets.from_pyg(data, tmp_path / "pyg", quiet=True)
    assert ds.labels["paper"].tolist() == [0, -1, 2, -1] and ds.num_classes == 3


# ---------------------------------------------------------------- OGB split files (.pt): one reader, one allow-list

def test_ogb_csv_folder_with_a_split_written_by_ogbs_saver(tmp_path):
    rng = np.random.default_rng(0)
    n = 40
    edge_index, labels = rng.integers(0, n, (2, 200)), rng.integers(0, 3, n)
    folder = _ogb_csv_folder(tmp_path / "ogb", edge_index, labels)
    saved = torch.load(folder / "split" / "random" / "split_dict.pt", weights_only=False)
    assert isinstance(saved["train"], np.ndarray)  # what makes the allow-list necessary
    ds = st.datasets.from_ogb(folder, tmp_path / "out", quiet=True)
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        assert np.array_equal(ds.split[ours].numpy(), np.sort(saved[theirs]))
    assert np.array_equal(ds.labels.numpy(), labels)


def test_ogb_link_split_of_numpy_arrays_is_read(tmp_path):
    """A link split written as OGB's saver writes one (dicts of NumPy arrays) gives the same edges."""
    rng = np.random.default_rng(1)
    n = 30
    train = rng.integers(0, n, (60, 2))
    folder = _ogb_csv_folder(tmp_path / "ogbl", train.T, rng.integers(0, 3, n), split_dict=False)
    parts = {"train": {"edge": train}}
    for name in ("valid", "test"):
        parts[name] = {"edge": rng.integers(0, n, (5, 2)), "edge_neg": rng.integers(0, n, (15, 2))}
    _save_split_with_ogb(folder, parts, "time")
    ds = st.datasets.from_ogb(folder, tmp_path / "out", quiet=True)
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        assert np.array_equal(ds.edge_split[ours].pos.numpy(), parts[theirs]["edge"].T)
    assert np.array_equal(ds.edge_split["test"].neg.numpy(), parts["test"]["edge_neg"].T)


def test_bad_ogb_split_files_are_one_line(cli, tmp_path):
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    folder = _ogb_csv_folder(
        tmp_path / "ogb", np.array([[0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]]), labels, split_dict=False
    )
    pt = folder / "split" / "random" / "split_dict.pt"
    pt.parent.mkdir(parents=True)
    ok = {"train": np.array([0, 1, 2, 3]), "valid": np.array([4, 5]), "test": np.array([6, 7])}
    cases = {
        "strings": (dict(ok, train=["0", "1"]), ["split_dict.pt['train']", "<U1", "integer"]),
        "float ids": (dict(ok, valid=np.array([4.0, 5.0])), ["['valid']", "float64", "integer"]),
        "float tensor ids": (dict(ok, test=torch.tensor([6.0, 7.0])), ["['test']", "float32"]),
        "bool ids": (dict(ok, test=np.array([True, False])), ["['test']", "bool"]),
        "a 2-D part": (dict(ok, train=np.zeros((2, 2), np.int64)), ["['train']", "1-D"]),
        "a missing part": ({"train": ok["train"], "test": ok["test"]}, ["no 'valid' part"]),
        "not a dict": (np.array([1, 2]), ["holds a ndarray", "not a dict"]),
    }
    for name, (content, words) in cases.items():
        torch.save(content, pt)
        _refused(cli, ["--ogb", folder], tmp_path / "out", [*words])
    pt.write_bytes(b"not a pickle")
    _refused(cli, ["--ogb", folder], tmp_path / "out", ["split_dict.pt", "weights_only=True"])


# ---------------------------------------------------------------- link splits at import

def test_link_splits_without_evaluation_edges_are_refused(cli, tmp_path):
    small = _csv(tmp_path / "small.csv", PLAIN)
    _refused(
        cli,
        ["--edges", small, "--link-split", "0.8,0.1,0.1"],
        tmp_path / "out",
        ["5 candidate edges", "0 validation", "0 test"],
    )
    _refused(cli, ["--edges", small, "--link-split", "0.5,0,0.5"], tmp_path / "out", ["0 validation"])
    rng = np.random.default_rng(0)
    n = 12
    folder = _ogb_csv_folder(tmp_path / "ogbl", rng.integers(0, n, (2, 40)), rng.integers(0, 3, n), split_dict=False)
    split = folder / "split" / "time"
    split.mkdir(parents=True)
    torch.save({"edge": torch.randint(0, n, (20, 2))}, split / "train.pt")
    _refused(cli, ["--ogb", folder], tmp_path / "out", ["no valid.pt", "train, valid and test"])
    torch.save({"edge": torch.randint(0, n, (3, 2))}, split / "valid.pt")
    torch.save({"edge": torch.randint(0, n, (3, 2)), "edge_neg": torch.randint(0, n, (9, 2))}, split / "test.pt")
    _refused(cli, ["--ogb", folder], tmp_path / "out", ["valid.pt", "no negatives"])


# ---------------------------------------------------------------- PyG objects

def test_pyg_float_edge_index_is_refused_not_cast(tmp_path):
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[0.0, 1.0], [1.0, 2.0]]), num_nodes=3)
    with pytest.raises(DatasetError, match=r"data.edge_index has dtype float32.*edge_index.long\(\)"):
        st.datasets.from_pyg(data, tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists()


def test_pyg_heterodata_with_two_labelled_types_needs_a_target_type(tmp_path):
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["paper"].y, data["author"].y = torch.tensor([0, 1, 1]), torch.tensor([1, 0])
    data["paper"].num_nodes, data["author"].num_nodes = 3, 2
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(DatasetError, match=r"2 node types have labels \(paper, author\).*--target-type"):
        st.datasets.from_pyg(data, tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists()
    assert st.datasets.from_pyg(data, tmp_path / "ok", target_type="author", quiet=True).target_type == "author"
