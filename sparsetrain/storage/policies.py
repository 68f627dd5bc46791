"""Cache replacement policies: which row lives in which slot. Bookkeeping only, no row data.

Every policy answers ``lookup(ids)`` (slot per id, -1 on a miss; records the access) and
``admit(ids)`` (which missed rows to insert where, and which resident rows that evicts).
Batches are distinct ids (one gather); hits are counted per distinct id per batch.

- ``static``: a fixed hot set (top rows by ``hotness``: degree or pre-sampling access counts;
  without ``hotness``, the first rows gathered).
- ``lru``: least recently used, a doubly linked list over slots.
- ``clock``: second chance with one reference bit per slot.
- ``sieve``: SIEVE (Zhang et al., NSDI'24; GraphBolt's disk-feature cache): a FIFO queue with one
  visited bit per row; a hand walks from the oldest row towards the newest, clearing bits and evicting
  the first unvisited row. Unlike CLOCK, kept rows stay where they are, so new rows that are not
  reused leave quickly.
- ``hybrid``: a static part holding the hottest rows by ``hotness`` plus a dynamic part whose
  eviction order is a score = prior hotness + recent reuse (access counts halved every
  ``decay_period`` accesses), kept in a min-heap; a missed row is admitted only when its score
  beats the lowest resident one (so one-off rows do not flush hot ones). LSM-GNN style.
  Prefetched rows are protected until their first use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from numba import njit

from sparsetrain.errors import SettingError

POLICIES = ("static", "lru", "clock", "sieve", "hybrid")
PROTECTED = 1e300  # score of a prefetched row until its first use (or the next decay) rescores it


# ---------------------------------------------------------------- slot bookkeeping shared by the policies


@njit(cache=True, nogil=True, inline="always")
def _take_unused(state, k, capacity):
    """The next never-used slot, taken (``state[k]`` counts the slots taken so far), or -1 once all were."""
    s = state[k]
    if s < capacity:
        state[k] = s + 1
        return s
    return -1


@njit(cache=True, nogil=True, inline="always")
def _vacate(s, id_of, slot_of, fresh, evicted, ne):
    """Free slot ``s``; its row counts as evicted (appended to ``evicted``) unless it was admitted in this
    same call, so its data never landed. Returns the new eviction count."""
    old = id_of[s]
    slot_of[old] = -1
    if not fresh[s]:
        evicted[ne, 0] = old
        evicted[ne, 1] = s
        ne += 1
    return ne


@njit(cache=True, nogil=True, inline="always")
def _occupy(s, row, id_of, slot_of, fresh, adm, na):
    """Put ``row`` in slot ``s`` and append (row, slot) to ``adm``; returns the new admission count."""
    id_of[s] = row
    slot_of[row] = s
    fresh[s] = 1
    adm[na, 0] = row
    adm[na, 1] = s
    return na + 1


@njit(cache=True, nogil=True)
def _lookup_and_mark(ids, slot_of, bits, slots):
    """Slot of each id; a hit sets its slot's bit (CLOCK's reference bit, SIEVE's visited bit)."""
    for i in range(ids.size):
        s = slot_of[ids[i]]
        slots[i] = s
        if s >= 0:
            bits[s] = 1


# ---------------------------------------------------------------- LRU (linked list, head = most recent)


@njit(cache=True, nogil=True, inline="always")
def _to_front(s, prev, nxt, ends):
    head = ends[0]
    if head == s:
        return
    p = prev[s]
    n = nxt[s]
    if p >= 0:
        nxt[p] = n
    if n >= 0:
        prev[n] = p
    elif ends[1] == s:
        ends[1] = p
    prev[s] = -1
    nxt[s] = head
    if head >= 0:
        prev[head] = s
    ends[0] = s
    if ends[1] < 0:
        ends[1] = s


@njit(cache=True, nogil=True)
def _lru_lookup(ids, slot_of, prev, nxt, ends, slots):
    for i in range(ids.size):
        s = slot_of[ids[i]]
        slots[i] = s
        if s >= 0:
            _to_front(s, prev, nxt, ends)


@njit(cache=True, nogil=True)
def _lru_admit(ids, slot_of, id_of, prev, nxt, ends, fresh, adm, evicted):
    """``ends = [head, tail, used]``; fills ``adm`` (id, slot) and ``evicted`` (id, slot); returns their counts."""
    na = 0
    ne = 0
    capacity = id_of.size
    for i in range(ids.size):
        row = ids[i]
        if slot_of[row] >= 0:
            continue
        s = _take_unused(ends, 2, capacity)
        if s >= 0:
            prev[s] = -1
            nxt[s] = -1
            if ends[0] < 0:
                ends[0] = s
                ends[1] = s
            else:
                _to_front(s, prev, nxt, ends)
        else:
            s = ends[1]
            ne = _vacate(s, id_of, slot_of, fresh, evicted, ne)
            _to_front(s, prev, nxt, ends)
        na = _occupy(s, row, id_of, slot_of, fresh, adm, na)
    return na, ne


# ---------------------------------------------------------------- CLOCK


@njit(cache=True, nogil=True)
def _clock_admit(ids, slot_of, id_of, ref, state, fresh, adm, evicted):
    """``state = [hand, used]``."""
    na = 0
    ne = 0
    capacity = id_of.size
    for i in range(ids.size):
        row = ids[i]
        if slot_of[row] >= 0:
            continue
        s = _take_unused(state, 1, capacity)
        if s < 0:
            hand = state[0]
            while ref[hand]:
                ref[hand] = 0
                hand = hand + 1 if hand + 1 < capacity else 0
            s = hand
            state[0] = hand + 1 if hand + 1 < capacity else 0
            ne = _vacate(s, id_of, slot_of, fresh, evicted, ne)
        ref[s] = 1
        na = _occupy(s, row, id_of, slot_of, fresh, adm, na)
    return na, ne


# ---------------------------------------------------------------- SIEVE (FIFO list + visited bits + a hand from the old
# end)


@njit(cache=True, nogil=True)
def _sieve_admit(ids, slot_of, id_of, visited, newer, older, state, fresh, adm, evicted):
    """``state = [newest, oldest, hand, used]``; ``newer``/``older`` link the slots in insertion order.

    The hand (-1: start at the oldest) clears visited bits on its way to the newest end and evicts
    the first unvisited slot; it then rests on the next newer slot.
    """
    na = 0
    ne = 0
    capacity = id_of.size
    for i in range(ids.size):
        row = ids[i]
        if slot_of[row] >= 0:
            continue
        s = _take_unused(state, 3, capacity)
        if s < 0:
            s = state[2] if state[2] >= 0 else state[1]
            while visited[s]:
                visited[s] = 0
                s = newer[s] if newer[s] >= 0 else state[1]
            state[2] = newer[s]
            o = older[s]
            n = newer[s]
            if o >= 0:
                newer[o] = n
            else:
                state[1] = n
            if n >= 0:
                older[n] = o
            else:
                state[0] = o
            ne = _vacate(s, id_of, slot_of, fresh, evicted, ne)
        older[s] = state[0]
        newer[s] = -1
        if state[0] >= 0:
            newer[state[0]] = s
        state[0] = s
        if state[1] < 0:
            state[1] = s
        visited[s] = 0
        na = _occupy(s, row, id_of, slot_of, fresh, adm, na)
    return na, ne


# ---------------------------------------------------------------- hybrid (static part + scored min-heap)


@njit(cache=True, nogil=True, inline="always")
def _sift_down(j, heap, n, hpos, key):
    s = heap[j]
    k = key[s]
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and key[heap[c + 1]] < key[heap[c]]:
            c += 1
        if key[heap[c]] >= k:
            break
        heap[j] = heap[c]
        hpos[heap[j]] = j
        j = c
    heap[j] = s
    hpos[s] = j


@njit(cache=True, nogil=True, inline="always")
def _sift_up(j, heap, n, hpos, key):
    s = heap[j]
    k = key[s]
    while j > 0:
        p = (j - 1) // 2
        if key[heap[p]] <= k:
            break
        heap[j] = heap[p]
        hpos[heap[j]] = j
        j = p
    heap[j] = s
    hpos[s] = j


@njit(cache=True, nogil=True)
def _hybrid_lookup(ids, slot_of, counts, prior, key, heap, hpos, used, first_dynamic, slots):
    for i in range(ids.size):
        row = ids[i]
        counts[row] += 1.0
        s = slot_of[row]
        slots[i] = s
        if s >= first_dynamic:
            key[s] = prior[row] + counts[row]
            _sift_down(hpos[s], heap, used, hpos, key)


@njit(cache=True, nogil=True)
def _hybrid_admit(ids, slot_of, id_of, counts, prior, key, heap, hpos, state, first_dynamic, force, fresh, adm,
                  evicted):
    """``state = [dynamic slots used]``; the heap holds the used dynamic slots, lowest score on top."""
    na = 0
    ne = 0
    dynamic = id_of.size - first_dynamic
    if dynamic <= 0:
        return 0, 0
    for i in range(ids.size):
        row = ids[i]
        if slot_of[row] >= 0:
            continue
        score = PROTECTED if force else prior[row] + counts[row]
        used = state[0]
        if used < dynamic:
            s = first_dynamic + used
            state[0] = used + 1
            key[s] = score
            heap[used] = s
            hpos[s] = used
            _sift_up(used, heap, used + 1, hpos, key)
        else:
            s = heap[0]
            if score <= key[s]:
                continue
            ne = _vacate(s, id_of, slot_of, fresh, evicted, ne)
            key[s] = score
            _sift_down(0, heap, used, hpos, key)
        na = _occupy(s, row, id_of, slot_of, fresh, adm, na)
    return na, ne


@njit(cache=True, nogil=True)
def _rescore(id_of, counts, prior, key, heap, hpos, used, first_dynamic):
    for j in range(used):
        s = heap[j]
        row = id_of[s]
        key[s] = prior[row] + counts[row]
    for j in range(used // 2 - 1, -1, -1):
        _sift_down(j, heap, used, hpos, key)


# ---------------------------------------------------------------- Python wrappers


class CachePolicy(ABC):
    """Slot bookkeeping shared by every policy: ``slot_of[row]`` (-1 when absent) and ``id_of[slot]``."""

    name = "base"

    def __init__(self, num_rows: int, num_slots: int) -> None:
        if num_slots < 1:
            raise SettingError(f"a cache needs at least one slot, got {num_slots}")
        self.num_rows = int(num_rows)
        self.num_slots = int(num_slots)
        self.slot_of = np.full(self.num_rows, -1, dtype=index_dtype(self.num_slots))  # one per table row: keep it small
        self.id_of = np.full(self.num_slots, -1, dtype=index_dtype(self.num_rows))
        self._fresh = np.zeros(self.num_slots, dtype=np.uint8)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Slot of each id (-1 when absent), without recording an access."""
        return self.slot_of[ids].astype(np.int64, copy=False)

    @abstractmethod
    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Slot of each distinct id (-1 on a miss); records the access."""

    def preload(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, slots)`` to fill when the cache is built (the static hot set); empty for dynamic policies."""
        return np.empty(0, np.int64), np.empty(0, np.int64)

    def admit(self, ids: np.ndarray, force: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Insert missed rows: ``(admitted ids, their slots, evicted ids, their slots)``.

        Evicted rows were resident before this call; their slots now belong to admitted rows.
        ``force`` admits even rows the policy would reject (prefetch hints).
        """
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        adm = np.empty((ids.size, 2), np.int64)
        evicted = np.empty((ids.size, 2), np.int64)
        na, ne = self._admit(ids, force, adm, evicted)
        adm = adm[:na]
        keep = self.slot_of[adm[:, 0]] == adm[:, 1]
        self._fresh[adm[:, 1]] = 0
        adm = adm[keep]
        return adm[:, 0].copy(), adm[:, 1].copy(), evicted[:ne, 0].copy(), evicted[:ne, 1].copy()

    def _admit(self, ids, force, adm, evicted) -> tuple[int, int]:
        return 0, 0

    @property
    def dynamic_slots(self) -> int:
        """Slots that admissions can use (0 for a purely static cache)."""
        return self.num_slots

    @property
    def resident(self) -> int:
        """Number of slots holding a row."""
        return int((self.id_of >= 0).sum())


class StaticPolicy(CachePolicy):
    """A hot set fixed for the life of the cache, never evicted.

    With ``hotness`` the set is the ``num_slots`` hottest rows, loaded when the cache is built.
    Without it the first distinct rows gathered fill the slots and stay (rows a sampler touches
    early are mostly hot ones); pass in-degrees or pre-sampling counts for a better set.
    """

    name = "static"

    def __init__(self, num_rows: int, num_slots: int, hotness: np.ndarray | None = None) -> None:
        super().__init__(num_rows, min(num_slots, num_rows))
        self.first_touch = hotness is None
        self._filled = 0
        if not self.first_touch:
            hot = top_rows(hotness, self.num_slots)
            self.id_of[: hot.size] = hot
            self.slot_of[hot] = np.arange(hot.size)
            self._filled = self.num_slots

    @property
    def dynamic_slots(self) -> int:
        return self.num_slots - self._filled

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        return self.slot_of[ids].astype(np.int64, copy=False)

    def preload(self) -> tuple[np.ndarray, np.ndarray]:
        if self.first_touch:
            return super().preload()
        used = np.flatnonzero(self.id_of >= 0)
        return self.id_of[used], used

    def _admit(self, ids, force, adm, evicted):
        if self._filled == self.num_slots:
            return 0, 0
        ids = np.unique(ids[self.slot_of[ids] < 0])[: self.num_slots - self._filled]
        slots = np.arange(self._filled, self._filled + ids.size)
        self.slot_of[ids] = slots
        self.id_of[slots] = ids
        adm[: ids.size, 0] = ids
        adm[: ids.size, 1] = slots
        self._filled += ids.size
        return ids.size, 0


class LRUPolicy(CachePolicy):
    """Evict the least recently used row."""

    name = "lru"

    def __init__(self, num_rows: int, num_slots: int) -> None:
        super().__init__(num_rows, num_slots)
        self._prev = np.full(self.num_slots, -1, index_dtype(self.num_slots))
        self._next = np.full(self.num_slots, -1, index_dtype(self.num_slots))
        self._ends = np.array([-1, -1, 0], np.int64)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        slots = np.empty(ids.size, np.int64)
        _lru_lookup(ids, self.slot_of, self._prev, self._next, self._ends, slots)
        return slots

    def _admit(self, ids, force, adm, evicted):
        return _lru_admit(ids, self.slot_of, self.id_of, self._prev, self._next, self._ends, self._fresh, adm, evicted)


class ClockPolicy(CachePolicy):
    """Second chance: a hit sets a reference bit; the hand clears bits and evicts the first clear slot."""

    name = "clock"

    def __init__(self, num_rows: int, num_slots: int) -> None:
        super().__init__(num_rows, num_slots)
        self._ref = np.zeros(self.num_slots, np.uint8)
        self._state = np.zeros(2, np.int64)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        slots = np.empty(ids.size, np.int64)
        _lookup_and_mark(ids, self.slot_of, self._ref, slots)
        return slots

    def _admit(self, ids, force, adm, evicted):
        return _clock_admit(ids, self.slot_of, self.id_of, self._ref, self._state, self._fresh, adm, evicted)


class SievePolicy(CachePolicy):
    """SIEVE: FIFO insertion order, a visited bit per slot, a hand that evicts the oldest unvisited row."""

    name = "sieve"

    def __init__(self, num_rows: int, num_slots: int) -> None:
        super().__init__(num_rows, num_slots)
        self._visited = np.zeros(self.num_slots, np.uint8)
        self._newer = np.full(self.num_slots, -1, index_dtype(self.num_slots))
        self._older = np.full(self.num_slots, -1, index_dtype(self.num_slots))
        self._state = np.array([-1, -1, -1, 0], np.int64)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        slots = np.empty(ids.size, np.int64)
        _lookup_and_mark(ids, self.slot_of, self._visited, slots)
        return slots

    def _admit(self, ids, force, adm, evicted):
        return _sieve_admit(ids, self.slot_of, self.id_of, self._visited, self._newer, self._older, self._state,
                            self._fresh, adm, evicted)


class HybridPolicy(CachePolicy):
    """Static part (``static_fraction`` of the slots, hottest rows by ``hotness``) + scored dynamic part, which starts
    with the next hottest rows (those with positive hotness).

    The score of a row is ``prior + recent accesses``: ``prior`` is its share of ``hotness`` times
    ``prior_weight`` (how many accesses the hotness is worth; default its own total, at least ``num_rows``) and the
    access
    counts halve every ``decay_period`` accesses (default ``16 * num_rows``).
    """

    name = "hybrid"

    def __init__(self, num_rows: int, num_slots: int, hotness: np.ndarray | None = None, static_fraction: float = 0.25,
                 decay_period: int | None = None, prior_weight: float | None = None) -> None:
        super().__init__(num_rows, min(num_slots, num_rows))
        if not 0.0 <= static_fraction <= 1.0:
            raise SettingError(f"hybrid: static_fraction must be within [0, 1], got {static_fraction}")
        self.decay_period = int(decay_period or 16 * self.num_rows)
        self._counts = np.zeros(self.num_rows, np.float32)
        if hotness is None:
            self._prior = np.zeros(self.num_rows, np.float32)
            rows = np.empty(0, np.int64)
        else:
            hot = np.array(hotness, dtype=np.float32)
            total = float(hot.sum(dtype=np.float64))
            # hotness in accesses (pre-sampled counts, degrees) is worth its own total; a normalized score, num_rows
            weight = max(total, self.num_rows) if prior_weight is None else float(prior_weight)
            if total > 0:
                hot *= np.float32(weight / total)
            else:
                hot[:] = 0
            self._prior = hot
            rows = top_rows(hot, self.num_slots)
            rows = rows[hot[rows] > 0]
        # the static part holds the hottest rows; the dynamic part starts with the next hottest (started empty, it
        # would keep whatever missed first: once full, a row gets in only by beating the lowest resident score)
        self.id_of[: rows.size] = rows
        self.slot_of[rows] = np.arange(rows.size)
        static = min(int(self.num_slots * static_fraction), rows.size) if hotness is not None else 0
        used = rows.size - static
        self.first_dynamic = static
        self._key = np.zeros(self.num_slots, np.float64)
        self._heap = np.zeros(self.num_slots - static, index_dtype(self.num_slots))
        self._hpos = np.zeros(self.num_slots, index_dtype(self.num_slots))
        self._heap[:used] = np.arange(static, rows.size)
        self._hpos[static : rows.size] = np.arange(used)
        self._state = np.array([used], np.int64)
        _rescore(self.id_of, self._counts, self._prior, self._key, self._heap, self._hpos, used, static)
        self._since_decay = 0

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        slots = np.empty(ids.size, np.int64)
        _hybrid_lookup(ids, self.slot_of, self._counts, self._prior, self._key, self._heap, self._hpos,
                       int(self._state[0]), self.first_dynamic, slots)
        self._since_decay += ids.size
        if self._since_decay >= self.decay_period:
            self._since_decay = 0
            self._counts *= 0.5
            _rescore(self.id_of, self._counts, self._prior, self._key, self._heap, self._hpos, int(self._state[0]),
                     self.first_dynamic)
        return slots

    @property
    def dynamic_slots(self) -> int:
        return self.num_slots - self.first_dynamic

    def preload(self) -> tuple[np.ndarray, np.ndarray]:
        filled = self.first_dynamic + int(self._state[0])
        return self.id_of[:filled].copy(), np.arange(filled)

    def _admit(self, ids, force, adm, evicted):
        return _hybrid_admit(
            ids, self.slot_of, self.id_of, self._counts, self._prior, self._key, self._heap, self._hpos, self._state,
            self.first_dynamic, force, self._fresh, adm, evicted
        )


def index_dtype(size: int) -> np.dtype:
    """int32 for indices below ``size`` while they fit (half the bookkeeping of a 100M-row table), else int64."""
    return np.dtype(np.int32) if size < 2**31 - 1 else np.dtype(np.int64)


def top_rows(hotness, k: int) -> np.ndarray:
    """The ``k`` rows with the highest hotness, hottest first (ties by lower id).

    Memory beyond ``hotness``: one copy of it and the candidates (no index array per row)."""
    hot = np.asarray(hotness)
    k = min(int(k), hot.size)
    if k <= 0:
        return np.empty(0, np.int64)
    if k < hot.size:
        threshold = np.partition(hot, hot.size - k)[hot.size - k]
        part = np.flatnonzero(hot >= threshold)  # k rows plus any ties at the threshold
    else:
        part = np.arange(hot.size)
    return part[np.lexsort((part, -hot[part]))][:k].astype(np.int64)


def make_policy(name: str, num_rows: int, num_slots: int, hotness=None, **options) -> CachePolicy:
    """Build a policy by name (``static``, ``lru``, ``clock``, ``sieve``, ``hybrid``)."""
    if hotness is not None:
        hotness = np.asarray(hotness.numpy() if hasattr(hotness, "numpy") else hotness, dtype=np.float32)
        if hotness.shape != (num_rows,):
            raise SettingError(f"hotness must have one value per row ({num_rows}), got shape {hotness.shape}")
    if name == "static":
        return StaticPolicy(num_rows, num_slots, hotness)
    if name == "lru":
        return LRUPolicy(num_rows, num_slots)
    if name == "clock":
        return ClockPolicy(num_rows, num_slots)
    if name == "sieve":
        return SievePolicy(num_rows, num_slots)
    if name == "hybrid":
        return HybridPolicy(num_rows, num_slots, hotness, **options)
    raise SettingError(f"unknown cache policy {name!r}; choose one of {', '.join(POLICIES)}")


def replay(policy: CachePolicy, trace, warmup: int = 0) -> float:
    """Hit rate of ``policy`` over a trace (an iterable of id batches; each batch counted by distinct ids); the first
    ``warmup`` batches update the policy but are not counted (a cache's steady state rather than its filling)."""
    hits = 0
    total = 0
    for i, batch in enumerate(trace):
        ids = np.unique(np.asarray(batch.numpy() if hasattr(batch, "numpy") else batch, dtype=np.int64))
        slots = policy.lookup(ids)
        missed = slots < 0
        if i >= warmup:
            hits += ids.size - int(missed.sum())
            total += ids.size
        policy.admit(ids[missed])
    return hits / total if total else 0.0


def access_counts(trace, num_rows: int) -> np.ndarray:
    """How often each row appears in a trace (distinct per batch): hotness from pre-sampling."""
    counts = np.zeros(num_rows, np.int32)
    for batch in trace:
        ids = np.unique(np.asarray(batch.numpy() if hasattr(batch, "numpy") else batch, dtype=np.int64))
        counts[ids] += 1
    return counts
