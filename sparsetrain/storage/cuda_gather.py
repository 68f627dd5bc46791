"""Zero-copy GPU gather (numba.cuda): device threads read the requested rows straight from mapped host memory.

Thread ``g`` copies word ``g % W`` of sorted row ``g // W`` (``W`` words per row), so a warp reads
consecutive words of consecutive rows: every request over PCIe is a full, aligned line and the
rows are visited in address order (ids sorted first). Rows whose width allows only words narrower than
8 bytes (188 bytes: 47 float32) are read by :func:`aligned_gather_kernel` instead: a warp a row, 8-byte
loads aligned to 8 bytes over the row's span, several rows' loads in flight before their stores.
The word is the widest of 16/8/4/2/1 bytes that divides the row and both base addresses; 16-byte
words are moved as ``complex128`` (one vector load/store, bits untouched). The kernel checks each
id against the table: an id outside it is not read, its row is zeroed and the id is written to a
word of mapped host memory, which the host reads at its next call, without waiting for the device.

Around the kernel, :class:`ZeroCopyGather` (one per store) queues a sort and the kernel and nothing
else: the kernel views are made once, the sort's outputs are kept buffers, host ids go up through a
kept pinned buffer, and every allocation, copy, launch and host wait it makes is counted
(:class:`~sparsetrain._launch_counts.LaunchCounts`), on a GPU (:class:`TorchOps`) as under the Numba CUDA simulator
(:class:`NumpyOps`, ``NUMBA_ENABLE_CUDASIM=1``). Import this module only when one of them is in use.
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np
import torch
from numba import uint64

from sparsetrain._launch_counts import LaunchCounts
from sparsetrain._numba_cuda import cuda
from sparsetrain.storage.base import id_range_error

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 65535
WORD_TYPESTR = {16: "<c16", 8: "<u8", 4: "<u4", 2: "<u2", 1: "|u1"}
MIN_CAPACITY = 1024  # ids; kept buffers grow to the next power of two above a call's count


@cuda.jit(cache=True)
def zero_copy_gather_kernel(src, sorted_ids, positions, n, out, bad):
    """``out[positions[k], :] = src[sorted_ids[k], :]`` for ``k < n``, one thread per word.

    An id outside ``src`` is never read: its row of ``out`` is zeroed and the id written to ``bad[0]``.
    """
    words = src.shape[1]
    rows = src.shape[0]
    total = n * words
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for g in range(start, total, step):
        k = g // words
        w = g - k * words
        row = sorted_ids[k]
        if row >= 0 and row < rows:
            out[positions[k], w] = src[row, w]
        else:
            out[positions[k], w] = 0
            bad[0] = row


WARP = 32
ROWS_IN_FLIGHT = 4  # rows a warp loads before it stores any: several loads in flight per thread


@cuda.jit(cache=True)
def aligned_gather_kernel(src8, rows, row_bytes, sorted_ids, positions, n, out, bad):
    """The same rows for rows whose width is not a multiple of 8 bytes (188 bytes: 47 float32): a warp a row, each
    lane loading 8-byte words of the table aligned to 8 bytes (``src8``: the whole table as one row of uint64), so a
    warp reads each row's aligned span in whole sectors, ``ROWS_IN_FLIGHT`` rows loaded before any is stored; the
    words are cut into ``out``'s word width (the largest dividing the row and the output's address) on the way out.
    Sorted ids make a warp's rows ascending, consecutive ids adjacent spans. An id outside the table (``rows``) is
    never read: its row is zeroed and the id written to ``bad[0]``."""
    word = row_bytes // out.shape[1]  # the output's element width in bytes (1, 2 or 4)
    per = 8 // word
    mask = uint64((1 << (8 * word)) - 1)
    lane = cuda.threadIdx.x % WARP
    warp = cuda.grid(1) // WARP
    warps = cuda.gridsize(1) // WARP
    held = cuda.local.array(HELD, dtype=uint64)
    for base in range(warp * ROWS_IN_FLIGHT, n, warps * ROWS_IN_FLIGHT):
        for r in range(ROWS_IN_FLIGHT):  # the loads of up to ROWS_IN_FLIGHT rows first ...
            k = base + r
            if k < n:
                row = sorted_ids[k]
                if row >= 0 and row < rows:
                    start = row * row_bytes
                    first = start // 8
                    span = (start + row_bytes - 1) // 8 - first + 1
                    for j in range(LOADS_PER_LANE):
                        i = lane + j * WARP
                        if i < span:
                            held[r * LOADS_PER_LANE + j] = src8[0, first + i]
        for r in range(ROWS_IN_FLIGHT):  # ... then their stores
            k = base + r
            if k < n:
                row = sorted_ids[k]
                p = positions[k]
                if row >= 0 and row < rows:
                    start = row * row_bytes
                    first = start // 8
                    span = (start + row_bytes - 1) // 8 - first + 1
                    for j in range(LOADS_PER_LANE):
                        i = lane + j * WARP
                        if i < span:
                            value = held[r * LOADS_PER_LANE + j]
                            byte = (first + i) * 8 - start  # the word's first byte, counted from the row's start
                            for piece in range(per):
                                at = byte + piece * word
                                if at >= 0 and at < row_bytes:
                                    out[p, at // word] = (value >> uint64(8 * word * piece)) & mask
                else:
                    for w in range(lane, out.shape[1], WARP):
                        out[p, w] = 0
                    if lane == 0:
                        bad[0] = row


LOADS_PER_LANE = 16  # 8-byte loads a lane holds per row: rows up to 16 * 32 * 8 - 16 bytes (4 KiB)
HELD = ROWS_IN_FLIGHT * LOADS_PER_LANE


def aligned_span_words(row_bytes: int) -> int:
    """The 8-byte words a row's aligned span can cover (its width over 8, plus one at each end)."""
    return row_bytes // 8 + 2


def use_aligned(row_bytes: int, word: int, table_address: int, table_bytes: int) -> bool:
    """Whether :func:`aligned_gather_kernel` reads this table: rows whose width and addresses allow words narrower
    than 8 bytes (``word`` < 8), an 8-byte aligned table whose size is whole 8-byte words (no row's span reaches past
    its end), and rows a warp's lanes cover in ``LOADS_PER_LANE`` loads each (up to 4 KiB)."""
    return (ALIGNED and word < 8 and table_address % 8 == 0 and table_bytes % 8 == 0
            and aligned_span_words(row_bytes) <= LOADS_PER_LANE * WARP)


ALIGNED = True  # use aligned_gather_kernel where it applies (benchmarks/gpu_check.py times both kernels)


def launch_aligned_gather(src8, rows: int, row_bytes: int, sorted_ids, positions, n: int, out, bad,
                          stream=0) -> None:
    """Launch :func:`aligned_gather_kernel`: ``src8`` the table as one row of uint64 words, ``out`` 2-D words."""
    if n == 0:
        return
    warps = math.ceil(n / ROWS_IN_FLIGHT)
    blocks = min(MAX_BLOCKS, math.ceil(warps * WARP / THREADS_PER_BLOCK))
    aligned_gather_kernel[blocks, THREADS_PER_BLOCK, stream](src8, rows, row_bytes, sorted_ids, positions, n, out,
                                                             bad)


def word_bytes(row_bytes: int, *addresses: int) -> int:
    """Widest load (16, 8, 4, 2 or 1 bytes) dividing the row length and every base address."""
    for size in (16, 8, 4, 2):
        if row_bytes % size == 0 and all(a % size == 0 for a in addresses):
            return size
    return 1


def launch_gather(src, sorted_ids, positions, n: int, out, bad, stream=0) -> None:
    """Launch the kernel over 2-D word arrays ``src``/``out``, the first ``n`` of int64/int32 ``sorted_ids`` and int64
    ``positions``, and the one-word int64 ``bad``."""
    total = n * src.shape[1]
    if total == 0:
        return
    blocks = min(MAX_BLOCKS, math.ceil(total / THREADS_PER_BLOCK))
    zero_copy_gather_kernel[blocks, THREADS_PER_BLOCK, stream](src, sorted_ids, positions, n, out, bad)


class CudaArrayView:
    """A ``__cuda_array_interface__`` over raw memory (device or mapped host), keeping ``owner`` alive."""

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str, owner=None) -> None:
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}
        self._owner = owner


def word_view(address: int, rows: int, row_bytes: int, word: int, owner=None):
    """A numba device array ``[rows, row_bytes // word]`` of ``word``-byte elements at ``address``."""
    view = CudaArrayView(address, (rows, row_bytes // word), WORD_TYPESTR[word], owner)
    return cuda.as_cuda_array(view, sync=False)


class TorchOps:
    """The arrays of a gather on a GPU: PyTorch tensors, kernel views over their raw addresses."""

    TYPESTR = {"torch.int64": "<i8", "torch.int32": "<i4"}

    def __init__(self, device) -> None:
        self.torch = torch
        self.device = device
        self.int64 = torch.int64

    def empty(self, n: int, dtype):
        return self.torch.empty(n, dtype=dtype, device=self.device)

    def pinned(self, n: int, dtype):
        return self.torch.empty(n, dtype=dtype, pin_memory=True)

    def host_values(self, a) -> np.ndarray:
        """A NumPy view of a pinned host array (the host reads the device's writes there)."""
        return a.numpy()

    def address(self, a) -> int:
        return a.data_ptr()

    def view(self, a):
        """The kernel view of a 1-D int array, device or mapped host memory (unified addressing)."""
        return cuda.as_cuda_array(CudaArrayView(a.data_ptr(), tuple(a.shape), self.TYPESTR[str(a.dtype)]), sync=False)

    def words(self, a, rows: int, row_bytes: int, word: int):
        """The kernel view ``[rows, row_bytes // word]`` of ``a``'s rows; holds no reference to ``a``."""
        return word_view(a.data_ptr(), rows, row_bytes, word)

    def on_device(self, ids) -> bool:
        return ids.device == self.device

    def on_host(self, ids) -> bool:
        return ids.device.type == "cpu"

    def move(self, ids):
        """Ids on another GPU, copied to this one."""
        return ids.to(self.device, non_blocking=True)

    def sort(self, keys, values, indices) -> None:
        self.torch.sort(keys, out=(values, indices))

    def upload(self, device, host, ids) -> None:
        """``device[:] = ids`` through the pinned buffer ``host`` (a copy from pageable memory would wait)."""
        host.copy_(ids)
        device.copy_(host, non_blocking=True)

    def stream_key(self) -> int:
        return self.torch.cuda.current_stream(self.device).cuda_stream

    def numba_stream(self, key: int):
        return cuda.external_stream(key)

    def event(self):
        return self.torch.cuda.Event()

    def record(self, event) -> None:
        event.record(self.torch.cuda.current_stream(self.device))

    def done(self, event) -> bool:
        return event.query()

    def wait(self, event) -> None:
        event.synchronize()

    def wait_for(self, event) -> None:
        """The current stream waits for ``event`` (on the device: no host wait)."""
        self.torch.cuda.current_stream(self.device).wait_event(event)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def scope(self):
        return self.torch.cuda.device(self.device)


class NumpyOps:
    """The same on NumPy arrays, for the CUDA simulator: NumPy arrays play device arrays, torch CPU tensors host ids."""

    WORD_DTYPE = {16: np.complex128, 8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}

    int64 = np.int64

    def empty(self, n: int, dtype):
        if isinstance(dtype, torch.dtype):  # host ids (torch CPU tensors) bring torch dtypes
            dtype = torch.empty(0, dtype=dtype).numpy().dtype
        return np.empty(n, dtype)

    pinned = empty

    def host_values(self, a) -> np.ndarray:
        return a

    def address(self, a) -> int:
        return a.ctypes.data

    def view(self, a):
        return a

    def words(self, a, rows: int, row_bytes: int, word: int):
        return a.reshape(rows, -1).view(np.uint8).view(self.WORD_DTYPE[word])

    def on_device(self, ids) -> bool:
        return isinstance(ids, np.ndarray)

    def on_host(self, ids) -> bool:
        return not isinstance(ids, np.ndarray)

    def sort(self, keys, values, indices) -> None:
        indices[:] = np.argsort(keys, kind="stable")
        values[:] = keys[indices]

    def upload(self, device, host, ids) -> None:
        host[:] = ids.numpy()
        device[:] = host

    def stream_key(self) -> int:
        return 0

    def numba_stream(self, key: int):
        return 0  # the simulator runs kernels in order on the host

    def event(self):
        return None

    def record(self, event) -> None:
        pass

    def done(self, event) -> bool:
        return True

    def wait(self, event) -> None:
        pass

    def wait_for(self, event) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def scope(self):
        return contextlib.nullcontext()


class _IdBuffers:
    """Kept arrays for ids of one dtype, with their kernel views: the sorted ids, their positions, and (for host ids)
    the uploaded ids with a ring of two pinned buffers they go up through."""

    def __init__(self, ops, capacity: int, dtype) -> None:
        self.capacity = capacity
        self.sorted = ops.empty(capacity, dtype)
        self.positions = ops.empty(capacity, ops.int64)
        self.sorted_view, self.positions_view = ops.view(self.sorted), ops.view(self.positions)
        self.uploaded = None
        self.staging = []  # [pinned buffer, event after the copy from it]
        self.turn = 0


class ZeroCopyGather:
    """The zero-copy gather of one table in mapped host memory, call after call.

    Per call it queues a sort of the ids into kept buffers and one kernel launch (plus one copy for host ids), and
    allocates nothing once its buffers have grown to the call's id count: no host read of the ids (the kernel checks
    them; :meth:`begin` raises what an earlier call found), kernel views made once (the table's per word size, the
    buffers' when they grow, the output's when its address changes). Kept arrays are reused on whatever stream the
    caller is on: a call on another stream than the last first waits (on the device) for the last call's work. Calls
    from several threads queue their work one at a time; :attr:`counts` is then the last call's of any of them.
    """

    def __init__(self, ops, table, num_rows: int, row_bytes: int, where: str) -> None:
        self._ops = ops
        self._table = table
        self.num_rows, self.row_bytes, self.where = num_rows, row_bytes, where
        self.counts = LaunchCounts()
        self._bad = ops.pinned(1, ops.int64)
        self._bad_host = ops.host_values(self._bad)
        self._bad_host[0] = 0  # no id is 0 and bad (the table has rows)
        self._bad_view = ops.view(self._bad)
        self._sources = {}  # word bytes -> kernel view of the table
        self._target = (None, None)  # ((address, rows, word), kernel view) of the last output
        self._ids = {}  # ids dtype name -> _IdBuffers
        self._streams = {}  # stream key -> Numba stream
        self._stream_key = None
        self._done = ops.event()  # after the last call's work
        self._lock = threading.Lock()

    # ---- per call ----
    def begin(self) -> None:
        """Start a call's counts; raise an out-of-range id an earlier call met (a host read of host memory, no wait)."""
        self.counts = LaunchCounts()
        bad = int(self._bad_host[0])
        if bad:
            self._bad_host[0] = 0
            raise id_range_error(bad, self.num_rows, self.where)

    def output(self, shape, dtype):
        """A new device array for the rows (the one allocation of a call without ``out=``)."""
        self.counts.allocations += 1
        return self._ops.empty(shape, dtype)

    def gather(self, ids, out) -> None:
        """Queue ``out[i] = table[ids[i]]`` (``ids`` 1-D int32/int64, not empty, on the device or the host)."""
        ops = self._ops
        n = len(ids)
        with self._lock, ops.scope():  # callers on other threads: one call's sort and kernel use the buffers at a time
            stream = self._stream()
            buffers = self._buffers(n, ids.dtype)
            keys = self._device_ids(ids, buffers)
            ops.sort(keys, buffers.sorted[:n], buffers.positions[:n])
            self.counts.torch_ops += 1
            word = word_bytes(self.row_bytes, ops.address(self._table), ops.address(out))
            table_bytes = self.num_rows * self.row_bytes
            if use_aligned(self.row_bytes, word, ops.address(self._table), table_bytes):
                launch_aligned_gather(self._source8(), self.num_rows, self.row_bytes, buffers.sorted_view,
                                      buffers.positions_view, n, self._output_view(out, word), self._bad_view, stream)
            else:
                launch_gather(self._source(word), buffers.sorted_view, buffers.positions_view, n,
                              self._output_view(out, word), self._bad_view, stream)
            self.counts.kernels += 1
            ops.record(self._done)

    def check(self) -> None:
        """Wait for the calls queued so far and raise an out-of-range id one of them met."""
        self._ops.synchronize()
        self.begin()

    # ---- kept state ----
    def _stream(self):
        key = self._ops.stream_key()
        if key != self._stream_key:
            if self._stream_key is not None:
                self._ops.wait_for(self._done)  # the kept buffers: the last call's kernels first
            self._stream_key = key
        if key not in self._streams:
            self._streams[key] = self._ops.numba_stream(key)
        return self._streams[key]

    def _buffers(self, n: int, dtype) -> _IdBuffers:
        key = str(dtype).removeprefix("torch.")  # "int64" for torch and NumPy ids alike
        buffers = self._ids.get(key)
        if buffers is None or buffers.capacity < n:
            buffers = self._ids[key] = _IdBuffers(self._ops, max(MIN_CAPACITY, 1 << (n - 1).bit_length()), dtype)
            self.counts.allocations += 2
        return buffers

    def _device_ids(self, ids, buffers: _IdBuffers):
        ops = self._ops
        if ops.on_device(ids):
            return ids
        n = len(ids)
        if not ops.on_host(ids):
            self.counts.allocations += 1
            self.counts.torch_ops += 1
            self.counts.copies += 1
            return ops.move(ids)
        if buffers.uploaded is None:
            buffers.uploaded = ops.empty(buffers.capacity, ids.dtype)
            buffers.staging = [[ops.pinned(buffers.capacity, ids.dtype), ops.event()] for _ in range(2)]
            self.counts.allocations += 1
            self.counts.pinned_allocations += 2
        host, event = buffers.staging[buffers.turn]
        buffers.turn ^= 1
        if not ops.done(event):  # the host is two calls ahead of the copies: the buffer is still being read
            ops.wait(event)
            self.counts.syncs += 1
        ops.upload(buffers.uploaded[:n], host[:n], ids)
        ops.record(event)
        self.counts.torch_ops += 1
        self.counts.copies += 1
        return buffers.uploaded[:n]

    def _source8(self):
        """The table as one row of 8-byte words (:func:`aligned_gather_kernel`'s view), made once."""
        view = self._sources.get("aligned")
        if view is None:
            total = self.num_rows * self.row_bytes
            view = self._sources["aligned"] = self._ops.words(self._table, 1, total, 8)
        return view

    def _source(self, word: int):
        view = self._sources.get(word)
        if view is None:
            view = self._sources[word] = self._ops.words(self._table, self.num_rows, self.row_bytes, word)
        return view

    def _output_view(self, out, word: int):
        # keyed by address, not by tensor: a new output at the address of the last one (PyTorch's caching allocator
        # hands a freed block back) reuses the view, which holds no reference to it
        key = (self._ops.address(out), out.shape[0], word)
        if self._target[0] != key:
            self._target = (key, self._ops.words(out, out.shape[0], self.row_bytes, word))
        return self._target[1]
