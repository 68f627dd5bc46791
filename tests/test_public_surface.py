"""The public surface: the top-level nouns resolve lazily, subpackage ``__all__``s hold public API, moved names warn."""

import importlib
import subprocess
import sys
import warnings

import pytest

import sparsetrain as st

README_NOUNS = [
    "load", "from_pyg", "synthesize", "CSCGraph", "NeighborSampler", "MiniBatch", "Loader", "FeatureSource",
    "TensorFeatures", "MmapFeatures", "PinnedFeatures", "CachedFeatures", "ShardedFeatures", "Trainer", "fit",
    "MoE", "FSSDP", "GraphSAGE", "GCN", "GAT", "GraphTransformer", "sparse_all_gather", "sparse_reduce_scatter",
]  # fmt: skip
SUBPACKAGES = ["datasets", "storage", "sampling", "collective", "moe", "engine", "pyg"]


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
    assert not set(module.__all__) & set(getattr(module, "_MOVED", {}))


@pytest.mark.parametrize(
    ("package", "name", "module"),
    [
        ("storage", "access_counts", "sparsetrain.storage.policies"),
        ("storage", "belady_hit_rate", "sparsetrain.storage.belady"),
        ("moe", "plan_dispatch", "sparsetrain.moe.dispatch"),
        ("moe", "LoadWindow", "sparsetrain.moe.placement"),
    ],
)
def test_names_that_left_a_package_still_resolve_with_a_warning(package, name, module):
    with pytest.warns(DeprecationWarning, match=rf"sparsetrain\.{package}\.{name} is deprecated.*import it from {module}"):
        value = getattr(importlib.import_module(f"sparsetrain.{package}"), name)
    assert value is getattr(importlib.import_module(module), name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
            getattr(importlib.import_module(f"sparsetrain.{package}"), "no_such_name")


@pytest.mark.parametrize(
    ("module", "old", "new_home"),
    [
        ("sparsetrain", "FeatureStore", "sparsetrain.storage"),
        ("sparsetrain.storage", "FeatureStore", "sparsetrain.storage"),
        ("sparsetrain.storage.base", "FeatureStore", "sparsetrain.storage"),
        ("sparsetrain.storage", "as_feature_store", "sparsetrain.storage.cache"),
    ],
)
def test_renamed_names_still_resolve_with_a_warning_naming_the_new_name(module, old, new_home):
    new = {"FeatureStore": "FeatureSource", "as_feature_store": "as_feature_source"}[old]
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated: it was renamed {new_home}\.{new}"):
        value = getattr(importlib.import_module(module), old)
    assert value is getattr(importlib.import_module(new_home), new)


@pytest.mark.parametrize(
    ("package", "names"),
    [
        ("datasets", ["GraphDataset", "synthesize", "from_pyg", "from_files", "from_ogb"]),
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
