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


TYPED_RENAMES = [  # (module, old, module of the new name, new): issue 32, "typed" is sparsetrain's name
    ("sparsetrain.datasets", "synthesize_hetero", "sparsetrain.datasets", "synthesize_typed"),
    ("sparsetrain.datasets.files", "from_files_hetero", "sparsetrain.datasets.files", "from_files_typed"),
    ("sparsetrain.datasets.ogb_folder", "from_ogb_hetero", "sparsetrain.datasets.ogb_folder", "from_ogb_typed"),
    ("sparsetrain.datasets.pyg", "from_pyg_hetero", "sparsetrain.datasets.pyg", "from_pyg_typed"),
]


@pytest.mark.parametrize(("module", "old", "home", "new"), TYPED_RENAMES)
def test_hetero_names_warn_and_are_the_typed_ones(module, old, home, new):
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(module)}\.{old} is deprecated: it was renamed {re.escape(home)}\.{new}"):
        value = getattr(importlib.import_module(module), old)
    assert value is getattr(importlib.import_module(home), new)
    assert old not in getattr(importlib.import_module(module), "__all__", ())


def test_old_synth_module_warns_on_import_and_resolves_to_the_typed_one():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    import sparsetrain.datasets.synth_hetero\nexcept DeprecationWarning as w:\n    print(w)\n"
            "warnings.simplefilter('ignore')\n"
            "import sparsetrain.datasets.synth_hetero as old, sparsetrain.datasets.synth_typed as new\n"
            "assert old.synthesize_hetero is new.synthesize_typed and old.MAG_NODES is new.MAG_NODES\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sparsetrain.datasets.synth_hetero is deprecated: the module was renamed sparsetrain.datasets.synth_typed" in done.stdout


def test_synth_hetero_flag_is_a_hidden_alias_of_typed_that_warns_in_one_line(tmp_path, capsys):
    from sparsetrain.cli import build_parser, main

    assert "--hetero" not in build_parser()._subparsers._group_actions[0].choices["synth"].format_help()
    with pytest.warns(DeprecationWarning, match=r"sparsetrain synth --hetero is deprecated: use --typed"):
        assert main(["synth", "--hetero", "--nodes", "5", "--out", str(tmp_path / "x")]) == 1
    assert "--typed sizes the graph with --scale" in capsys.readouterr().err
    args = build_parser().parse_args(["synth", "--typed", "--out", str(tmp_path / "y")])
    assert args.typed and not hasattr(args, "hetero")
    assert not build_parser().parse_args(["synth", "--nodes", "4", "--edges", "4", "--out", str(tmp_path / "z")]).typed
    code = "from sparsetrain.cli import main; main(['synth', '--hetero', '--nodes', '5', '--out', 'unused'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    warning = [line for line in done.stderr.splitlines() if "deprecated" in line]
    assert warning == ["warning: sparsetrain synth --hetero is deprecated: use --typed (the old flag goes away in the next release)"]
