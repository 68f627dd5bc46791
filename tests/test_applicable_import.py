"""The import's one rule table (``datasets/applicable.py``'s ``IMPORT_RULES``): every option that applies to one kind
of graph is refused on the other in one line naming the option and the fix, before anything is written; and the
one sequence of ``build_dataset`` gives both kinds the same answers as NumPy."""

import numpy as np
import pytest
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets import from_files
from sparsetrain.datasets.applicable import IMPORT_APPLIES, IMPORT_RULES, ONE_TYPE, TYPED, ImportContext
from sparsetrain.datasets.build import build_dataset
from sparsetrain.datasets.edge_split import EdgeSplit
from sparsetrain.datasets.sources import EdgeSource, GraphInput
from sparsetrain.errors import DatasetError


def _csv(path, rows, header="src,dst"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def _typed(tmp_path, weighted=False):
    rows = [(0, 1, 0.5), (1, 2, 1.0), (2, 0, 2.0)] if weighted else [(0, 1), (1, 2), (2, 0)]
    return {"paper,cites,paper": _csv(tmp_path / "cites.csv", rows, "src,dst,weight" if weighted else "src,dst"),
            "author,writes,paper": _csv(tmp_path / "writes.csv", [(0, 0), (1, 2)])}


def _split_input(typed: bool):
    edges = {fmt.EDGE: ([0, 1, 2], [1, 2, 0])} if not typed else {("a", "r", "b"): ([0, 1], [1, 0])}
    sources = {et: EdgeSource(str(et), lambda s=s, d=d: iter([(np.array(s), np.array(d), None)]), len(s))
               for et, (s, d) in edges.items()}
    split = EdgeSplit(pos=torch.tensor([[0], [1]]), neg=None)
    return GraphInput(sources, edge_splits={"val": (split, "given"), "test": (split, "given")})


# option -> (the call that gives it on the kind it does not apply to, words of the one-line refusal)
CASES = {
    "undirected": (lambda p: from_files(p / "o", _typed(p), undirected=True), "undirected=True (--undirected)"),
    "drop_self_loops": (lambda p: from_files(p / "o", _typed(p), drop_self_loops=True), "--drop-self-loops"),
    "drop_duplicates": (lambda p: from_files(p / "o", _typed(p), drop_duplicates=True), "--drop-duplicates"),
    "reorder": (lambda p: from_files(p / "o", _typed(p), reorder="degree"), "drop --reorder"),
    "link_split": (lambda p: from_files(p / "o", _typed(p), link_split=(0.8, 0.1, 0.1)), "--link-split"),
    "edge_splits": (lambda p: build_dataset(p / "o", _split_input(typed=True)), "the source's link splits"),
    "edge_weights": (lambda p: from_files(p / "o", _typed(p, weighted=True)), "cites.csv: an edge weight column"),
    "add_reverse": (lambda p: from_files(p / "o", _csv(p / "e.csv", [(0, 1)]), add_reverse=True),
                    "--undirected"),
    "target_type": (lambda p: from_files(p / "o", _csv(p / "e.csv", [(0, 1)]), target_type="paper"),
                    "target_type='paper' (--target-type)"),
    "reserved_names": (lambda p: from_files(p / "o", {"_N,cites,paper": _csv(p / "e.csv", [(0, 1)])}),
                       "the type name '_N'"),
}


def test_every_row_of_the_table_is_exercised():
    assert set(CASES) == set(IMPORT_APPLIES) and len(IMPORT_RULES) == len(IMPORT_APPLIES)
    assert all(set(kinds) <= {ONE_TYPE, TYPED} and kinds for kinds, _ in IMPORT_APPLIES.values())


@pytest.mark.parametrize("option", sorted(CASES))
def test_an_option_of_the_other_kind_is_one_line_and_writes_nothing(tmp_path, option):
    call, words = CASES[option]
    with pytest.raises(DatasetError) as info:
        call(tmp_path)
    message = str(info.value)
    kinds, instead = IMPORT_APPLIES[option]
    assert "\n" not in message and words in message and instead in message, message
    assert not (tmp_path / "o").exists()


def test_the_rule_reads_only_the_kind_and_the_options_given():
    rule = IMPORT_RULES[list(IMPORT_APPLIES).index("undirected")]
    assert rule.refused(ImportContext(TYPED, {"undirected": "u"}))
    assert not rule.refused(ImportContext(ONE_TYPE, {"undirected": "u"}))
    assert not rule.refused(ImportContext(TYPED, {}))


def test_given_link_splits_of_a_one_type_graph_are_kept(tmp_path):
    ds = build_dataset(tmp_path / "o", _split_input(typed=False))
    assert ds.edge_split["val"].pos.tolist() == [[0], [1]]


def test_one_sequence_gives_numpy_answers_for_both_kinds(tmp_path):
    src, dst = np.array([0, 1, 2, 2, 3, 3]), np.array([1, 0, 3, 3, 0, 3])
    one = from_files(tmp_path / "one", _csv(tmp_path / "e.csv", zip(src, dst)), undirected=True,
                     drop_self_loops=True, quiet=True)
    pairs = {(int(s), int(d)) for s, d in zip(src, dst) if s != d}
    pairs |= {(d, s) for s, d in pairs}
    indptr, indices = one.graph.indptr.numpy(), one.graph.indices.numpy()
    got = {(int(indices[p]), c) for c in range(len(indptr) - 1) for p in range(indptr[c], indptr[c + 1])}
    assert got == pairs and not one.directed and "permutation" in one.meta
    assert fmt.EDGE_IDS not in one.meta["files"]
    # a typed graph of one self-relation: counted by its one pass (largest id + 1), edges and ids kept as given
    typed = from_files(tmp_path / "typed", {"paper,cites,paper": tmp_path / "e.csv"}, quiet=True)
    assert typed.num_nodes_by_type == {"paper": int(max(src.max(), dst.max())) + 1}
    ids = typed.edge_ids_by_type[("paper", "cites", "paper")].numpy()
    indptr, indices = typed.graph.indptr.numpy(), typed.graph.indices.numpy()
    cols = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    assert np.array_equal(src[ids], indices) and np.array_equal(dst[ids], cols)
    assert typed.directed and "permutation" not in typed.meta


def test_a_far_id_of_a_self_relation_names_its_count_flag(tmp_path):
    edges = _csv(tmp_path / "e.csv", [(0, 1), (5_000_000, 2)])
    with pytest.raises(DatasetError, match=r"node id 5000000 is far beyond .*--node-count paper=5000001"):
        from_files(tmp_path / "o", {"paper,cites,paper": edges}, quiet=True)
    with pytest.raises(DatasetError, match=r"node id 5000000 is far beyond .*--num-nodes 5000001"):
        from_files(tmp_path / "o", edges, quiet=True)
