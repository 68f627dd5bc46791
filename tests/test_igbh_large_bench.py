"""benchmarks/igbh_large.py's writer: the IGBH-large shape in IGB's on-disk layout (raw headerless memory maps for the
paper and author features, the labels and the edge lists; ``.npy`` for the small types), read back by NumPy and
imported by ``from_igb`` with the reference's reverses."""

import sys
from pathlib import Path

import numpy as np

from sparsetrain.datasets.igb import from_igb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import igbh_large  # noqa: E402

MAGIC = b"\x93NUMPY"


def test_written_layout_is_igbs_large_and_imports(tmp_path):
    nodes, edges = igbh_large.shape(1e-4, 0.5)
    # the shape: IGBH-large's counts scaled (papers 100M, authors 116,959,896, ...), published/venue per paper
    assert nodes["paper"] == 10_000 and nodes["author"] == 11_696 and nodes["journal"] == 5
    assert edges[("paper", "cites", "paper")] == round(1_223_571_364 * 1e-4 * 0.5)
    assert edges[("paper", "published", "journal")] == round(0.5 * 100_000_000 * 1e-4 * 0.5)
    shape = igbh_large.write_layout(tmp_path / "igb", 1e-4, 0.5, feature_dim=3, seed=1)
    folder = tmp_path / "igb" / "large" / "processed"
    headed = {p.relative_to(folder).as_posix(): p.read_bytes()[:6] == MAGIC for p in folder.rglob("*.npy")}
    assert not any(headed[f"{t}/node_feat.npy"] for t in ("paper", "author"))
    assert all(headed[f"{t}/node_feat.npy"] for t in ("institute", "fos", "journal", "conference"))
    assert not headed["paper/node_label_19.npy"]
    assert not any(v for k, v in headed.items() if k.endswith("edge_index.npy"))
    raw = {et: np.fromfile(folder / "__".join(et) / "edge_index.npy", np.int64).reshape(-1, 2) for et in edges}
    assert {"__".join(et): len(e) for et, e in raw.items()} == shape["edges"]
    for (src, _, dst), e in raw.items():
        assert 0 <= e[:, 0].min() and e[:, 0].max() < nodes[src] and 0 <= e[:, 1].min() and e[:, 1].max() < nodes[dst]
    labels = np.fromfile(folder / "paper" / "node_label_19.npy", np.float32)
    assert len(labels) == nodes["paper"] and set(np.unique(labels)) <= set(range(19))

    ds = from_igb(tmp_path / "igb", tmp_path / "ds", size="large",
                  num_nodes={"paper": nodes["paper"], "author": nodes["author"]}, quiet=True)
    assert ds.num_nodes == nodes
    cites = raw[("paper", "cites", "paper")]
    assert ds.num_edges[("paper", "cites", "paper")] == 2 * (int((cites[:, 0] != cites[:, 1]).sum()) + nodes["paper"])
    for et, e in raw.items():
        if et[1] != "cites":
            assert ds.num_edges[et] == len(e) and ds.num_edges[(et[2], f"rev_{et[1]}", et[0])] == len(e)
    x = np.fromfile(folder / "author" / "node_feat.npy", np.float32).reshape(nodes["author"], 3)
    assert np.array_equal(ds.features["author"].numpy(), x)
    assert np.array_equal(ds.labels["paper"].numpy(), labels.astype(np.int64))
