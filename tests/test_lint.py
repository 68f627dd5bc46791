"""The conventions the code states are checked: `ruff check` with the repository's ruff.toml is clean on the package,
the tests, the benchmarks and the example scripts (one line rule and one import order for all of them)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str] | None:
    try:
        import ruff  # noqa: F401  (the dev extra installs it)
    except ImportError:
        return [shutil.which("ruff")] if shutil.which("ruff") else None
    return [sys.executable, "-m", "ruff"]


@pytest.mark.parametrize("tree", ["sparsetrain", "tests", "benchmarks", "examples"])
def test_the_tree_passes_ruff(tree):
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' brings it)")
    proc = subprocess.run([*ruff, "check", "--no-cache", "--output-format", "concise", tree], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff check {tree} found problems:\n{proc.stdout}{proc.stderr}"
