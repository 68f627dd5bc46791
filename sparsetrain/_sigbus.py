"""A SIGBUS in a memory-mapped read becomes one line naming the file, and exit status 1.

Reading a mapped page past the end of a file that was truncated after it was mapped raises
SIGBUS inside whatever native code touched it (a Numba gather, a torch copy). Checks between
steps (``MappedFile.check``, ``MmapFeatures.check_file``) catch most truncations, but a file can
shrink between the check and the read. Python's ``signal`` module cannot help: its handlers run
later, between bytecodes, and the faulting instruction would fault again first.

So every file sparsetrain maps is registered here with :func:`watch` (its address range and a
prepared message), and the first registration installs a native SIGBUS handler: a Numba
``cfunc`` that looks the fault address up in a fixed table and, for a registered range,
``write(2)``s that range's message and ``_exit(1)``s. It calls async-signal-safe functions only
and takes no lock (the GIL may be held by the faulting thread). A fault at an address outside
every registered range, or a SIGBUS sent by ``kill``, is not ours to label: the handler puts the
previous action back and returns, so the access faults again and the previous handler (Python's
``faulthandler``, a debugger, the default core dump with exit status 135) sees the real fault;
for a real fault it first writes one generic line saying so. Chaining, rather than one exit 1 for
every SIGBUS, keeps a genuine bug (or ``/dev/shm`` running full under a DataLoader) from being
reported as a truncated dataset file, and keeps its core dump.

Only on Linux x86-64 (the ``siginfo_t``/``struct sigaction`` layouts are written for it);
elsewhere :func:`watch` does nothing. ``SPARSETRAIN_SIGBUS_HANDLER=0`` in the environment
leaves SIGBUS alone (for a debugger or a core dump).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
from llvmlite import ir
from numba import cfunc, types
from numba.extending import intrinsic

SIGBUS = 7
SYMBOL = "sparsetrain_sigbus_state"
CAPACITY = 256  # mapped ranges at once; more are left unnamed (their faults take the generic path)
MESSAGE_BYTES = 1024

# the state table, int64 words: [claimed, capacity, message stride, -, previous sigaction (19 words)],
# then CAPACITY rows (start, end, message length), then CAPACITY messages and the generic one
_CLAIMED, _CAPACITY, _STRIDE = 0, 1, 2
_PREVIOUS = 4
_SIGACTION_WORDS = 19  # sizeof(struct sigaction) on x86-64 glibc: 152 bytes
_REGIONS = _PREVIOUS + _SIGACTION_WORDS
_MESSAGES = _REGIONS + 3 * CAPACITY
_GENERIC = CAPACITY

GENERIC_MESSAGE = (
    "error: bus error (SIGBUS) outside the files sparsetrain has memory-mapped; if a memory-mapped dataset file "
    "was truncated while in use, restore it and run again"
)
_GENERIC_LENGTH = len(GENERIC_MESSAGE.encode()) + 1  # with its newline


def supported() -> bool:
    """Whether the handler can be installed here: Linux x86-64, and not turned off by the environment."""
    return (
        sys.platform == "linux"
        and platform.machine() in ("x86_64", "AMD64")
        and os.environ.get("SPARSETRAIN_SIGBUS_HANDLER", "1") != "0"
    )


class _SigAction(ctypes.Structure):
    """glibc's ``struct sigaction`` on x86-64 (152 bytes)."""

    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


_SA_SIGINFO, _SA_ONSTACK = 0x4, 0x08000000
_lock = threading.Lock()
_state: np.ndarray | None = None
_handler = None  # the compiled cfunc, kept alive for the life of the process
_installed = False
_free: list[int] = []


def _table() -> np.ndarray:
    """The state table, allocated once; its address is what the handler's external symbol resolves to."""
    global _state
    if _state is None:
        import llvmlite.binding as llvm

        words = _MESSAGES + (CAPACITY + 1) * MESSAGE_BYTES // 8
        _state = np.zeros(words, dtype=np.int64)
        _state[_CAPACITY], _state[_STRIDE] = CAPACITY, MESSAGE_BYTES
        _put_message(_GENERIC, GENERIC_MESSAGE)
        _free.extend(range(CAPACITY - 1, -1, -1))
        llvm.add_symbol(SYMBOL, _state.ctypes.data)
    return _state


def _message_bytes(slot: int) -> np.ndarray:
    assert _state is not None
    start = _MESSAGES * 8 + slot * MESSAGE_BYTES
    return _state.view(np.uint8)[start : start + MESSAGE_BYTES]


def _put_message(slot: int, text: str) -> int:
    data = (text.rstrip("\n") + "\n").encode("utf-8", "replace")
    if len(data) > MESSAGE_BYTES:
        data = data[: MESSAGE_BYTES - 4] + b"...\n"
    _message_bytes(slot)[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return len(data)


def install() -> bool:
    """Install the handler (once per process; :func:`watch` calls it). False where :func:`supported` is not."""
    global _handler, _installed
    if not supported():
        return False
    with _lock:
        if _installed:
            return True
        state = _table()
        if _handler is None:
            _handler = cfunc(types.void(types.int32, types.intp, types.intp), cache=True)(_on_sigbus)
        new, old = _SigAction(), _SigAction()
        new.handler = _handler.address
        new.flags = _SA_SIGINFO | _SA_ONSTACK
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sigemptyset(ctypes.byref(new.mask))
        if libc.sigaction(SIGBUS, ctypes.byref(new), ctypes.byref(old)) != 0:
            return False
        ctypes.memmove(state.ctypes.data + _PREVIOUS * 8, ctypes.byref(old), ctypes.sizeof(old))
        state[_CLAIMED] = 0
        _installed = True
        return True


def uninstall() -> None:
    """Put back the action SIGBUS had before :func:`install` (registered ranges stay registered)."""
    global _installed
    with _lock:
        if not _installed:
            return
        assert _state is not None
        old = _SigAction()
        ctypes.memmove(ctypes.byref(old), _state.ctypes.data + _PREVIOUS * 8, ctypes.sizeof(old))
        ctypes.CDLL(None).sigaction(SIGBUS, ctypes.byref(old), None)
        _installed = False


def installed() -> bool:
    """Whether the handler is the process's SIGBUS action now (as far as this module knows)."""
    return _installed


def default_message(path: str | os.PathLike, fix: str = "restore it and run again") -> str:
    """The line written when a read of ``path``'s mapping faults."""
    cause = "was truncated or rewritten while in use, or its disk failed a read"
    return f"error: {path} {cause} (SIGBUS reading it); {fix}"


def _mapping_of(array) -> mmap.mmap | None:
    """The ``mmap`` object ``array``'s memory belongs to (through views, memoryviews, ``np.memmap``), or None."""
    owner = array
    while owner is not None and not isinstance(owner, mmap.mmap):
        owner = owner.obj if isinstance(owner, memoryview) else getattr(owner, "base", None)
    return owner


def watch(array: np.ndarray, path: str | os.PathLike, *, fix: str = "restore it and run again") -> bool:
    """Register the memory of ``array`` (a view of a file mapping) so a SIGBUS reading it names ``path``.

    Installs the handler on first use. The range is unregistered when its mapping is closed or freed. Does
    nothing (returns False) for an array that is not memory-mapped, an empty one, where the handler is not
    :func:`supported`, or when ``CAPACITY`` ranges are registered already (a fault there takes the generic path).
    """
    if not isinstance(array, np.ndarray) or array.nbytes == 0:
        return False
    mapping = _mapping_of(array)
    if mapping is None or not install():
        return False
    start = array.ctypes.data
    return register(start, start + array.nbytes, default_message(Path(path), fix), owner=mapping) is not None


def register(start: int, end: int, message: str, *, owner=None) -> int | None:
    """Register ``[start, end)`` with the line to write when a read there faults; returns its slot (None when the table
    is full). The range is released when ``owner`` (weakly held) is freed, or by :func:`unregister`."""
    with _lock:
        state = _table()
        if not _free:
            return None
        slot = _free.pop()
    length = _put_message(slot, message)
    row = _REGIONS + 3 * slot
    state[row + 2], state[row] = length, start
    state[row + 1] = end  # written last: a nonzero end makes the row visible to the handler
    if owner is not None:
        weakref.finalize(owner, unregister, slot)
    return slot


def unregister(slot: int) -> None:
    """Forget a registered range (its mapping is gone)."""
    assert _state is not None
    _state[_REGIONS + 3 * slot + 1] = 0
    with _lock:
        _free.append(slot)


def registered() -> list[tuple[int, int, str]]:
    """``(start, end, message)`` of every registered range (for tests and debugging)."""
    if _state is None:
        return []
    rows = []
    for slot in range(CAPACITY):
        start, end, length = (int(v) for v in _state[_REGIONS + 3 * slot : _REGIONS + 3 * slot + 3])
        if end:
            rows.append((start, end, bytes(_message_bytes(slot)[:length]).decode("utf-8", "replace").rstrip("\n")))
    return rows


# ---- the handler: native code only, async-signal-safe calls only -------------------------------------------------

_SI_CODE, _SI_ADDR = 8, 16  # offsets in siginfo_t (x86-64): si_code, and si_addr for SIGBUS/SIGSEGV
_BUS_ADRERR = 2  # si_code of a read past the end of a mapped file (BUS_ADRALN, BUS_MCEERR_* are other faults)
_write = types.ExternalFunction("write", types.intp(types.int32, types.intp, types.uintp))
_exit = types.ExternalFunction("_exit", types.void(types.int32))
_sigaction = types.ExternalFunction("sigaction", types.int32(types.int32, types.intp, types.intp))
_raise = types.ExternalFunction("raise", types.int32(types.int32))
_sched_yield = types.ExternalFunction("sched_yield", types.int32())


@intrinsic
def _state_address(typingctx):
    """Address of the state table: an external symbol bound by ``llvmlite.binding.add_symbol`` when the process
    allocates the table, so the compiled handler holds no address of its own and can be cached on disk."""

    def codegen(context, builder, signature, args):
        module = builder.module
        table = module.globals.get(SYMBOL) or ir.GlobalVariable(module, ir.IntType(64), SYMBOL)
        return builder.ptrtoint(table, ir.IntType(64))

    return types.intp(), codegen


def _loader(bits: int):
    @intrinsic
    def load(typingctx, address):
        def codegen(context, builder, signature, args):
            value = builder.load(builder.inttoptr(args[0], ir.IntType(bits).as_pointer()))
            return builder.sext(value, ir.IntType(64)) if bits < 64 else value

        return types.int64(types.intp), codegen

    return load


_load64 = _loader(64)
"""The int64 at an address."""
_load32 = _loader(32)
"""The int32 at an address, widened."""


@intrinsic
def _exchange(typingctx, address, value):
    """Atomically store ``value`` at ``address``; returns what was there (only one faulting thread writes a line)."""

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.atomic_rmw("xchg", pointer, args[1], "seq_cst")

    return types.int64(types.intp, types.int64), codegen


def _on_sigbus(signum, info, context):  # the sa_sigaction, compiled by install()
    state = _state_address()
    code = _load32(info + _SI_CODE)
    if code > 0:  # a fault; <= 0 is a signal sent by kill/raise, with no address
        found = _GENERIC
        if code == _BUS_ADRERR:  # a mapped page past the end of its file, or one its disk could not read
            address = _load64(info + _SI_ADDR)
            for slot in range(_load64(state + 8 * _CAPACITY)):
                row = state + 8 * (_REGIONS + 3 * slot)
                end = _load64(row + 8)
                if end != 0 and _load64(row) <= address and address < end:
                    found = slot
                    break
        claimed = state + 8 * _CLAIMED
        message = state + 8 * _MESSAGES + found * _load64(state + 8 * _STRIDE)
        if found != _GENERIC:
            while _exchange(claimed, 1) != 0:  # one line only: another faulting thread is writing and exiting
                _sched_yield()
            _write(2, message, _load64(state + 8 * (_REGIONS + 3 * found + 2)))
            _exit(1)
        if _exchange(claimed, 1) == 0:
            _write(2, message, _GENERIC_LENGTH)
            _exchange(claimed, 0)
    # not a registered range: put the previous action back and return; the access faults again and that action
    # (a debugger, faulthandler, the default core dump) sees the real fault
    _sigaction(SIGBUS, state + 8 * _PREVIOUS, 0)
    if code <= 0:
        _raise(SIGBUS)
