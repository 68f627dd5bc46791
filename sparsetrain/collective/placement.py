"""Where every row of a row-sharded table lives: an owner rank, a local index, optional replicas.

Local layout of rank ``r``: its owned rows first (ascending global id), then the
rows it holds a replica of (ascending global id). ``RowPlacement.local_ids(r)``
lists the global ids of that layout, so ``table[placement.local_ids(r)]`` is
rank ``r``'s ``local_rows``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from sparsetrain.errors import SettingError


def _as_long(ids: torch.Tensor | Sequence[int] | np.ndarray) -> torch.Tensor:
    if isinstance(ids, torch.Tensor):
        return ids.to(torch.int64)
    return torch.as_tensor(np.asarray(ids, dtype=np.int64))


class RowPlacement:
    """Maps a global row id to ``(owner rank, local index)``, plus optional replica ranks.

    Build one with :meth:`contiguous`, :meth:`from_offsets` or :meth:`from_owner`, then
    optionally :meth:`with_replicas`. Every rank must build the same placement.
    """

    def __init__(
        self,
        num_rows: int,
        world_size: int,
        *,
        offsets: torch.Tensor | None = None,
        owner: torch.Tensor | None = None,
        replicas: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        if (offsets is None) == (owner is None):
            raise SettingError("RowPlacement needs exactly one of offsets= or owner=; use RowPlacement.contiguous or "
                               ".from_owner")
        self.num_rows = int(num_rows)
        self.world_size = int(world_size)
        if self.world_size < 1:
            raise SettingError(f"RowPlacement: world_size must be >= 1, got {world_size}")
        self._offsets = offsets
        self._owner = owner
        self._local: torch.Tensor | None = None
        self._owned_perm: torch.Tensor | None = None
        if offsets is not None:
            self._counts = (offsets[1:] - offsets[:-1]).tolist()
            self._starts = offsets[:-1].tolist()
        else:
            counts = torch.bincount(owner.to(torch.int64), minlength=self.world_size)
            self._counts = counts.tolist()
            self._starts = (torch.cumsum(counts, 0) - counts).tolist()
            perm = torch.argsort(owner, stable=True)
            local = torch.empty(self.num_rows, dtype=torch.int64)
            starts = torch.as_tensor(self._starts, dtype=torch.int64)
            local[perm] = torch.arange(self.num_rows) - starts[owner[perm].to(torch.int64)]
            self._local = local
            self._owned_perm = perm
        self._device_cache: dict[torch.device, dict[str, torch.Tensor]] = {}
        self._fingerprint: int | None = None
        self._replica_map: dict[int, tuple[int, ...]] = {}
        self._set_replicas(replicas or {})

    # ----------------------------------------------------------------- builders
    @classmethod
    def contiguous(cls, num_rows: int, world_size: int) -> RowPlacement:
        """Rank ``r`` owns one contiguous block of rows; block sizes differ by at most one (lower ranks larger)."""
        if num_rows < 0:
            raise SettingError(f"RowPlacement.contiguous: num_rows must be >= 0, got {num_rows}")
        if world_size < 1:
            raise SettingError(f"RowPlacement.contiguous: world_size must be >= 1, got {world_size}")
        base, extra = divmod(int(num_rows), int(world_size))
        sizes = torch.tensor([base + (1 if r < extra else 0) for r in range(world_size)], dtype=torch.int64)
        return cls.from_offsets(torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(sizes, 0)]))

    @classmethod
    def from_offsets(cls, offsets: torch.Tensor | Sequence[int]) -> RowPlacement:
        """Rank ``r`` owns rows ``[offsets[r], offsets[r + 1])``; ``offsets`` has ``world_size + 1`` entries, starts at
        0."""
        off = _as_long(offsets).cpu()
        if off.dim() != 1 or off.numel() < 2 or int(off[0]) != 0 or bool((off[1:] < off[:-1]).any()):
            raise SettingError(
                "RowPlacement.from_offsets: offsets must be a non-decreasing 1-D sequence of world_size + 1 "
                f"integers starting at 0, got {off.tolist()[:8]}"
            )
        return cls(int(off[-1]), off.numel() - 1, offsets=off.clone())

    @classmethod
    def from_owner(cls, owner_rank: torch.Tensor | Sequence[int] | np.ndarray,
                   world_size: int | None = None) -> RowPlacement:
        """Row ``i`` is owned by rank ``owner_rank[i]`` (a partition array); ``world_size`` defaults to ``max + 1``."""
        owner = _as_long(owner_rank).cpu()
        if owner.dim() != 1:
            raise SettingError(f"RowPlacement.from_owner: owner_rank must be 1-D, got shape {tuple(owner.shape)}")
        top = int(owner.max()) + 1 if owner.numel() else 1
        world = top if world_size is None else int(world_size)
        if owner.numel() and (int(owner.min()) < 0 or top > world):
            raise SettingError(
                f"RowPlacement.from_owner: owner ranks must lie in [0, {world}), got values in "
                f"[{int(owner.min())}, {top - 1}]; pass world_size= or fix the partition array"
            )
        small = torch.int32 if world < 2**31 else torch.int64
        return cls(owner.numel(), world, owner=owner.to(small))

    def with_replicas(self, replicas: Mapping[int, Sequence[int]]) -> RowPlacement:
        """A copy of this placement where row ``k`` also lives on ranks ``replicas[k]`` (added to existing replicas).

        The owner may appear in the list (it is skipped); repeated ranks count once.
        """
        merged = {row: list(ranks) for row, ranks in self._replica_map.items()}
        for row, ranks in replicas.items():
            merged.setdefault(int(row), []).extend(int(r) for r in ranks)
        out = RowPlacement.__new__(RowPlacement)
        out.__dict__.update(self.__dict__)
        out._set_replicas(merged)
        return out

    def _set_replicas(self, replicas: Mapping[int, Sequence[int]]) -> None:
        clean: dict[int, tuple[int, ...]] = {}
        for row, ranks in replicas.items():
            row = int(row)
            if not 0 <= row < self.num_rows:
                raise SettingError(f"RowPlacement.with_replicas: row {row} is outside [0, {self.num_rows})")
            owner = int(self.owner(torch.tensor([row]))[0])
            keep = set()
            for r in ranks:
                r = int(r)
                if not 0 <= r < self.world_size:
                    raise SettingError(
                        f"RowPlacement.with_replicas: rank {r} for row {row} is outside [0, {self.world_size})"
                    )
                if r != owner:
                    keep.add(r)
            if keep:
                clean[row] = tuple(sorted(keep))
        self._replica_map = clean
        rows = sorted(clean)
        self._rep_rows = torch.tensor(rows, dtype=torch.int64)
        lens = torch.tensor([len(clean[r]) for r in rows], dtype=torch.int64)
        self._rep_ptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)])
        self._rep_ranks = torch.tensor([k for r in rows for k in clean[r]], dtype=torch.int64)
        per_rank: list[list[int]] = [[] for _ in range(self.world_size)]
        for row in rows:
            for r in clean[row]:
                per_rank[r].append(row)
        self._replica_ids = [torch.tensor(v, dtype=torch.int64) for v in per_rank]
        self._device_cache = {}
        self._fingerprint = None

    # ----------------------------------------------------------------- queries
    @property
    def has_replicas(self) -> bool:
        """True if any row has a copy outside its owner."""
        return bool(self._replica_map)

    @property
    def replicas(self) -> dict[int, tuple[int, ...]]:
        """``{row: (replica ranks...)}`` (owner excluded)."""
        return dict(self._replica_map)

    def num_owned(self, rank: int) -> int:
        """Number of rows ``rank`` owns."""
        return int(self._counts[rank])

    def local_count(self, rank: int) -> int:
        """Number of rows in ``rank``'s ``local_rows``: owned rows plus replicas."""
        return int(self._counts[rank]) + self._replica_ids[rank].numel()

    def replica_ids(self, rank: int) -> torch.Tensor:
        """Global ids of the replicas ``rank`` holds, in local order (after its owned rows)."""
        return self._replica_ids[rank].clone()

    def owned_ids(self, rank: int) -> torch.Tensor:
        """Global ids ``rank`` owns, in local order (ascending)."""
        start, count = self._starts[rank], self._counts[rank]
        if self._offsets is not None:
            return torch.arange(start, start + count, dtype=torch.int64)
        return self._owned_perm[start : start + count].clone()

    def local_ids(self, rank: int) -> torch.Tensor:
        """Global ids of ``rank``'s local rows (owned, then replicas): ``local_rows = table[local_ids(rank)]``."""
        return torch.cat([self.owned_ids(rank), self._replica_ids[rank]])

    def holders(self, row: int) -> tuple[int, ...]:
        """Ranks holding ``row``: the owner first, then replica ranks."""
        owner = int(self.owner(torch.tensor([int(row)]))[0])
        return (owner, *self._replica_map.get(int(row), ()))

    def _arrays(self, device: torch.device) -> dict[str, torch.Tensor]:
        cached = self._device_cache.get(device)
        if cached is None:
            names = {"rep_rows": self._rep_rows, "rep_ptr": self._rep_ptr, "rep_ranks": self._rep_ranks}
            if self._offsets is not None:
                names["offsets"] = self._offsets
            else:
                names["owner"] = self._owner
                names["local"] = self._local
            cached = {k: v.to(device) for k, v in names.items()}
            self._device_cache[device] = cached
        return cached

    def owner(self, ids: torch.Tensor) -> torch.Tensor:
        """Owner rank of each id (int64, on ``ids``' device); ids must be in range."""
        a = self._arrays(ids.device)
        if "offsets" in a:
            return torch.searchsorted(a["offsets"][1:], ids, right=True)
        return a["owner"][ids].to(torch.int64)

    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(owner rank, local index on the owner)`` of each id."""
        a = self._arrays(ids.device)
        if "offsets" in a:
            owner = torch.searchsorted(a["offsets"][1:], ids, right=True)
            return owner, ids - a["offsets"][owner]
        return a["owner"][ids].to(torch.int64), a["local"][ids]

    def local_index_on(self, rank: int, ids: torch.Tensor) -> torch.Tensor:
        """Index of each id in ``rank``'s local rows (owned or replica); -1 where ``rank`` holds no copy."""
        owner, local = self.locate(ids)
        out = torch.where(owner == rank, local, torch.full_like(local, -1))
        reps = self._replica_ids[rank]
        if reps.numel():
            reps = reps.to(ids.device)
            pos = torch.searchsorted(reps, ids).clamp_(max=reps.numel() - 1)
            hit = (reps[pos] == ids) & (owner != rank)
            out = torch.where(hit, pos + self.num_owned(rank), out)
        return out

    def nearest_holder(self, ids: torch.Tensor, rank: int) -> torch.Tensor:
        """For each id, the rank to read it from as seen from ``rank``: ``rank`` itself if it holds a copy,
        else the holder closest after it on the ring ``rank, rank+1, ...`` (spreads readers over replicas)."""
        owner = self.owner(ids)
        dist = (owner - rank) % self.world_size
        a = self._arrays(ids.device)
        rep_rows = a["rep_rows"]
        if rep_rows.numel() and ids.numel():
            pos = torch.searchsorted(rep_rows, ids).clamp_(max=rep_rows.numel() - 1)
            has = rep_rows[pos] == ids
            which = has.nonzero().squeeze(1)
            if which.numel():
                p = pos[which]
                start, end = a["rep_ptr"][p], a["rep_ptr"][p + 1]
                lens = end - start
                seg = torch.repeat_interleave(torch.arange(p.numel(), device=ids.device), lens)
                seg_start = torch.cumsum(lens, 0) - lens
                flat = start[seg] + (torch.arange(seg.numel(), device=ids.device) - seg_start[seg])
                rdist = (a["rep_ranks"][flat] - rank) % self.world_size
                best = torch.full((p.numel(),), self.world_size, dtype=torch.int64, device=ids.device)
                best.scatter_reduce_(0, seg, rdist, reduce="amin")
                dist[which] = torch.minimum(dist[which], best)
        return (dist + rank) % self.world_size

    def shard(self, table, rank: int):
        """``rank``'s local rows cut from a full table (tensor or NumPy array, memory-mapped ones included)."""
        ids = self.local_ids(rank)
        if isinstance(table, torch.Tensor):
            return table[ids.to(table.device)]
        return torch.from_numpy(np.ascontiguousarray(np.asarray(table)[ids.numpy()]))

    def fingerprint(self) -> int:
        """A 62-bit digest of the placement; ranks compare it to detect differing placements."""
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=8)
            h.update(np.array([self.num_rows, self.world_size], dtype=np.int64).tobytes())
            if self._offsets is not None:
                h.update(self._offsets.numpy().tobytes())
            else:
                h.update(self._owner.numpy().tobytes())
            for arr in (self._rep_rows, self._rep_ptr, self._rep_ranks):
                h.update(arr.numpy().tobytes())
            self._fingerprint = int.from_bytes(h.digest(), "little") >> 2
        return self._fingerprint

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowPlacement) and self.fingerprint() == other.fingerprint()

    def __hash__(self) -> int:
        return self.fingerprint()

    def __repr__(self) -> str:
        kind = "contiguous" if self._offsets is not None else "owner-array"
        reps = f", replicated_rows={len(self._replica_map)}" if self._replica_map else ""
        return f"RowPlacement({kind}, num_rows={self.num_rows}, world_size={self.world_size}{reps})"
