"""Models, the graph transformer and ClusterSampler moved out of ``sparsetrain.engine``; the old names
still resolve to the same objects for one release, with a DeprecationWarning naming the new home."""

import importlib
import re
import subprocess
import sys

import pytest
import torch

import sparsetrain.engine

NEW_HOMES = {
    "GraphSAGE": "sparsetrain.nn", "GCN": "sparsetrain.nn", "GAT": "sparsetrain.nn", "BlockGNN": "sparsetrain.nn",
    "block_adj_t": "sparsetrain.nn.models", "GraphTransformer": "sparsetrain.nn", "Packing": "sparsetrain.nn",
    "cluster_attention": "sparsetrain.nn", "edge_attention": "sparsetrain.nn", "linear_attention": "sparsetrain.nn",
    "SequenceShards": "sparsetrain.nn", "SequenceParallelError": "sparsetrain.nn", "head_to_seq": "sparsetrain.nn",
    "seq_to_head": "sparsetrain.nn", "ClusterSampler": "sparsetrain.sampling", "BatchClusters": "sparsetrain.sampling",
    "ClusteredMiniBatch": "sparsetrain.sampling", "load_clusters": "sparsetrain.datasets",
}


@pytest.mark.parametrize("name", sorted(NEW_HOMES))
def test_old_engine_name_warns_and_is_the_moved_object(name):
    home = NEW_HOMES[name]
    with pytest.warns(DeprecationWarning, match=re.escape(f"sparsetrain.engine.{name} is deprecated: it moved to {home}.{name}")):
        old = getattr(sparsetrain.engine, name)
    assert old is getattr(importlib.import_module(home), name)


def test_every_moved_name_is_covered_and_unknown_names_still_fail():
    assert set(sparsetrain.engine._MOVED) == set(NEW_HOMES)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchModel'"):
        sparsetrain.engine.NoSuchModel  # noqa: B018
    assert not set(NEW_HOMES) & set(sparsetrain.engine.__all__)


def test_from_import_of_an_old_name_warns():
    with pytest.warns(DeprecationWarning, match="import it from sparsetrain.nn"):
        from sparsetrain.engine import GraphSAGE
    from sparsetrain.nn import GraphSAGE as new

    assert GraphSAGE is new


def test_new_locations_import_without_deprecation_warnings():
    code = "import sparsetrain as st, sparsetrain.engine, sparsetrain.nn, sparsetrain.sampling, sparsetrain.datasets; st.nn.GraphTransformer"
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


TYPED_TWINS = {"HeteroGraph": "CSCGraph", "HeteroNeighborSampler": "NeighborSampler", "HeteroMiniBatch": "MiniBatch", "HeteroBlock": "Block"}


@pytest.mark.parametrize("old", sorted(TYPED_TWINS))
def test_typed_twin_names_warn_and_build_the_one_class(old):
    import sparsetrain.sampling as sampling

    with pytest.warns(DeprecationWarning, match=rf"sparsetrain\.sampling\.{old} is deprecated: use sparsetrain\.sampling\.{TYPED_TWINS[old]}"):
        alias = getattr(sampling, old)
    assert old not in sampling.__all__
    for module in ("hetero", "hetero_graph", "hetero_minibatch", "hetero_kernels"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"sparsetrain.sampling.{module}")
    edges = {("a", "r", "b"): torch.tensor([[0, 1, 2], [1, 1, 0]]), ("b", "s", "a"): torch.tensor([[1, 0], [2, 2]])}
    graph = sampling.CSCGraph.from_edge_index_dict(edges, {"a": 3, "b": 2})
    homogeneous = sampling.CSCGraph.from_edge_index(torch.tensor([[0, 1], [1, 0]]))
    if old == "HeteroGraph":
        rebuilt = alias({"a": 3, "b": 2}, dict(graph.edges), {et: graph.relation(et).edge_perm for et in edges})
        assert isinstance(rebuilt, sampling.CSCGraph) and isinstance(rebuilt, alias) and not isinstance(homogeneous, alias)
        assert torch.equal(rebuilt.indices, graph.indices) and torch.equal(rebuilt.edge_perm, graph.edge_perm)
        return
    with pytest.warns(DeprecationWarning):
        sampler = sampling.HeteroNeighborSampler(graph, [-1], seed_type="b", hops="pyg", seed=0)
    assert isinstance(sampler, sampling.NeighborSampler) and sampler.hop_nodes == "new"
    mb = sampler.sample(torch.tensor([0, 1]))
    plain = sampling.NeighborSampler(homogeneous, [-1], seed=0).sample(torch.tensor([0]))
    obj, other = {"HeteroNeighborSampler": (sampler, sampling.NeighborSampler(homogeneous, [1])), "HeteroMiniBatch": (mb, plain),
                  "HeteroBlock": (mb.blocks[0], plain.blocks[0])}[old]
    assert isinstance(obj, alias) and not isinstance(other, alias)
    assert sorted(mb.blocks[0].edge_index) == sorted(edges) and sorted(mb.input_nodes["a"].tolist()) == [0, 1, 2]


def test_the_datasets_twin_and_old_names_are_gone(tmp_path, capsys):
    """Issue 38: one importer per source, one synthesizer entry; the 0.1.0 aliases are deleted, not kept."""
    from sparsetrain.cli import main

    for module, names in {"sparsetrain.datasets": ["synthesize_typed", "synthesize_hetero", "HeteroGraphDataset",
                                                   "BuildOptions", "FORMAT_VERSION", "verify_checksums"],
                          "sparsetrain.datasets.files": ["from_files_typed", "from_files_hetero"],
                          "sparsetrain.datasets.ogb_folder": ["from_ogb_typed", "from_ogb_hetero"],
                          "sparsetrain.datasets.pyg": ["from_pyg_typed", "from_pyg_hetero"]}.items():
        for name in names:
            assert not hasattr(importlib.import_module(module), name), f"{module}.{name}"
    for module in ("synth_hetero", "synth_typed"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"sparsetrain.datasets.{module}")
    assert main(["synth", "--hetero", "--out", str(tmp_path / "x")]) != 0
    assert "unrecognized arguments: --hetero" in capsys.readouterr().err
