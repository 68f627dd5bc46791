"""Count the host waits a piece of torch code would make on a GPU, on any device (:class:`HostSyncs`).

On a CPU nothing waits, so the count is of the operations that wait on a GPU: a value read into Python
(``item``, ``bool``, ``int``, ``float``, ``tolist``, ``numpy``, ``cpu``) and the operators whose output size (or a
check) CUDA reads back before returning (``nonzero``, ``bincount``, ``unique``, ``masked_select``, boolean-mask
indexing, ``repeat_interleave`` without its size, ``equal``). Code that reads host memory a copy has already reached
(the late-read rings, :mod:`sparsetrain._late_reads`) is left out by where it runs. Torch's modes are per
thread: count a loader's work by running it in line (``prefetch=0``). On a GPU, ``torch.cuda.set_sync_debug_mode``
counts what the device really waited for (the GPU tests).
"""

from __future__ import annotations

import sys
import traceback
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"}
SIZED = {"nonzero", "bincount", "_unique", "_unique2", "unique_dim", "unique_consecutive", "masked_select",
         "equal", "is_nonzero"}
EXEMPT = ("sparsetrain/_late_reads.py",)


class HostSyncs:
    """``with HostSyncs() as syncs:`` counts (``syncs.count``, ``syncs.where``: a Counter of the sparsetrain line that
    asked) the would-be host waits of the code it runs in this thread; ``syncs.paused()`` leaves a part out."""

    def __init__(self, exempt: tuple[str, ...] = EXEMPT) -> None:
        self.exempt = exempt
        self.count = 0
        self.where: Counter = Counter()
        self._paused = 0
        counter = self

        class Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if getattr(func, "__name__", "") in READS:
                    counter._hit(func.__name__)
                return func(*args, **(kwargs or {}))

        class Dispatch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func._overloadpacket.__name__
                if name in SIZED or (name == "index" and _bool_index(args)) or \
                        (name == "repeat_interleave" and "output_size" not in (kwargs or {})):
                    counter._hit(name)
                return func(*args, **(kwargs or {}))

        self._modes = (Functions(), Dispatch())

    def _hit(self, what: str) -> None:
        if self._paused:
            return
        stack = traceback.extract_stack(sys._getframe(2))
        if any(e in f.filename for f in stack for e in self.exempt):
            return
        frames = [f for f in stack if "sparsetrain/" in f.filename and "/tests/" not in f.filename]
        self.count += 1
        at = frames[-1] if frames else None
        self.where[f"{what} at {at.filename.rsplit('sparsetrain/', 1)[-1]}:{at.lineno}" if at else what] += 1

    def paused(self):
        counter = self

        class _Pause:
            def __enter__(self):
                counter._paused += 1

            def __exit__(self, *exc):
                counter._paused -= 1

        return _Pause()

    def __enter__(self) -> HostSyncs:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())
