"""Fixtures PyG's vendored tests take (PyG keeps them in its own test/conftest.py); only what these files use."""

import os

import pytest


@pytest.fixture(scope="session")
def get_dataset():
    """``get_dataset(name=...)``: the datasets these tests load; KarateClub is built into PyG (nothing downloads)."""

    def load(name: str, *args, **kwargs):
        if name.lower() != "karate":
            raise ValueError(f"the vendored PyG tests only load 'karate', not {name!r}")
        from torch_geometric.datasets import KarateClub

        return KarateClub(*args, **kwargs)

    return load


# The harness's two lists. Regenerate them by running this folder twice: with SPARSETRAIN_CONTRACT_PEER=pyg (PyG's own
# classes) and without (sparsetrain's); a test that starts passing with sparsetrain fails here (strict xfail) until it
# leaves KNOWN_GAPS, so the list only shrinks.
FAILS_WITH_PYG_HERE = {  # PyG's own loaders/sampler fail these in this environment (torch-sparse, no pyg-lib)
    "test_sampler_neighbor_sampler.py::test_bidirectional_neighbor_sampler[data]",
    "test_sampler_neighbor_sampler.py::test_bidirectional_neighbor_sampler[remote]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_basic[data]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_basic[remote]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_temporal_backwards[edge_attr-data]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_temporal_backwards[edge_attr-remote]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_temporal_backwards[time-data]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_temporal_backwards[time-remote]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_weighted_backwards[data]",
}
KNOWN_GAPS = {  # pass with PyG, not yet with sparsetrain.pyg (issue 27)
    "test_link_neighbor_loader.py::test_custom_hetero_link_neighbor_loader",
    "test_link_neighbor_loader.py::test_hetero_link_neighbor_loader_basic[1.0-bidirectional]",
    "test_link_neighbor_loader.py::test_hetero_link_neighbor_loader_basic[1.0-directional]",
    "test_link_neighbor_loader.py::test_hetero_link_neighbor_loader_basic[None-bidirectional]",
    "test_link_neighbor_loader.py::test_hetero_link_neighbor_loader_basic[None-directional]",
    "test_link_neighbor_loader.py::test_hetero_link_neighbor_loader_loop[bidirectional]",
    "test_link_neighbor_loader.py::test_hetero_link_neighbor_loader_loop[directional]",
    "test_link_neighbor_loader.py::test_hetero_link_neighbor_loader_no_edges",
    "test_link_neighbor_loader.py::test_homo_link_neighbor_loader_basic[False-1.0-bidirectional-cpu]",
    "test_link_neighbor_loader.py::test_homo_link_neighbor_loader_basic[False-None-bidirectional-cpu]",
    "test_link_neighbor_loader.py::test_homo_link_neighbor_loader_basic[None-1.0-bidirectional-cpu]",
    "test_link_neighbor_loader.py::test_homo_link_neighbor_loader_basic[None-None-bidirectional-cpu]",
    "test_link_neighbor_loader.py::test_homo_link_neighbor_loader_basic[True-1.0-bidirectional-cpu]",
    "test_link_neighbor_loader.py::test_homo_link_neighbor_loader_basic[True-None-bidirectional-cpu]",
    "test_link_neighbor_loader.py::test_homo_link_neighbor_loader_no_edges",
    "test_neighbor_loader.py::test_custom_hetero_neighbor_loader",
    "test_neighbor_loader.py::test_custom_hetero_neighbor_loader_duplicate",
    "test_neighbor_loader.py::test_hetero_neighbor_loader_basic[bidirectional-int64]",
    "test_neighbor_loader.py::test_hetero_neighbor_loader_basic[induced-int64]",
    "test_neighbor_loader.py::test_hetero_neighbor_loader_on_karate[bidirectional]",
    "test_neighbor_loader.py::test_hetero_neighbor_loader_on_karate[induced]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_basic[auto_filter-bidirectional-int64-cpu]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_basic[auto_filter-induced-int64-cpu]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_basic[filter_in_main-bidirectional-int64-cpu]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_basic[filter_in_main-induced-int64-cpu]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_basic[filter_per_worker-bidirectional-int64-cpu]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_basic[filter_per_worker-induced-int64-cpu]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_on_karate[bidirectional]",
    "test_neighbor_loader.py::test_homo_neighbor_loader_on_karate[induced]",
    "test_sampler_neighbor_sampler.py::test_heterogeneous_neighbor_sampler_backwards[data]",
    "test_sampler_neighbor_sampler.py::test_heterogeneous_neighbor_sampler_backwards[remote]",
    "test_sampler_neighbor_sampler.py::test_heterogeneous_neighbor_sampler_basic[remote]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_backwards[data]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_backwards[remote]",
    "test_sampler_neighbor_sampler.py::test_homogeneous_neighbor_sampler_weighted_backwards[remote]",
    "test_sampler_neighbor_sampler.py::test_neighbor_sampler_backwards_not_supported[False-data]",
    "test_sampler_neighbor_sampler.py::test_neighbor_sampler_backwards_not_supported[False-remote]",
    "test_sampler_neighbor_sampler.py::test_neighbor_sampler_backwards_not_supported[True-data]",
    "test_sampler_neighbor_sampler.py::test_neighbor_sampler_backwards_not_supported[True-remote]",
}


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SPARSETRAIN_CONTRACT_PEER") == "pyg":
        return
    for item in items:
        name = item.nodeid.split("pyg_contract/", 1)[-1]
        if name in FAILS_WITH_PYG_HERE:
            item.add_marker(pytest.mark.skip(reason="fails with PyG itself in this environment (needs pyg-lib)"))
        elif name in KNOWN_GAPS:
            item.add_marker(pytest.mark.xfail(strict=True, reason="not yet supported by sparsetrain.pyg (issue 27)"))
