"""Edge splits in the dataset format: random splits, OGB link-property folders, bad input, old folders."""

import gzip

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

import sparsetrain as st
from sparsetrain.errors import DatasetError


def _graph(num_nodes=60, num_edges=400, seed=0, undirected=True):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    ei = to_undirected(ei, num_nodes=num_nodes) if undirected else torch.unique(ei, dim=1)
    return Data(edge_index=ei, x=torch.randn(num_nodes, 4, generator=g), num_nodes=num_nodes)


def _keys(ei, n):
    return set((ei[0] * n + ei[1]).tolist())


def test_random_split_removes_held_out_edges_and_draws_strict_negatives(tmp_path):
    data = _graph()
    n = data.num_nodes
    full = _keys(data.edge_index, n)
    ds = st.datasets.from_pyg(data, tmp_path / "d", link_split=(0.8, 0.1, 0.1), link_negatives=7, seed=3, quiet=True)
    sp = ds.edge_split
    assert set(sp) == {"train", "val", "test"} and sp["val"].neg_per_pos == 7
    undirected_edges = len(full) // 2
    assert sp["val"].pos.shape[1] == round(0.1 * undirected_edges) == sp["test"].pos.shape[1]
    assert sp["train"].pos.shape[1] + 2 * sp["val"].pos.shape[1] == undirected_edges
    graph = _keys(ds.graph.to_edge_index(), n)
    held = set()
    for name in ("val", "test"):
        pos, neg = sp[name].pos, sp[name].neg
        assert bool((pos[0] < pos[1]).all())
        held |= _keys(pos, n) | _keys(pos.flip(0), n)
        assert neg.shape == (2, 7 * pos.shape[1])
        assert torch.equal(neg[0], pos[0].repeat_interleave(7))  # grouped by positive
        assert not (_keys(neg, n) & full) and bool((neg[0] != neg[1]).all())  # strict
    assert graph == full - held  # exactly the held-out edges left the graph, both directions
    assert _keys(sp["train"].pos, n) | _keys(sp["train"].pos.flip(0), n) == graph
    again = st.datasets.from_pyg(data, tmp_path / "e", link_split=(0.8, 0.1, 0.1), link_negatives=7, seed=3, quiet=True)
    other = st.datasets.from_pyg(data, tmp_path / "f", link_split=(0.8, 0.1, 0.1), link_negatives=7, seed=4, quiet=True)
    assert torch.equal(again.edge_split["test"].neg, sp["test"].neg)
    assert not torch.equal(other.edge_split["test"].pos, sp["test"].pos)
    st.datasets.load(tmp_path / "d", verify=True)


def test_directed_split_holds_out_single_direction(tmp_path):
    data = _graph(undirected=False)
    n = data.num_nodes
    ds = st.datasets.from_pyg(data, tmp_path / "d", link_split=(0.7, 0.15, 0.15), quiet=True)
    assert ds.directed
    held = _keys(ds.edge_split["val"].pos, n) | _keys(ds.edge_split["test"].pos, n)
    assert _keys(ds.graph.to_edge_index(), n) == _keys(data.edge_index, n) - held


def test_reordered_split_maps_back_to_the_same_edges(tmp_path):
    data = _graph()
    plain = st.datasets.from_pyg(data, tmp_path / "a", link_split=(0.8, 0.1, 0.1), quiet=True)
    ordered = st.datasets.from_pyg(data, tmp_path / "b", link_split=(0.8, 0.1, 0.1), reorder="degree", quiet=True)
    back = ordered.original_ids
    for name in ("train", "val", "test"):
        assert _keys(back[ordered.edge_split[name].pos], 60) == _keys(plain.edge_split[name].pos, 60)
    assert _keys(back[ordered.graph.to_edge_index()], 60) == _keys(plain.graph.to_edge_index(), 60)


def test_cli_link_split(tmp_path, cli):
    edges = tmp_path / "e.csv"
    ei = _graph().edge_index
    edges.write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in ei.t().tolist()))
    code, out, err = cli("preprocess", "--edges", edges, "--out", tmp_path / "d", "--link-split", "0.85,0.05,0.10",
                         "--link-negatives", "3", "--seed", "1", "--quiet")
    assert code == 0, err
    ds = st.load(tmp_path / "d")
    assert ds.edge_split["test"].neg_per_pos == 3 and ds.meta["link_split_from"]["seed"] == 1
    code, out, err = cli("preprocess", "--edges", edges, "--out", tmp_path / "x", "--link-split", "0.9,0.2,0.1")
    assert code == 1 and "link split" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_old_folders_load_without_edge_splits(tmp_path, cora_data):
    ds = st.datasets.from_pyg(cora_data, tmp_path / "c", quiet=True)
    assert ds.edge_split == {} and "link_split" not in ds.meta


# ---------------------------------------------------------------- OGB link-property folders

def _ogb_folder(root, kind, num_nodes=50, seed=0):
    """A folder in the exact layout the ogb package downloads: raw/*.csv.gz and split/<name>/{train,valid,test}.pt."""
    g = torch.Generator().manual_seed(seed)
    raw = root / "raw"
    raw.mkdir(parents=True)
    train = torch.randint(0, num_nodes, (120, 2), generator=g)
    with gzip.open(raw / "edge.csv.gz", "wt") as f:
        f.write("".join(f"{u},{v}\n" for u, v in train.tolist()))
    with gzip.open(raw / "num-node-list.csv.gz", "wt") as f:
        f.write(f"{num_nodes}\n")
    with gzip.open(raw / "node-feat.csv.gz", "wt") as f:
        f.write(
            "".join(",".join(str(v) for v in row) + "\n" for row in torch.randn(num_nodes, 3, generator=g).tolist())
        )
    split = root / "split" / "time"
    split.mkdir(parents=True)
    parts = {}
    if kind == "collab":  # ogbl-collab: edge [E, 2], weight, year; valid/test add edge_neg [M, 2]
        parts["train"] = {"edge": train, "weight": torch.ones(120, dtype=torch.long), "year": torch.full((120,), 2010)}
        for name, m in (("valid", 10), ("test", 12)):
            parts[name] = {
                "edge": torch.randint(0, num_nodes, (m, 2), generator=g),
                "weight": torch.ones(m, dtype=torch.long),
                "year": torch.full((m,), 2018),
                "edge_neg": torch.randint(0, num_nodes, (3 * m, 2), generator=g),
            }
    else:  # ogbl-citation2: source_node, target_node [E]; valid/test add target_node_neg [E, K]
        parts["train"] = {"source_node": train[:, 0], "target_node": train[:, 1]}
        for name, m in (("valid", 10), ("test", 12)):
            parts[name] = {"source_node": torch.randint(0, num_nodes, (m,), generator=g),
                           "target_node": torch.randint(0, num_nodes, (m,), generator=g),
                           "target_node_neg": torch.randint(0, num_nodes, (m, 20), generator=g)}
    for name, part in parts.items():
        torch.save(part, split / f"{name}.pt")
    return parts


@pytest.mark.parametrize("kind", ["collab", "citation2"])
def test_ogb_link_folder(tmp_path, kind):
    parts = _ogb_folder(tmp_path / "ogb", kind)
    ds = st.datasets.from_ogb(tmp_path / "ogb", tmp_path / "d", quiet=True)
    sp = ds.edge_split
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        part = parts[theirs]
        if kind == "collab":
            assert torch.equal(sp[ours].pos, part["edge"].t())
            if ours != "train":
                assert torch.equal(sp[ours].neg, part["edge_neg"].t()) and sp[ours].neg_per_pos is None
        else:
            assert torch.equal(sp[ours].pos, torch.stack([part["source_node"], part["target_node"]]))
            if ours != "train":
                k = part["target_node_neg"].shape[1]
                assert sp[ours].neg_per_pos == k
                assert torch.equal(sp[ours].neg[1].view(-1, k), part["target_node_neg"])
                assert torch.equal(sp[ours].neg[0].view(-1, k)[:, 0], part["source_node"])
    assert ds.num_nodes == 50 and ds.num_features == 3


def test_ogb_split_dict_shortcut(tmp_path):
    parts = _ogb_folder(tmp_path / "ogb", "collab")
    split = tmp_path / "ogb" / "split" / "time"
    for name in ("train", "valid", "test"):
        (split / f"{name}.pt").unlink()
    torch.save(parts, split / "split_dict.pt")
    ds = st.datasets.from_ogb(tmp_path / "ogb", tmp_path / "d", quiet=True)
    assert torch.equal(ds.edge_split["test"].pos, parts["test"]["edge"].t())


def test_ogb_link_bad_input(tmp_path, cli):
    parts = _ogb_folder(tmp_path / "ogb", "collab")
    split = tmp_path / "ogb" / "split" / "time"
    cases = []
    bad = dict(parts["valid"], edge=torch.tensor([[0, 1], [2, 999]]))
    cases.append(("valid.pt", bad, ["valid.pt", "positive edge 1", "999", "[0, 50)"]))
    cases.append(("test.pt", {"head": torch.zeros(3, dtype=torch.long)}, ["test.pt", "keys head", "source_node"]))
    cases.append(("test.pt", dict(parts["test"], edge=parts["test"]["edge"].float()), ["test.pt", "'edge'", "integer"]))
    for name, content, words in cases:
        torch.save(content, split / name)
        code, out, err = cli("preprocess", "--ogb", tmp_path / "ogb", "--out", tmp_path / "out")
        assert code == 1 and all(w in err for w in words), err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
        torch.save(parts[name[:-3]], split / name)
    (split / "test.pt").write_bytes(b"not a pickle")
    code, out, err = cli("preprocess", "--ogb", tmp_path / "ogb", "--out", tmp_path / "out")
    assert code == 1 and "test.pt" in err and "weights_only=True" in err and len(err.strip().splitlines()) == 1
    # a pickle that is not plain tensors is refused by weights_only, never executed
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("executed",))

    (split / "test.pt").write_bytes(pickle.dumps({"edge": Evil()}))
    code, out, err = cli("preprocess", "--ogb", tmp_path / "ogb", "--out", tmp_path / "out")
    assert code == 1 and "executed" not in out and "test.pt" in err


def test_damaged_link_meta_is_one_line(tmp_path):
    import json

    ds = st.datasets.from_pyg(_graph(), tmp_path / "d", link_split=(0.8, 0.1, 0.1), quiet=True)
    meta = json.loads((ds.path / "meta.json").read_text())
    meta["link_split"]["val"]["neg"] = "missing.npy"
    (ds.path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="link_split.*missing.npy"):
        st.load(ds.path)
