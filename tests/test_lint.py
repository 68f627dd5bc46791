"""The conventions the code states are checked: `ruff check sparsetrain` with the repository's ruff.toml is clean."""

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


def test_the_package_passes_ruff():
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' brings it)")
    proc = subprocess.run([*ruff, "check", "--no-cache", "--output-format", "concise", "sparsetrain"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff check sparsetrain found problems:\n{proc.stdout}{proc.stderr}"
