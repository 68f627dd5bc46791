import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PLANETOID = Path(__file__).resolve().parents[2] / "shared" / "data" / "planetoid"
if not PLANETOID.is_dir():
    PLANETOID = Path(os.environ.get("SPARSETRAIN_PLANETOID", "/work/shared/data/planetoid"))


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def cora_data(tmp_path_factory):
    """PyG's Planetoid Cora, read offline from the shared raw files."""
    if not PLANETOID.is_dir():
        pytest.skip("Planetoid Cora raw files not found (set SPARSETRAIN_PLANETOID)")
    from torch_geometric.datasets import Planetoid

    root = tmp_path_factory.mktemp("planetoid")
    shutil.copytree(PLANETOID, root / "Cora" / "raw")
    return Planetoid(str(root), "Cora")[0]


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: returns (exit code, stdout, stderr)."""
    from sparsetrain.cli import main

    def run(*argv):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse errors
            code = exc.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def run_module(*argv, **kwargs) -> subprocess.CompletedProcess:
    """``python -m sparsetrain ...`` in a subprocess (what a user's shell sees)."""
    return subprocess.run([sys.executable, "-m", "sparsetrain", *map(str, argv)], capture_output=True, text=True, **kwargs)
