"""The public surface: the top-level nouns resolve lazily, subpackage ``__all__``s hold public API, moved names warn."""

import importlib
import subprocess
import sys

import pytest

import sparsetrain as st

README_NOUNS = [
    "load", "from_pyg", "synthesize", "CSCGraph", "NeighborSampler", "MiniBatch", "Loader", "FeatureSource",
    "TensorFeatures", "MmapFeatures", "PinnedFeatures", "CachedFeatures", "ShardedFeatures", "Trainer", "fit",
    "MoE", "FSSDP", "GraphSAGE", "GCN", "GAT", "GraphTransformer", "sparse_all_gather", "sparse_reduce_scatter",
]  # fmt: skip
SUBPACKAGES = ["datasets", "storage", "sampling", "collective", "moe", "engine", "pyg", "dgl"]


def test_every_top_level_name_resolves_to_its_subpackage_object():
    assert set(README_NOUNS) | set(SUBPACKAGES) <= set(st.__all__)
    assert set(st.__all__) <= set(dir(st))
    for name in st.__all__:
        assert getattr(st, name) is not None, name
    for name in SUBPACKAGES:
        assert getattr(st, name) is importlib.import_module(f"sparsetrain.{name}")
    for name in README_NOUNS:
        owner = st._NOUNS[name]
        assert getattr(st, name) is getattr(importlib.import_module(f"sparsetrain.{owner}"), name), name
    with pytest.raises(AttributeError, match="no attribute 'plan_dispatch'"):
        st.plan_dispatch


def test_import_sparsetrain_imports_no_subpackage():
    code = (
        "import sys, sparsetrain as st; st.__version__; dir(st); "
        "print(sorted(m for m in sys.modules if m.startswith('sparsetrain.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['sparsetrain._version']"


@pytest.mark.parametrize("package", ["storage", "datasets", "moe"])
def test_subpackage_all_is_what_it_exports(package):
    module = importlib.import_module(f"sparsetrain.{package}")
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert not name.startswith("_") and getattr(module, name) is not None


@pytest.mark.parametrize(
    ("package", "names"),
    [
        ("datasets", ["GraphDataset", "synthesize", "from_pyg", "from_files", "from_ogb", "from_igb"]),
        ("sampling", ["EdgeType", "CSCGraph", "NeighborSampler", "MiniBatch", "Block"]),
        ("nn", ["RGCN"]),
    ],
)
def test_typed_graph_names_are_public(package, names):
    module = importlib.import_module(f"sparsetrain.{package}")
    for name in names:
        assert name in module.__all__ and getattr(module, name) is not None, name


def test_link_prediction_names():
    import sparsetrain.nn
    import sparsetrain.pyg
    import sparsetrain.sampling

    for name in ("EdgeSamplerInput", "EdgeSeeds", "LinkMiniBatch", "LinkNeighborSampler", "NegativeSampler"):
        assert name in sparsetrain.sampling.__all__ and getattr(sparsetrain.sampling, name) is not None
    for name in ("LinkPredictor", "DotDecoder", "MLPDecoder"):
        assert name in sparsetrain.nn.__all__
    assert "LinkNeighborLoader" in sparsetrain.pyg.__all__
