"""`PartitionedFeatures`: the feature table of a partitioned graph, each rank holding its owned rows.

A :class:`~sparsetrain.storage.FeatureSource` over global node ids. A rank reads its own rows from the part's
memory-mapped ``node.<t>.owned_features.npy``; a remote row comes from its owner in one request/response round (per
gather: the request counts with each rank's failure flag, then the collective layer's remote-row fetch,
:func:`~sparsetrain.collective.remote_rows.fetch_rows`, as :class:`~sparsetrain.collective.ShardedFeatures` reads its
rows: the requested global ids, the rows back), unless it is in the static cache of hot halo rows filled at
construction. A peer that died or never arrived is the collective layer's one dead-peer rule: a ``CollectiveError``
line naming this rank and the fix. The requester names each row's owner (the
sampler's ``mb.node_owner``) and sends global ids, which the owner translates itself: no rank holds a global table.
Like :class:`~sparsetrain.collective.ShardedFeatures`, every ``gather`` is collective (every rank calls it as often,
an empty ``ids`` is fine) and the cache is static, so a batch of hits on one rank never skips an exchange its peers
wait in. Bad input on any rank is raised on every rank after the first exchange.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sparsetrain import _args
from sparsetrain.collective.groups import comm_device, group_info
from sparsetrain.collective.remote_rows import exchange, fetch_rows, group_by_owner
from sparsetrain.errors import InputError, SparsetrainError
from sparsetrain.partition.load import Partition
from sparsetrain.sampling.graph import type_named
from sparsetrain.storage.base import FeatureSource, check_ids


def halo_hotness(part: Partition, node_type: str | None = None) -> np.ndarray:
    """Per halo node of ``node_type`` (local order; a homogeneous part: its one type), how many of the part's in-edges
    it is the source of: how often a one-hop draw of the part's nodes reaches it (its inclusion probability up to the
    fanout's scaling)."""
    types = part.types
    t = types.index(node_type)
    indices = part.dataset.graph.indices.numpy()
    ptr = part.dataset.graph.indptr.numpy()
    n_owned, counts = int(types.num_owned[t]), np.zeros(int(types.num_halo[t]), np.int64)
    for k in np.flatnonzero(types.et_src == t):
        a, b = int(ptr[types.col_offset[k]]), int(ptr[types.col_offset[k + 1]])
        ids = indices[a:b]
        counts += np.bincount(ids[ids >= n_owned].astype(np.int64) - n_owned, minlength=len(counts))
    return counts


class PartitionedFeatures(FeatureSource):
    """Rows of every node of a partitioned graph, by global id; this rank holds ``part``'s owned rows.

    ``cache_rows``: how many halo rows to keep locally, the ones with most in-edges into the part
    (:func:`halo_hotness`); fetched once here, so construction is collective. ``stats`` counts per gather the
    distinct remote rows served from the cache (``hits``) or fetched (``misses``) and the fetched rows' bytes
    (``bytes_moved``); ``bytes_exchanged`` adds every id and row this rank sent or received (the cache's filling
    included, also kept apart as ``cache_fill_bytes``).
    """

    collective = True  # gather must be called on every rank, even with no ids

    def __init__(self, part: Partition, *, group=None, cache_rows: int = 0, node_type: str | None = None) -> None:
        cache_rows = _args.integer("PartitionedFeatures", "cache_rows", cache_rows, low=0, error=InputError)
        types = part.types
        t = types.index(node_type)
        local = part.features_by_type.get(types.node_types[t])
        if local is None:
            what = type_named(types.node_types[t], end="", unnamed="the part")
            raise InputError(f"{part.path}: {what} has no owned features; partition a dataset that has "
                             "node features (of that type)")
        super().__init__((int(types.type_offset[t + 1] - types.type_offset[t]), *local.row_shape), local.dtype, "cpu")
        info = group_info(group)
        if info.world_size != part.num_parts or info.rank != part.rank:
            raise InputError(f"{part.path}: rank {info.rank} of {info.world_size} holds part {part.rank} of "
                             f"{part.num_parts}; run one rank per part and load part = rank")
        self.part, self.local, self.group = part, local, group
        self.rank, self.world = info.rank, info.world_size
        self._info = info
        self._comm = comm_device(group, torch.device("cpu")) if info.distributed else torch.device("cpu")
        self.node_type = types.node_types[t]
        self._owned = part.owned_of_type(self.node_type).numpy()  # ids within the type (a homogeneous part: global)
        h0, h1 = int(types.halo_start[t]), int(types.halo_start[t] + types.num_halo[t])
        self._halo = part.local_to_global[part.num_owned + h0 : part.num_owned + h1].numpy() - int(types.type_offset[t])
        self._halo_owner = part.halo_owner[h0:h1].numpy().astype(np.int64)
        self.bytes_exchanged = 0
        self._numel = math.prod(self.row_shape)
        hot = np.sort(np.argsort(-halo_hotness(part, self.node_type), kind="stable")[: max(0, int(cache_rows))])
        self.cached_ids = np.zeros(0, np.int64)  # empty while the cache fills
        self._cache = torch.empty((0, self._numel), dtype=self.dtype)
        rows = self._exchange(self._halo[hot], self._halo_owner[hot])
        self.cached_ids, self._cache = self._halo[hot], rows
        self.cache_fill_bytes = self.bytes_exchanged
        self.stats.reset()

    @property
    def cache_bytes(self) -> int:
        """Bytes held by the hot-row cache."""
        return self._cache.numel() * self._cache.element_size()

    def gather(self, ids, *, out: torch.Tensor | None = None, owner: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``ids`` (global ids, any order, duplicates, possibly empty) as ``[len(ids), *row_shape]``.

        ``owner``: the part owning each id (a batch's ``node_owner``); without it, every id must be owned by this
        part or in its halo. Collective over the group; a bad ``ids``, ``owner`` or ``out`` raises its one-line error on
        its rank and :class:`~sparsetrain.errors.InputError` naming that rank on the others."""
        error = None
        try:
            ids = check_ids(ids, self.num_rows, f"{type(self).__name__}.gather")
            result = self._output(ids.numel(), out)
            nodes = ids.cpu().numpy().astype(np.int64, copy=False)
            owners = self._owners(nodes, owner)
        except SparsetrainError as exc:
            error, nodes, owners = exc, np.zeros(0, np.int64), np.zeros(0, np.int64)
        rows = self._exchange(nodes, owners, failed=error)
        result.view(len(nodes), self._numel).copy_(rows)
        self.stats.gathers += 1
        self.stats.rows_served += len(nodes)
        self.stats.bytes_served += len(nodes) * self.row_bytes
        return result

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        # FeatureSource.gather calls this only for a store that does not override gather; this one does, since every
        # rank must join the exchange even with no ids of its own
        raise InputError("PartitionedFeatures reads rows through gather(ids, owner=...), which every rank calls "
                         "together; call gather, not _gather_into")

    def _owners(self, nodes: np.ndarray, owner) -> np.ndarray:
        if owner is not None:
            owner = torch.as_tensor(owner).cpu().numpy().astype(np.int64, copy=False)
            if owner.shape != nodes.shape or (owner.size and (owner.min() < 0 or owner.max() >= self.world)):
                raise InputError(f"{type(self).__name__}.gather: owner= must hold one part in [0, {self.world}) "
                                 f"per id ({len(nodes)} ids); pass the batch's node_owner")
            return owner
        owners = np.full(len(nodes), -1, np.int64)
        owners[_member(self._owned, nodes)] = self.rank
        pos = np.searchsorted(self._halo, nodes).clip(max=max(len(self._halo) - 1, 0))
        in_halo = _member(self._halo, nodes)
        owners[in_halo] = self._halo_owner[pos[in_halo]]
        if (owners < 0).any():
            bad = int(nodes[owners < 0][0])
            raise InputError(f"{type(self).__name__}.gather: node {bad} is neither owned by part {self.rank} nor "
                             "in its halo; pass owner= (the sampled batch's node_owner)")
        return owners

    def _exchange(self, nodes: np.ndarray, owners: np.ndarray, failed: BaseException | None = None) -> torch.Tensor:
        """Rows of ``nodes`` (``[len(nodes), numel]``): own rows read here, cached ones copied, the rest fetched
        from their owners in one round; ``failed``: this rank's input error, raised on every rank after the first
        exchange."""
        W = self.world
        uniq, first, inverse = np.unique(nodes, return_index=True, return_inverse=True)
        own = owners[first]
        remote = own != self.rank
        cached = remote & _member(self.cached_ids, uniq)
        miss = np.flatnonzero(remote & ~cached)
        order, send_t = group_by_owner(torch.from_numpy(own[miss]), W)
        miss, send = miss[order.numpy()], send_t.numpy()
        header = np.stack([send, np.full(W, failed is not None, np.int64)], 1)
        got = self._exchange_rows(torch.from_numpy(header), [1] * W, [1] * W, "header").numpy()
        if got[:, 1].any():
            if failed is not None:
                raise failed
            others = np.flatnonzero(got[:, 1]).tolist()
            raise InputError(f"{type(self).__name__}.gather: ranks {others} passed bad ids, owners or out; see "
                             "their error")
        recv = got[:, 0]
        _, served, answers = fetch_rows(torch.from_numpy(uniq[miss]), send.tolist(), recv.tolist(), self._serve,
                                        op=f"{type(self).__name__}.gather", info=self._info, device=self._comm)
        answers = answers.cpu()
        rows = torch.empty((len(uniq), self._numel), dtype=self.dtype)
        mine = np.flatnonzero(~remote)
        rows[torch.from_numpy(mine)] = self._read_own(np.searchsorted(self._owned, uniq[mine]))
        hit = np.flatnonzero(cached)
        rows[torch.from_numpy(hit)] = self._cache[torch.from_numpy(np.searchsorted(self.cached_ids, uniq[hit]))]
        rows[torch.from_numpy(miss)] = answers
        self.stats.hits += len(hit)
        self.stats.misses += len(miss)
        self.stats.bytes_moved += answers.numel() * answers.element_size()
        self.bytes_exchanged += (8 * int(send.sum() + recv.sum() + 4 * W)
                                 + (served.numel() + answers.numel()) * served.element_size())
        return rows[torch.from_numpy(inverse.reshape(-1))]

    def _read_own(self, local: np.ndarray) -> torch.Tensor:
        if not len(local):
            return torch.empty((0, self._numel), dtype=self.dtype)
        return self.local.gather(torch.from_numpy(local.astype(np.int64, copy=False))).reshape(len(local), self._numel)

    def _serve(self, asked: torch.Tensor) -> torch.Tensor:
        """This part's rows of the global ids ``asked`` of it (the owner translates them); an id it does not own means
        the ranks loaded different partitions."""
        requests = asked.cpu().numpy()
        if not _member(self._owned, requests).all():
            raise InputError(f"{type(self).__name__}: rank {self.rank} was asked for rows of nodes it does not "
                             "own; the ranks' partitions differ (every rank must load the same folder)")
        return self._read_own(np.searchsorted(self._owned, requests))

    def _exchange_rows(self, x: torch.Tensor, send, recv, stage: str) -> torch.Tensor:
        """One all-to-all over the group under the dead-peer rule (a failure is one ``CollectiveError`` line)."""
        return exchange(x, send, recv, op=f"{type(self).__name__}.gather", stage=stage, info=self._info,
                        device=self._comm).cpu()

    def __repr__(self) -> str:
        return (f"PartitionedFeatures(shape={list(self.shape)}, dtype={self.dtype}, part={self.rank} of {self.world}, "
                f"cached_rows={len(self.cached_ids)})")


def _member(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Whether each of ``ids`` is in the ascending ``sorted_ids``."""
    if not len(sorted_ids):
        return np.zeros(len(ids), bool)
    pos = np.searchsorted(sorted_ids, ids).clip(max=len(sorted_ids) - 1)
    return sorted_ids[pos] == ids
