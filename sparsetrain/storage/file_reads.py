"""Read chosen rows of a file with parallel ``pread`` calls from Numba (no mmap, so no SIGBUS).

The ids are sorted, neighbouring rows are merged into one read ("runs": rows whose
gap is at most ``coalesce_bytes``), every run is read by one ``pread`` on a worker
thread (the GIL is released), and the rows are copied to their output positions.
A read that comes back short means the file shrank: the caller turns that into an error.
The ``O_DIRECT`` variant (``plan_block_runs`` + ``read_block_runs``) reads whole aligned blocks
into an aligned buffer, bypassing the page cache; many Python threads call it at once, each
with one read in flight, since a blocked ``pread`` needs no core.
"""

from __future__ import annotations

import os

import numpy as np
from numba import njit, prange, types

_pread = types.ExternalFunction("pread", types.intp(types.int32, types.voidptr, types.uintp, types.int64))
_fadvise = types.ExternalFunction("posix_fadvise", types.int32(types.int32, types.int64, types.int64, types.int32))
_mincore = types.ExternalFunction("mincore", types.int32(types.voidptr, types.uintp, types.voidptr))
POSIX_FADV_WILLNEED = 3
MAX_RUN_BYTES = 1 << 20
PAGE_BYTES = 4096
RESIDENCY_SAMPLE = 64
PARALLEL_MIN_RUNS = 512  # below this many reads a parallel region costs more than it saves


@njit(cache=True, nogil=True)
def plan_runs(sorted_ids, row_bytes, max_gap_rows, max_run_rows):
    """Merge sorted row ids into runs ``[start, end)``; ``first[r]`` is the first sorted position of run ``r``.

    Returns ``(starts, ends, first, staging_offset, staging_bytes)``; single-row runs need no staging.
    """
    n = sorted_ids.size
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    first = np.empty(n + 1, np.int64)
    runs = 0
    starts[0] = sorted_ids[0]
    ends[0] = sorted_ids[0] + 1
    first[0] = 0
    for k in range(1, n):
        row = sorted_ids[k]
        if row < ends[runs]:
            continue
        if row - ends[runs] <= max_gap_rows and row + 1 - starts[runs] <= max_run_rows:
            ends[runs] = row + 1
        else:
            runs += 1
            starts[runs] = row
            ends[runs] = row + 1
            first[runs] = k
    runs += 1
    first[runs] = n
    offsets = np.empty(runs, np.int64)
    total = 0
    for r in range(runs):
        offsets[r] = total
        length = ends[r] - starts[r]
        if length > 1:
            total += length * row_bytes
    return starts[:runs], ends[:runs], first[: runs + 1], offsets, total


@njit(cache=True, nogil=True, inline="always")
def _read_full(fd, address, length, offset):
    done = 0
    while done < length:
        got = _pread(fd, address + done, length - done, offset + done)
        if got <= 0:
            return done
        done += got
    return done


@njit(cache=True, nogil=True, inline="always")
def _read_run(r, fd, data_offset, row_bytes, starts, ends, first, offsets, sorted_ids, order, out, staging):
    """Read run ``r`` and place its rows; returns 1 when the read came back short."""
    k0 = first[r]
    k1 = first[r + 1]
    length = (ends[r] - starts[r]) * row_bytes
    offset = data_offset + starts[r] * row_bytes
    if ends[r] - starts[r] == 1:
        dst = out[order[k0]]
        if _read_full(fd, dst.ctypes.data, length, offset) != length:
            return 1
        for k in range(k0 + 1, k1):
            out[order[k], :] = dst
    else:
        buf = staging[offsets[r] : offsets[r] + length]
        if _read_full(fd, buf.ctypes.data, length, offset) != length:
            return 1
        for k in range(k0, k1):
            at = (sorted_ids[k] - starts[r]) * row_bytes
            out[order[k], :] = buf[at : at + row_bytes]
    return 0


@njit(cache=True, nogil=True, parallel=True)
def _read_runs_parallel(fd, data_offset, row_bytes, starts, ends, first, offsets, sorted_ids, order, out, staging,
                        advise):
    runs = starts.size
    if advise:
        for r in prange(runs):
            _fadvise(fd, data_offset + starts[r] * row_bytes, (ends[r] - starts[r]) * row_bytes, POSIX_FADV_WILLNEED)
    short = np.zeros(runs, np.int64)
    for r in prange(runs):
        short[r] = _read_run(r, fd, data_offset, row_bytes, starts, ends, first, offsets, sorted_ids, order, out,
                             staging)
    return short.sum()


@njit(cache=True, nogil=True)
def _read_runs_serial(fd, data_offset, row_bytes, starts, ends, first, offsets, sorted_ids, order, out, staging,
                      advise):
    runs = starts.size
    if advise:
        for r in range(runs):
            _fadvise(fd, data_offset + starts[r] * row_bytes, (ends[r] - starts[r]) * row_bytes, POSIX_FADV_WILLNEED)
    short = 0
    for r in range(runs):
        short += _read_run(r, fd, data_offset, row_bytes, starts, ends, first, offsets, sorted_ids, order, out, staging)
    return short


def read_rows(fd: int, data_offset: int, row_bytes: int, ids: np.ndarray, out: np.ndarray, *, coalesce_bytes: int,
              advise: bool) -> tuple[int, int]:
    """Read file rows ``ids`` (int64, validated, non-empty) into ``out`` ``[n, row_bytes]`` uint8.

    Returns ``(short_reads, bytes_read)``.
    """
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    max_gap = coalesce_bytes // row_bytes
    max_run = max(1, MAX_RUN_BYTES // row_bytes)
    starts, ends, first, offsets, staging_bytes = plan_runs(sorted_ids, row_bytes, max_gap, max_run)
    staging = np.empty(staging_bytes, dtype=np.uint8)
    read_runs = _read_runs_parallel if starts.size >= PARALLEL_MIN_RUNS else _read_runs_serial
    short = read_runs(fd, data_offset, row_bytes, starts, ends, first, offsets, sorted_ids, order, out, staging, advise)
    return int(short), int((ends - starts).sum()) * row_bytes


@njit(cache=True, nogil=True)
def _resident_fraction(base_address, data_offset, row_bytes, sample_ids):
    vec = np.zeros(1, np.uint8)
    resident = 0
    for i in range(sample_ids.size):
        address = base_address + data_offset + sample_ids[i] * row_bytes
        page = address - address % PAGE_BYTES
        if _mincore(page, 1, vec.ctypes.data) == 0 and vec[0] & 1:
            resident += 1
    return resident / max(1, sample_ids.size)


def resident_fraction(base_address: int, data_offset: int, row_bytes: int, ids: np.ndarray) -> float:
    """Share of a sample of ``ids`` whose first page is in the page cache (``mincore`` on the mapping)."""
    step = max(1, ids.size // RESIDENCY_SAMPLE)
    return float(_resident_fraction(base_address, data_offset, row_bytes,
                                    np.ascontiguousarray(ids[::step][:RESIDENCY_SAMPLE], dtype=np.int64)))


@njit(cache=True, nogil=True)
def _advise_runs(fd, data_offset, row_bytes, starts, ends):
    for r in range(starts.size):
        _fadvise(fd, data_offset + starts[r] * row_bytes, (ends[r] - starts[r]) * row_bytes, POSIX_FADV_WILLNEED)


def advise_rows(fd: int, data_offset: int, row_bytes: int, ids: np.ndarray, coalesce_bytes: int) -> None:
    """Ask the kernel to start reading the pages of rows ``ids`` now, all at once (``POSIX_FADV_WILLNEED``)."""
    sorted_ids = np.sort(ids)
    starts, ends, _, _, _ = plan_runs(sorted_ids, row_bytes, coalesce_bytes // row_bytes,
                                      max(1, MAX_RUN_BYTES // row_bytes))
    _advise_runs(fd, data_offset, row_bytes, starts, ends)


# ---------------------------------------------------------------- O_DIRECT reads (no page cache)

# O_DIRECT needs file offset, length and buffer aligned to the device's logical block; 4 KiB covers every common one
DIRECT_BLOCK_BYTES = 4096


@njit(cache=True, nogil=True)
def plan_block_runs(sorted_ids, data_offset, row_bytes, block, max_gap_bytes, max_run_bytes):
    """Merge sorted row ids into block-aligned reads.

    Returns ``(start, length, need, first)``: read ``r`` covers file bytes ``[start[r], start[r] + length[r])``
    (both multiples of ``block``), of which the first ``need[r]`` must come back (the last block may
    extend past the end of the file); its rows are sorted positions ``first[r]:first[r + 1]``.
    """
    n = sorted_ids.size
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    need = np.empty(n, np.int64)
    first = np.empty(n + 1, np.int64)
    runs = -1
    for k in range(n):
        lo = data_offset + sorted_ids[k] * row_bytes
        hi = lo + row_bytes
        a_lo = lo - lo % block
        a_hi = hi + (block - hi % block) % block
        if runs >= 0 and a_lo <= end[runs] + max_gap_bytes and a_hi - start[runs] <= max_run_bytes:
            if a_hi > end[runs]:
                end[runs] = a_hi
            need[runs] = hi - start[runs]
        else:
            runs += 1
            start[runs] = a_lo
            end[runs] = a_hi
            need[runs] = hi - a_lo
            first[runs] = k
    runs += 1
    first[runs] = n
    return start[:runs], end[:runs] - start[:runs], need[:runs], first[: runs + 1]


@njit(cache=True, nogil=True)
def read_block_runs(fd, start, length, need, first, sorted_ids, order, data_offset, row_bytes, out, buf, r_lo, r_hi):
    """Read runs ``r_lo:r_hi`` into the aligned ``buf`` one at a time and copy their rows to ``out``.

    Releases the GIL, so several threads can each keep a read in flight; returns the number of short reads.
    """
    short = 0
    for r in range(r_lo, r_hi):
        got = 0
        base = buf.ctypes.data
        while got < need[r]:
            n = _pread(fd, base + got, length[r] - got, start[r] + got)
            if n <= 0:
                break
            got += n
        if got < need[r]:
            short += 1
            continue
        for k in range(first[r], first[r + 1]):
            at = data_offset + sorted_ids[k] * row_bytes - start[r]
            out[order[k], :] = buf[at : at + row_bytes]
    return short


def aligned_empty(nbytes: int, alignment: int = DIRECT_BLOCK_BYTES) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` whose address is a multiple of ``alignment`` (O_DIRECT's rule)."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    skip = (-raw.ctypes.data) % alignment
    return raw[skip : skip + nbytes]


def advise_random(fd: int) -> None:
    """Readahead off for this file (``POSIX_FADV_RANDOM``): a read of one row brings in no neighbours."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
