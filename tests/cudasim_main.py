"""The entry point the ``cudasim_*.py`` scripts share: run their ``check_*`` functions (all, or those named on the
command line) under Numba's CUDA simulator, in this process, and print one JSON line: name -> "ok" or the traceback.
The tests start a script in a subprocess with ``NUMBA_ENABLE_CUDASIM=1`` and read that line."""

from __future__ import annotations

import json
import sys
import traceback
import warnings


def run_checks(namespace: dict) -> None:
    """Run the ``check_*`` functions of a script's ``globals()``."""
    checks = {name: fn for name, fn in namespace.items() if name.startswith("check_")}
    warnings.filterwarnings("ignore")
    results = {}
    for name in sys.argv[1:] or checks:
        try:
            checks[name]()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    print(json.dumps(results))
