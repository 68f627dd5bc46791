import subprocess
import sys

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        # (the marker itself: ``item.keywords`` also holds the names of the folders above, e.g. a checkout named gpu)
        if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


def pytest_runtest_setup(item):
    """A test marked ``pyg_sampler`` (tests/pyg_backend.py) skips without PyG's compiled sampler, or fails when
    SPARSETRAIN_REQUIRE_PYG_SAMPLER is set (CI installs the wheels, so a skip there would hide a broken install)."""
    marker = item.get_closest_marker("pyg_sampler")
    if marker is None:
        return
    from tests import pyg_backend

    missing = pyg_backend.missing_backend(marker)
    if missing is None:
        return
    if pyg_backend.REQUIRED:
        pytest.fail(f"{missing} does not load, and SPARSETRAIN_REQUIRE_PYG_SAMPLER is set: {pyg_backend.HINT}")
    pytest.skip(f"needs {missing}: {pyg_backend.HINT}")


@pytest.fixture(scope="session")
def cora_data():
    """PyG's Planetoid Cora (public split), read offline from the raw files shipped in the package."""
    from sparsetrain.datasets.builtin import planetoid_data

    return planetoid_data("cora")


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    from sparsetrain.cli import main

    def run(*argv):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # --help, --version
            code = exc.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def run_module(*argv, **kwargs) -> subprocess.CompletedProcess:
    """``python -m sparsetrain ...`` in a subprocess (what a user's shell sees)."""
    return subprocess.run(
        [sys.executable, "-m", "sparsetrain", *map(str, argv)], capture_output=True, text=True, **kwargs
    )
