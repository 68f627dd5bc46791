"""Reads of a dataset whose files shrink after ``load``, or whose topology is damaged (issue 16, items 2 and 4).

Run by tests/test_bounds.py in a subprocess, so that a SIGBUS or SIGSEGV fails the test
instead of killing pytest. ``python bounds_probe.py WORKDIR CASE...`` prints one JSON
object: case -> what happened (``"<ErrorClass>: <message>"``, ``"same"`` when a read
after the truncation returned what was read before it, or ``"no error"``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

import sparsetrain as st
from sparsetrain.datasets import format as fmt
from sparsetrain.errors import SparsetrainError
from sparsetrain.sampling import NeighborSampler, SamplerInput

NUM_NODES, NUM_EDGES = 400, 4000


def base(work: Path) -> Path:
    """A weighted, cluster-reordered dataset (so it has every kind of array file), made once per work folder."""
    folder = work / "base"
    if not folder.exists():
        g = torch.Generator().manual_seed(0)
        train = torch.zeros(NUM_NODES, dtype=torch.bool)
        train[::3] = True
        data = Data(
            edge_index=torch.randint(0, NUM_NODES, (2, NUM_EDGES), generator=g),
            x=torch.randn(NUM_NODES, 8, generator=g),
            y=torch.randint(0, 4, (NUM_NODES,), generator=g),
            edge_weight=torch.rand(NUM_EDGES, generator=g) + 0.1,
            train_mask=train,
            val_mask=~train,
        )
        st.datasets.from_pyg(data, folder, reorder="cluster", drop_duplicates=False, quiet=True)
    return folder


def fresh(work: Path, case: str) -> Path:
    folder = work / case.replace(" ", "_")
    shutil.copytree(base(work), folder)
    return folder


def outcome(action) -> str:
    try:
        action()
    except SparsetrainError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def shrink(path: Path) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def rewrite(folder: Path, name: str, change) -> None:
    """Change an array file in place and fix its checksum: damage that only structure checks can see."""
    array = np.load(folder / name).copy()
    change(array)
    np.save(folder / name, array)
    meta = json.loads((folder / fmt.META_FILE).read_text())
    meta["files"][name]["sha256"] = fmt.sha256_file(folder / name)
    (folder / fmt.META_FILE).write_text(json.dumps(meta))


def all_seeds() -> SamplerInput:
    return SamplerInput(torch.arange(NUM_NODES), key=0)


def inference(ds, kind: str) -> None:
    from sparsetrain.engine.inference import layerwise_inference
    from sparsetrain.nn.models import build_model

    torch.manual_seed(0)
    model = build_model(kind, ds.num_features, 8, ds.num_classes, 2, 0.0)
    layerwise_inference(model, ds, batch_size=64)


# ---- item 4: a mapped file that shrinks after load
READERS = {
    "sample": lambda ds: NeighborSampler(ds.graph, [-1, -1], seed=0).sample(all_seeds()),
    "sample weighted": lambda ds: NeighborSampler(ds.graph, [3, 3], weighted=True, seed=0).sample(all_seeds()),
    "inference": lambda ds: inference(ds, "sage"),
    "in_memory": lambda ds: ds.graph.in_memory(),
    "verify": lambda ds: st.datasets.dataset.verify_structure(ds),
}


def shrunk_graph_file(work: Path, name: str, reader: str) -> str:
    folder = fresh(work, f"shrink {name} {reader}")
    ds = st.datasets.load(folder)
    shrink(folder / name)
    return outcome(lambda: READERS[reader](ds))


def shrunk_node_file(work: Path, name: str) -> str:
    """Per-node arrays are read into memory by load: a later truncation of the file changes nothing."""
    folder = fresh(work, f"shrink {name}")
    ds = st.datasets.load(folder)
    clusters = st.datasets.load_clusters(ds)
    read = {
        fmt.LABELS: lambda: ds.labels[torch.arange(NUM_NODES)],
        "train_idx.npy": lambda: ds.split["train"].clone(),
        fmt.ORIGINAL_IDS: lambda: ds.original_ids[torch.arange(NUM_NODES)],
        "clusters.npy": lambda: clusters[torch.arange(NUM_NODES)],
    }[name]
    before = read().clone()
    shrink(folder / name)
    return "same" if torch.equal(read(), before) else "different"


# ---- item 2, kernel side: damaged topology read without verify
DAMAGE = {
    "index beyond the nodes": (fmt.INDICES, lambda a: a.__setitem__(slice(None, None, 20), 10**9)),
    "negative index": (fmt.INDICES, lambda a: a.__setitem__(slice(3, None, 20), -5)),
    "indptr not monotone": (fmt.INDPTR, lambda a: a.__setitem__(100, a[102])),
    "indptr past the edges": (fmt.INDPTR, lambda a: a.__setitem__(100, a[101] + 10**6)),
    "indptr beyond the edges": (fmt.INDPTR, lambda a: a.__setitem__(slice(390, 400), NUM_EDGES + 10**8)),
}
DAMAGED_READERS = {
    "sample all": lambda ds: NeighborSampler(ds.graph, [-1, -1], seed=0).sample(all_seeds()),
    "sample uniform": lambda ds: NeighborSampler(ds.graph, [5, 5], seed=0).sample(all_seeds()),
    "sample replace": lambda ds: NeighborSampler(ds.graph, [5, 5], replace=True, seed=0).sample(all_seeds()),
    "sample weighted": lambda ds: NeighborSampler(ds.graph, [5, 5], weighted=True, seed=0).sample(all_seeds()),
    "inference sage": lambda ds: inference(ds, "sage"),
    "inference gcn": lambda ds: inference(ds, "gcn"),
}


def damaged(work: Path, damage: str, reader: str) -> str:
    folder = fresh(work, f"{damage} {reader}")
    name, change = DAMAGE[damage]
    rewrite(folder, name, change)
    ds = st.datasets.load(folder)
    return outcome(lambda: DAMAGED_READERS[reader](ds))


def run(work: Path, case: str) -> str:
    kind, _, rest = case.partition(":")
    if kind == "shrink-graph":
        name, reader = rest.split("/")
        return shrunk_graph_file(work, name, reader)
    if kind == "shrink-node":
        return shrunk_node_file(work, rest)
    if kind == "damaged":
        damage, reader = rest.split("/")
        return damaged(work, damage, reader)
    raise SystemExit(f"unknown case {case}")


if __name__ == "__main__":
    work = Path(sys.argv[1])
    results = {}
    for case in sys.argv[2:]:
        results[case] = run(work, case)
        print(json.dumps({case: results[case]}), file=sys.stderr, flush=True)
    print(json.dumps(results))
