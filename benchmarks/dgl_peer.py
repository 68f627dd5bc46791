"""The DGL peer of a benchmark: the same script re-run with ``--peer dgl`` under the DGL environment's python.

DGL 2.1 loads only with torch 2.2.1, so it cannot share a process with this project's torch; the
benchmark passes its settings as flags and reads back the JSON object the peer prints as its last line.
The DGL environment is the one ``.ci/run`` builds, or the python named by ``$SPARSETRAIN_DGL_PYTHON``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from peers import dgl_missing, say_missing

REPO = Path(__file__).resolve().parent.parent
DGL_PYTHON = os.environ.get("SPARSETRAIN_DGL_PYTHON", str(REPO / ".ci" / "venv-dgl" / "bin" / "python"))


def add_peer_flag(parser: argparse.ArgumentParser) -> None:
    """The hidden ``--peer dgl`` flag: set, the script runs as the DGL peer instead of the comparison."""
    parser.add_argument("--peer", choices=["dgl"], help=argparse.SUPPRESS)


def peer_threads() -> int:
    """The thread count ``run_in_dgl_env`` gave this peer process (2 when run by hand)."""
    return int(os.environ.get("SPARSETRAIN_PEER_THREADS", "2"))


def run_json(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Run ``cmd``; the JSON object on its last stdout line, or ``{"error": its last stderr line}`` if it failed."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_in_dgl_env(script: str | Path, args: list, threads: int) -> dict:
    """Run ``script --peer dgl *args`` in the DGL environment on ``threads`` OpenMP/torch threads.

    Returns the peer's JSON object, or ``{"error": ...}`` when the DGL environment is missing or the peer failed.
    The peer imports sparsetrain from this checkout.
    """
    why = dgl_missing(DGL_PYTHON)
    if why is not None:
        return say_missing("DGL", why)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), SPARSETRAIN_PEER_THREADS=str(threads), PYTHONPATH=str(REPO))
    return run_json([DGL_PYTHON, str(Path(script).resolve()), "--peer", "dgl", *map(str, args)], env)
