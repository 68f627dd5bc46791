"""The release step: a wheel built from the tracked files installs into a fresh environment and carries Cora."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # (a wheel build and a venv: 1-3 min)
def test_a_built_wheel_installs_in_a_fresh_venv_and_loads_the_packaged_cora(tmp_path):
    try:
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell the tracked files")
    source = tmp_path / "clone"  # built from the tracked files only: no build/ or egg-info lands in the checkout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    # --no-build-isolation: the installed setuptools builds it (nothing is downloaded)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist",
                    "."], cwd=source, check=True, capture_output=True, env=env, timeout=600)
    wheel = next((tmp_path / "dist").glob("sparsetrain-*.whl"))

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True, timeout=300)
    python = venv / "bin" / "python"
    # torch, numba, PyG...: this interpreter's packages after the venv's own (paths only: .pth files there, such as an
    # editable sparsetrain's, are not run), so the wheel's sparsetrain is the one imported
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                         capture_output=True, text=True).stdout.strip()
    parent = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(own) / "zz_parent_packages.pth").write_text("".join(f"{p}\n" for p in sorted(parent)))
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", wheel], check=True, capture_output=True,
                   env=env, timeout=300)
    code = ("import sparsetrain, sparsetrain.datasets.builtin as b; d = b.planetoid_data('cora'); "
            "print(sparsetrain.__file__); print(d.num_nodes, d.num_edges, d.x.shape[1], int(d.y.max()) + 1, "
            "int(d.train_mask.sum()), int(d.test_mask.sum()))")
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    where, counts = result.stdout.split("\n")[:2]
    assert where.startswith(own), where  # the installed wheel, not the checkout
    assert counts.split() == ["2708", "10556", "1433", "7", "140", "1000"]
    version = subprocess.run([venv / "bin" / "sparsetrain", "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and version.stdout.startswith("sparsetrain "), version.stderr
