"""Two checkouts timed in one run: a persistent worker process per tree (``PYTHONPATH``), driven in alternating rounds
(the order flips every round) so both see the same machine load. Shared by ``tree_ab.py`` and ``sampler_ab.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def alternate(worker: str, argv: list[str], trees: dict[str, Path], rounds: int) -> dict[str, list[dict]]:
    """Run ``python -c worker *argv`` once per tree; each round writes ``go`` to every worker and reads one JSON line
    back. Returns the rounds' records per tree name."""
    workers = {}
    for name, root in trees.items():
        env = dict(os.environ, PYTHONPATH=str(Path(root).resolve()))
        workers[name] = subprocess.Popen([sys.executable, "-c", worker, *argv], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env=env, cwd="/")
    records = {name: [] for name in workers}
    for r in range(rounds):
        for name, proc in (list(workers.items()) if r % 2 == 0 else list(workers.items())[::-1]):
            proc.stdin.write("go\n")
            proc.stdin.flush()
            records[name].append(json.loads(proc.stdout.readline()))
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    return records
