"""Temporal graphs from the CLI: ``preprocess --node-time / --edge-time-column`` stores the times, ``info`` shows them,
``train --temporal`` samples with PyG's rule (no neighbor later than its seed's time, a seed's time its node time).

References are independent of the code under test: the input files themselves (each sampled edge is looked up among
the CSV's rows with its time, by brute force), and ``NeighborSampler(node_time=..., edge_time=...)`` on the loaded
graph for the batches ``train`` draws.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsetrain.cli import main
from sparsetrain.datasets import load
from sparsetrain.engine.stages import sample as sample_stage
from sparsetrain.sampling import NeighborSampler
from sparsetrain.sampling.input import SamplerInput

N, E = 120, 900


def _write_inputs(folder, float_times: bool = False):
    """A directed graph with distinct (src, dst) pairs, edge and node times, features and labels, as files."""
    rng = np.random.default_rng(7)
    pairs = rng.choice(N * N, size=E, replace=False)
    src, dst = pairs // N, pairs % N
    edge_time = rng.integers(0, 1000, E)
    node_time = rng.integers(0, 1000, N)
    if float_times:
        edge_time, node_time = edge_time + 0.25, node_time + 0.5
    with open(folder / "edges.csv", "w") as f:
        f.write("src,dst,Stamp\n")
        f.writelines(f"{a},{b},{t}\n" for a, b, t in zip(src, dst, edge_time))
    np.save(folder / "node_time.npy", node_time)
    np.save(folder / "x.npy", rng.standard_normal((N, 6)).astype(np.float32))
    np.save(folder / "y.npy", rng.integers(0, 3, N))
    return {(int(a), int(b)): t for a, b, t in zip(src, dst, edge_time)}, node_time


def _drop_time_column(folder) -> None:
    lines = (folder / "edges.csv").read_text().splitlines()
    (folder / "edges.csv").write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")


def _preprocess(folder, out, *extra):
    return main(["preprocess", "--edges", str(folder / "edges.csv"), "--features", str(folder / "x.npy"),
                 "--labels", str(folder / "y.npy"), "--out", str(folder / out), "--quiet", *extra])


@pytest.mark.parametrize("reorder", ["none", "degree"])
def test_preprocess_stores_times_in_csc_order(tmp_path, capsys, reorder):
    edge_times, node_time = _write_inputs(tmp_path)
    assert _preprocess(tmp_path, "ds", "--node-time", str(tmp_path / "node_time.npy"),
                       "--edge-time-column", "stamp", "--reorder", reorder) == 0
    ds = load(tmp_path / "ds", verify=True)  # checksums of the time files too
    original = ds.original_ids.numpy() if ds.original_ids is not None else np.arange(N)
    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    assert ds.edge_time.dtype == torch.int64 and ds.node_time.dtype == torch.int64
    for v in range(N):  # every CSC edge carries the time its (src, dst) row has in the CSV
        for p in range(indptr[v], indptr[v + 1]):
            assert ds.edge_time[p].item() == edge_times[(int(original[indices[p]]), int(original[v]))]
    assert np.array_equal(ds.node_time.numpy(), node_time[original])
    assert ds.meta["node_time"] == {"_N": "node_time.npy"} and ds.meta["edge_types"][0]["time"] == "edge_time.npy"
    assert main(["info", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert f"times        node int64 in [{node_time.min()}, {node_time.max()}]  edge int64 in " \
           f"[{min(edge_times.values())}, {max(edge_times.values())}]" in out
    assert "node_time.npy" in ds.meta["files"] and "edge_time.npy" in ds.meta["files"]
    assert f"checksums    all {len(ds.meta['files'])} files OK" in out


def test_float_times_stay_float_and_a_dataset_without_times_has_none(tmp_path):
    edge_times, node_time = _write_inputs(tmp_path, float_times=True)
    assert _preprocess(tmp_path, "ds", "--node-time", str(tmp_path / "node_time.npy"), "--edge-time-column",
                       "Stamp") == 0
    ds = load(tmp_path / "ds")
    assert ds.edge_time.dtype == torch.float64 and sorted(ds.edge_time.tolist()) == sorted(edge_times.values())
    assert np.array_equal(ds.node_time.numpy(), node_time)
    _drop_time_column(tmp_path)
    assert _preprocess(tmp_path, "plain") == 0
    plain = load(tmp_path / "plain")
    assert plain.node_time is None and plain.edge_time is None and not plain.has_times


def _bad(tmp_path, capsys, edges_text: str | None = None, node_time=None, extra=("--edge-time-column", "stamp")):
    _write_inputs(tmp_path)
    if edges_text is not None:
        (tmp_path / "edges.csv").write_text(edges_text)
    if node_time is not None:
        np.save(tmp_path / "node_time.npy", node_time)
    code = _preprocess(tmp_path, "out", "--node-time", str(tmp_path / "node_time.npy"), *extra)
    err = capsys.readouterr().err.strip()
    assert code == 1 and not (tmp_path / "out").exists()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_nan_node_time_is_one_line_naming_the_row(tmp_path, capsys):
    times = np.arange(N, dtype=np.float64)
    times[17] = np.nan
    err = _bad(tmp_path, capsys, node_time=times)
    assert "node_time.npy: row 17: node time nan is not a finite number" in err


def test_unsigned_node_times_beyond_int64_are_refused_not_wrapped(tmp_path, capsys):
    """A uint64 time of 2**63 or 2**64 - 1 (a common "never") cannot be stored as int64 without turning negative."""
    for never in (2**63, 2**64 - 1):
        times = np.arange(N, dtype=np.uint64)
        times[5] = never
        err = _bad(tmp_path, capsys, node_time=times)
        assert f"node_time.npy: row 5: node time {never} does not fit in int64" in err
        (tmp_path / "node_time.csv").write_text("t\n" + "".join(f"{int(t)}\n" for t in times))
        assert _preprocess(tmp_path, "out", "--node-time", str(tmp_path / "node_time.csv"), "--edge-time-column",
                           "stamp") == 1
        assert f"node_time.csv: line 7: node time {never} does not fit in int64" in capsys.readouterr().err
    times = np.arange(N, dtype=np.uint64)
    times[5] = 2**63 - 1  # the largest int64 is kept exactly
    _write_inputs(tmp_path)
    np.save(tmp_path / "node_time.npy", times)
    assert _preprocess(tmp_path, "ok", "--node-time", str(tmp_path / "node_time.npy"), "--edge-time-column",
                       "stamp") == 0
    assert load(tmp_path / "ok").node_time[5].item() == 2**63 - 1


def test_integer_nanoseconds_with_one_float_are_refused_not_merged(tmp_path, capsys):
    """As float64, 1700000000000000001 and ...002 are one time: a column forced to floats by one value is refused
    where it holds an integer beyond 2**53, naming the file, column and row; below 2**53 floats are exact and kept."""
    text = "src,dst,stamp\n0,1,1700000000000000001\n1,2,1700000000000000002\n2,3,1.5\n"
    err = _bad(tmp_path, capsys, text)
    assert "edges.csv: line 2, column 'stamp': edge time 1700000000000000000 is beyond 2**53" in err
    _write_inputs(tmp_path)
    (tmp_path / "edges.csv").write_text("src,dst,stamp\n0,1,9007199254740992\n1,2,1.5\n")
    assert _preprocess(tmp_path, "ok", "--edge-time-column", "stamp") == 0
    assert sorted(load(tmp_path / "ok").edge_time.tolist()) == [1.5, 2.0**53]


def test_a_node_time_file_of_the_wrong_length_is_one_line(tmp_path, capsys):
    err = _bad(tmp_path, capsys, node_time=np.arange(N - 3))
    assert f"node_time.npy: has {N - 3} rows but" in err and "one row per node" in err


def test_a_non_numeric_or_empty_edge_time_is_one_line_naming_the_line(tmp_path, capsys):
    err = _bad(tmp_path, capsys, "src,dst,stamp\n0,1,5\n1,2,soon\n", extra=("--edge-time-column", "stamp"))
    assert "edges.csv: line 3, column 'stamp': 'soon' is not a number" in err
    err = _bad(tmp_path, capsys, "src,dst,stamp\n0,1,5\n1,2,\n", extra=("--edge-time-column", "stamp"))
    assert "edges.csv: line 3, column 'stamp': empty value" in err
    err = _bad(tmp_path, capsys, "src,dst,stamp\n0,1,5\n1,2,nan\n", extra=("--edge-time-column", "stamp"))
    assert "edges.csv: line 3: edge time nan is not a finite number" in err


def test_edge_times_with_merging_options_or_a_missing_column_are_refused(tmp_path, capsys):
    err = _bad(tmp_path, capsys, extra=("--edge-time-column", "stamp", "--undirected"))
    assert "edge times need every edge kept, but --undirected" in err
    err = _bad(tmp_path, capsys, extra=("--edge-time-column", "when"))
    assert "no column is named 'when'" in err
    err = _bad(tmp_path, capsys, extra=())  # the time column, but no --edge-time-column
    assert "pass --edge-time-column stamp if it holds edge times" in err


def _recorded_batches(monkeypatch):
    """Every (sampler, input, batch) the loaders' sample stage sees, in order."""
    seen = []
    call = sample_stage.Sample.__call__

    def record(self, inp):
        mb = call(self, inp)
        seen.append((self.sampler, inp, mb))
        return mb

    monkeypatch.setattr(sample_stage.Sample, "__call__", record)
    return seen


def _same_batch(a, b) -> bool:
    return (torch.equal(a.seeds, b.seeds) and torch.equal(a.input_nodes, b.input_nodes)
            and torch.equal(a.batch, b.batch) and len(a.blocks) == len(b.blocks)
            and all(torch.equal(x.edge_index, y.edge_index) and torch.equal(x.edge_ids, y.edge_ids)
                    and x.num_dst == y.num_dst for x, y in zip(a.blocks, b.blocks)))


@pytest.mark.parametrize("level", ["node", "edge"])
@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_train_temporal_batches_are_neighbor_sampler_s_and_never_reach_later_edges(tmp_path, monkeypatch, level,
                                                                                   strategy):
    edge_times, node_time = _write_inputs(tmp_path)
    extra = ["--edge-time-column", "stamp"] if level == "edge" else []
    if level == "node":
        _drop_time_column(tmp_path)
    assert _preprocess(tmp_path, "ds", "--node-time", str(tmp_path / "node_time.npy"), *extra) == 0
    seen = _recorded_batches(monkeypatch)
    fanout = [4, 3]
    assert main(["train", "--data", str(tmp_path / "ds"), "--temporal", "--temporal-strategy", strategy, "--epochs",
                 "1", "--batch-size", "16", "--fanout", "4,3", "--seed", "3", "--quiet", "--device", "cpu"]) == 0
    ds = load(tmp_path / "ds")
    samplers = list(dict.fromkeys(s for s, _, _ in seen))
    assert len(samplers) == 2  # training and (sampled) evaluation
    times = {"edge_time": ds.edge_time} if level == "edge" else {"node_time": ds.node_time}
    references = [NeighborSampler(ds.graph, fanout, seed=seed, temporal_strategy=strategy, **times)
                  for seed in (3, 4)]
    checked_edges = 0
    for sampler, inp, mb in seen:
        reference = references[samplers.index(sampler)]
        expected = reference.sample(SamplerInput(inp.seeds, key=inp.key, seed_time=ds.node_time[inp.seeds]))
        assert _same_batch(mb, expected)
        # brute force, from the input files: each sampled edge is a row of the CSV, no later than its seed's time
        nodes, seed_of = mb.input_nodes.numpy(), mb.batch.numpy()
        for block in mb.blocks:
            for (s, d) in block.edge_index.t().tolist():
                u, v = int(nodes[s]), int(nodes[d])
                assert (u, v) in edge_times
                seed = int(mb.seeds[seed_of[d]])
                when = edge_times[(u, v)] if level == "edge" else node_time[u]
                assert when <= node_time[seed]
                checked_edges += 1
    assert checked_edges > 100  # the rule was checked on real batches, not vacuously


def test_train_temporal_is_refused_without_times(tmp_path, capsys):
    _write_inputs(tmp_path)
    (tmp_path / "edges.csv").write_text("src,dst\n0,1\n1,2\n2,0\n")
    assert _preprocess(tmp_path, "plain") == 0
    code = main(["train", "--data", str(tmp_path / "plain"), "--temporal", "--epochs", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "--temporal:" in err and "stores no node or edge times" in err and "--node-time" in err


def test_from_pyg_keeps_node_and_edge_times(tmp_path):
    from torch_geometric.data import Data, HeteroData

    from sparsetrain.datasets.pyg import from_pyg

    g = torch.Generator().manual_seed(0)
    pairs = torch.randperm(N * N, generator=g)[:E]
    edge_index = torch.stack([pairs // N, pairs % N])
    data = Data(edge_index=edge_index, x=torch.randn(N, 3, generator=g), time=torch.randint(0, 99, (N,), generator=g),
                edge_time=torch.rand(E, generator=g, dtype=torch.float64))
    ds = from_pyg(data, tmp_path / "homo")
    by_pair = {(int(a), int(b)): float(t) for (a, b), t in zip(edge_index.t().tolist(), data.edge_time)}
    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    assert torch.equal(ds.node_time, data.time)
    assert all(ds.edge_time[p].item() == by_pair[(int(indices[p]), v)]
               for v in range(N) for p in range(indptr[v], indptr[v + 1]))

    hetero = HeteroData()
    hetero["paper"].x, hetero["paper"].time = torch.randn(30, 2, generator=g), torch.arange(30)
    hetero["author"].num_nodes = 20
    writes = torch.stack([torch.arange(40) % 20, torch.arange(40) % 30])
    hetero["author", "writes", "paper"].edge_index = writes
    hetero["author", "writes", "paper"].time = torch.arange(40) * 10
    typed = from_pyg(hetero, tmp_path / "typed", add_reverse=True)
    assert torch.equal(typed.node_time["paper"], torch.arange(30)) and "author" not in typed.node_time
    for et in (("author", "writes", "paper"), ("paper", "rev_writes", "author")):
        rel = typed.graph.relation(et)
        dst = torch.repeat_interleave(torch.arange(len(rel.indptr) - 1), torch.diff(rel.indptr))
        pairs = torch.stack([rel.indices.long(), dst]) if et[0] == "author" else torch.stack([dst, rel.indices.long()])
        expected = {(int(a), int(p)): 10 * i for i, (a, p) in enumerate(writes.t().tolist())}
        assert [typed.edge_time[et][k].item() for k in range(len(dst))] == \
            [expected[(int(a), int(p))] for a, p in pairs.t().tolist()]


def test_typed_preprocess_takes_node_times_per_type_and_trains_temporally(tmp_path, capsys):
    rng = np.random.default_rng(3)
    counts = {"paper": 60, "author": 40}
    with open(tmp_path / "writes.csv", "w") as f:
        f.write("src,dst,t\n")
        f.writelines(f"{a},{p},{rng.integers(0, 50)}\n" for a, p in zip(rng.integers(0, 40, 300),
                                                                      rng.integers(0, 60, 300)))
    with open(tmp_path / "cites.csv", "w") as f:
        f.write("src,dst,t\n")
        f.writelines(f"{a},{p},{rng.integers(0, 50)}\n" for a, p in zip(rng.integers(0, 60, 300),
                                                                      rng.integers(0, 60, 300)))
    for t, n in counts.items():
        np.save(tmp_path / f"{t}_x.npy", rng.standard_normal((n, 4)).astype(np.float32))
    np.save(tmp_path / "paper_y.npy", rng.integers(0, 3, 60))
    np.save(tmp_path / "paper_t.npy", rng.integers(0, 50, 60))
    args = ["preprocess", "--typed-edges", f"author,writes,paper={tmp_path / 'writes.csv'}",
            "--typed-edges", f"paper,cites,paper={tmp_path / 'cites.csv'}", "--edge-time-column", "t",
            "--node-features", f"paper={tmp_path / 'paper_x.npy'}", "--node-features",
            f"author={tmp_path / 'author_x.npy'}", "--node-labels", f"paper={tmp_path / 'paper_y.npy'}",
            "--node-time", f"paper={tmp_path / 'paper_t.npy'}", "--add-reverse", "--out", str(tmp_path / "ds"),
            "--quiet"]
    assert main(args) == 0
    ds = load(tmp_path / "ds", verify=True)
    assert list(ds.node_time) == ["paper"] and len(ds.edge_time) == 4  # reverse edge types keep their edges' times
    assert main(["info", str(tmp_path / "ds")]) == 0
    assert "node paper int64 in [" in capsys.readouterr().out
    assert main(["train", "--data", str(tmp_path / "ds"), "--temporal", "--epochs", "1", "--batch-size", "16",
                 "--fanout", "3,2", "--quiet", "--device", "cpu"]) == 0


def _resign(folder, name):
    """Record a changed file's sha256 in meta.json, as a careless tool would (``info`` still refuses the folder)."""
    import hashlib
    import json

    meta = json.loads((folder / "meta.json").read_text())
    meta["files"][name]["sha256"] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


@pytest.mark.parametrize("level", ["node", "edge"])
def test_train_temporal_refuses_non_finite_times_at_open_like_info(tmp_path, capsys, level):
    import json

    _write_inputs(tmp_path, float_times=True)
    assert _preprocess(tmp_path, "ds", "--node-time", str(tmp_path / "node_time.npy"), "--edge-time-column",
                       "Stamp") == 0
    folder = tmp_path / "ds"
    meta = json.loads((folder / "meta.json").read_text())
    name = next(iter(meta["node_time"].values())) if level == "node" else meta["edge_types"][0]["time"]
    times = np.load(folder / name)
    times[7] = np.nan
    np.save(folder / name, times)
    _resign(folder, name)
    capsys.readouterr()
    code = main(["train", "--data", str(folder), "--temporal", "--epochs", "1", "--quiet", "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{name}: entry 7 is nan, times must be finite" in err
    assert main(["info", str(folder)]) == 1 and f"{name}: entry 7 is nan" in capsys.readouterr().err


@pytest.mark.parametrize("first, then, says", [
    ([], ["--temporal"], "temporal: checkpoint False, this run True"),
    (["--temporal"], [], "temporal: checkpoint True, this run False"),
    (["--temporal"], ["--temporal", "--temporal-strategy", "last"],
     "temporal_strategy: checkpoint 'uniform', this run 'last'"),
])
def test_resume_refuses_temporal_turned_on_or_off_or_another_strategy(tmp_path, capsys, first, then, says):
    _write_inputs(tmp_path)
    assert _preprocess(tmp_path, "ds", "--node-time", str(tmp_path / "node_time.npy"), "--edge-time-column",
                       "stamp") == 0
    base = ["train", "--data", str(tmp_path / "ds"), "--batch-size", "32", "--fanout", "4,3", "--quiet", "--device",
            "cpu", "--checkpoint-dir", str(tmp_path / "ck")]
    assert main([*base, "--epochs", "1", *first]) == 0
    capsys.readouterr()
    assert main([*base, "--epochs", "2", "--resume", *then]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and "belongs to another run" in err, err
    assert main([*base, "--epochs", "2", "--resume", *first]) == 0  # the same run continues
