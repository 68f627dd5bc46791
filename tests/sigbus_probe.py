"""Reads a memory-mapped file after truncating it; run by tests/test_sigbus.py in a subprocess (the handler _exits).

    python sigbus_probe.py CASE FILE

Cases: ``watched`` (a ``_sigbus.watch``-ed np.memmap), ``gather`` (``MmapFeatures.gather`` on several Numba threads,
its size check skipped so the read races the truncation), ``unwatched`` (a plain mapping, handler installed),
``sent`` (``kill -BUS`` of itself, handler installed). Prints ``survived`` if the read returns.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

from sparsetrain import _sigbus


def main(case: str, path: str) -> None:
    if case == "watched":
        array = np.load(path, mmap_mode="r")
        _sigbus.watch(array, path)
        os.truncate(path, 4096)
        print(float(array[-1].sum()))
    elif case == "gather":
        import torch

        from sparsetrain.storage import MmapFeatures

        store = MmapFeatures(path)
        store.check_file = lambda: None  # the check that would answer first; the read must answer alone
        os.truncate(path, 4096)
        print(float(store.gather(torch.arange(store.num_rows - 1, -1, -1)).sum()))
    elif case == "unwatched":
        np.save(path + ".other.npy", np.ones(1 << 16))
        _sigbus.install()
        array = np.load(path + ".other.npy", mmap_mode="r")
        os.truncate(path + ".other.npy", 4096)
        print(float(array[-1]))
    elif case == "sent":
        _sigbus.install()
        os.kill(os.getpid(), signal.SIGBUS)
    print("survived")


if __name__ == "__main__":
    main(*sys.argv[1:])
