"""`DistNeighborSampler`: multi-hop neighbour sampling over a partitioned graph, SPMD, with no RPC.

Each rank samples its own seeds. At every hop the frontier's nodes owned by the rank are drawn locally; the others
go to their owners in one request/response round over the collective layer (per hop: the request counts and batch
keys, the requested ids, then each request's draw count and the drawn edges, four ``all_to_all`` calls of which two
carry payload), and the rank dedupes and relabels the answers itself. An owner draws a node's neighbours from the
stream keyed by (seed, requester's batch key, hop, global node id) over the node's in-edges in the global order, as
the single-process :class:`~sparsetrain.sampling.NeighborSampler` does, and the relabelling numbers new nodes by first
appearance in the dst-major edge list, as it does: the batches are the single-process ones, whatever the number of
ranks. Every call is collective: every rank calls :meth:`sample` the same number of times (an empty batch joins
the exchanges; :func:`~sparsetrain.partitioned.seeds.rank_batches` pads the short ranks), so no rank waits on a
collective another never calls; a dead or stopped peer is an error after the group's timeout, not a hang.
"""

from __future__ import annotations

import contextlib
import hashlib
import time

import numba
import numpy as np
import torch

from sparsetrain import _args
from sparsetrain.collective.all_to_all import all_to_all, all_to_all_start
from sparsetrain.collective.groups import group_info
from sparsetrain.errors import CollectiveError, InputError
from sparsetrain.partition.load import Partition
from sparsetrain.partitioned.expand import Expander, grown, hop_keys
from sparsetrain.partitioned.relabel import NodeMap, to_sources
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.graph import NODE_TYPE
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.layout import key_stride
from sparsetrain.sampling.minibatch import Block, MiniBatch, one_type_view
from sparsetrain.sampling.sampler import cut_columns

HOP_NODES = ("all", "new")


class DistNeighborSampler:
    """Sample blocks around a rank's seeds on a partitioned graph; the batch of ``SamplerInput(seeds, key=k)`` equals
    ``NeighborSampler(whole_graph, fanouts, seed=seed, ...).sample(SamplerInput(seeds, key=k))``.

    ``part``: this rank's :class:`~sparsetrain.partition.Partition` (rank ``r`` of the group holds part ``r``).
    ``fanouts``, ``replace``, ``weighted``, ``hop_nodes``, ``seed_type``: as the single-process sampler's (a typed
    part: a list for every edge type or a dict per edge type; the seeds' node type is ``seed_type``, the
    ``SamplerInput``'s ``node_type`` or the part's target type; disjoint, temporal and flat-subgraph sampling are not
    offered). ``seed``: the same on every rank. Seeds are global ids the rank owns (typed: ids within their type);
    ``input_nodes`` are global ids, and ``node_owner`` (an extra field of the returned batch, a dict by node type on a
    typed part) gives the part owning each input node, for the feature fetch.
    """

    def __init__(self, part: Partition, fanouts, *, seed: int, replace: bool = False, weighted: bool = False,
                 hop_nodes: str = "all", group=None, seed_type: str | None = None) -> None:
        if hop_nodes not in HOP_NODES:
            raise InputError(f"hop_nodes={hop_nodes!r}; give 'all' (DGL) or 'new' (PyG)")
        seed = _args.integer("DistNeighborSampler", "seed", seed, low=-(2**63), high=2**63 - 1,
                             error=InputError)  # the same on every rank; True or 1.9 are refused
        replace = _args.boolean("DistNeighborSampler", "replace", replace)
        weighted = _args.boolean("DistNeighborSampler", "weighted", weighted)
        if weighted and part.dataset.graph.weights is None:
            raise InputError(f"{part.path}: weighted=True but the part has no edge weights; partition a "
                             "dataset with edge weights or pass weighted=False")
        info = group_info(group)
        if info.world_size != part.num_parts or info.rank != part.rank:
            raise InputError(f"{part.path}: rank {info.rank} of {info.world_size} holds part {part.rank} of "
                             f"{part.num_parts}; run one rank per part and load part = rank")
        self.part, self.group, self.seed = part, group, seed
        graph = part.dataset.graph
        plan = Fanouts.of(fanouts).for_graph(graph)
        self.kernel_fanouts = plan.kernel_array(graph)  # [hops, edge types]
        self.fanouts = plan  # as the single-process sampler holds them
        self.types = part.types
        self._key_stride = key_stride(part.types.edge_types)
        self.seed_type = seed_type if seed_type is not None else part.target_type
        self.hop_nodes = hop_nodes
        self.rank, self.world = info.rank, info.world_size
        self._expand = Expander(part, replace=replace, weighted=weighted)
        self._batch = NodeMap(self._expand.ids)
        self._src_owner = np.empty(0, np.int64)  # scratch kept from batch to batch
        self._tlocal = np.empty(0, np.int64)  # a batch node's id within its type (typed parts)
        self.sent_bytes = 0  # request ids and served rows this rank sent to peers, over all calls
        self.exchange_s = 0.0  # wall seconds in the exchanges (moving bytes, waiting for peers), over all calls
        # every rank must draw with the same settings, or the owners' draws would silently be another sampler's
        settings = repr((seed, self.kernel_fanouts.tolist(), bool(replace), bool(weighted), hop_nodes)).encode()
        self._fingerprint = int.from_bytes(hashlib.sha256(settings).digest()[:7], "little")

    @property
    def num_hops(self) -> int:
        return int(self.kernel_fanouts.shape[0])

    def _seed_index(self, inp: SamplerInput) -> int:
        name = inp.node_type or self.seed_type or NODE_TYPE
        if name not in self.types.node_types:
            raise InputError(f"the seeds' node type {name!r} is not one of the part's node types "
                             f"{self.types.node_types}; pass seed_type= or SamplerInput(node_type=...)")
        return self.types.node_types.index(name)

    def sample(self, inp: SamplerInput) -> MiniBatch:
        """The blocks of ``inp.seeds`` (unique global ids owned by this rank, of one node type; may be empty) with key
        ``inp.key``. Collective over the group."""
        if not isinstance(inp, SamplerInput) or inp.key is None or isinstance(inp.seeds, dict):
            raise InputError("pass SamplerInput(seeds, key=k) with a key: every rank's batches need keys that "
                             "never collide (sparsetrain.partitioned.rank_batches makes them)")
        if not isinstance(inp.seeds, torch.Tensor) or inp.seeds.dtype.is_floating_point or inp.seeds.dtype.is_complex \
                or inp.seeds.dtype == torch.bool:
            raise InputError(f"seeds of dtype {getattr(inp.seeds, 'dtype', type(inp.seeds).__name__)}: give "
                             "node ids as an integer tensor (1.5 would be read as node 1)")
        t0 = self._seed_index(inp)
        seeds = inp.seeds.to("cpu", torch.int64)
        n_type = int(self.types.type_offset[t0 + 1] - self.types.type_offset[t0])
        nodes = seeds.numpy() + int(self.types.type_offset[t0])
        local, foreign = self._expand.local_ids(nodes)
        outside = np.flatnonzero((seeds.numpy() < 0) | (seeds.numpy() >= n_type))
        if len(outside):  # (an id past its type's end would be another type's node in the flat id space)
            foreign = int(outside[0]) if foreign < 0 else min(foreign, int(outside[0]))
        if foreign >= 0:
            raise InputError(f"{self.part.path}: seed {seeds[foreign]} is not owned by part {self.rank}; pass "
                             "the part's own nodes (Partition.owned_global(), rank_batches)")
        if len(np.unique(nodes)) != len(nodes):
            raise InputError("seeds has repeated ids; pass unique seeds (e.g. torch.unique(seeds))")
        batch = self._batch
        batch.start(nodes, local)
        T = len(self.types.node_types)
        by_type = [np.empty(0, np.int64) for _ in range(T)]  # each type's batch ids, in the type's local order
        by_type[t0] = np.arange(len(nodes))
        counts = np.zeros(T, np.int64)
        counts[t0] = len(nodes)
        if T > 1:
            self._tlocal = grown(self._tlocal, len(nodes))
            self._tlocal[: len(nodes)] = np.arange(len(nodes))
        first = np.zeros(T, np.int64)
        layers = []
        for hop in range(self.num_hops):
            before = counts.copy()
            edge_index, edge_ids, spans = self._hop(batch, by_type, first, counts, inp.key, hop)
            layers.append((edge_index, edge_ids, spans, before, counts.copy()))
            if self.hop_nodes == "new":
                first = before
        return self._assemble(inp.seeds, t0, batch, by_type, layers)

    def _assemble(self, seeds, t0: int, batch: NodeMap, by_type, layers) -> MiniBatch:
        """The batch, written by type as the single-process sampler's ``_assemble`` writes it (a homogeneous part's
        user's view is the batch's own attributes)."""
        types, edge_types = self.types.node_types, self.types.edge_types
        blocks, edges_per_hop = [], {et: [] for et in edge_types}
        for hop, (ei, ids, spans, before, after) in enumerate(layers):
            ei, ids = torch.from_numpy(ei), torch.from_numpy(ids)
            edge_index, edge_ids = {}, {}
            for k, et in enumerate(edge_types):
                # an edge type sampled at this hop, even if no node had such edges
                if self.kernel_fanouts[hop, k] != 0:
                    a, b = spans.get(k, (0, 0))
                    edge_index[et], edge_ids[et] = cut_columns(ei, a, b), cut_columns(ids, a, b)
                edges_per_hop[et].append(int(edge_index[et].shape[1]) if et in edge_index else 0)
            blocks.append(Block(edge_index_by_type=edge_index, edge_ids_by_type=edge_ids,
                                num_src_by_type={t: int(after[i]) for i, t in enumerate(types)},
                                num_dst_by_type={t: int(before[i]) for i, t in enumerate(types)}))
        seed_counts = np.zeros(len(types), np.int64)
        seed_counts[t0] = len(seeds)
        counts = np.stack([seed_counts] + [after for *_, after in layers])
        new_per_hop = np.diff(counts, axis=0, prepend=0)
        offset = self.types.type_offset
        input_nodes = {t: torch.from_numpy(batch.nodes[by_type[i]] - offset[i]) for i, t in enumerate(types)}
        mb = MiniBatch(seeds_by_type={types[t0]: seeds}, input_nodes_by_type=input_nodes, blocks=blocks[::-1],
                       seed_type=types[t0],
                       nodes_per_hop={t: new_per_hop[:, i].tolist() for i, t in enumerate(types)},
                       edges_per_hop=edges_per_hop)
        node_owner = {t: torch.from_numpy(batch.owner[by_type[i]]) for i, t in enumerate(types)}
        mb.node_owner = one_type_view(node_owner, NODE_TYPE)
        return mb

    @contextlib.contextmanager
    def _failures(self, hop: int):
        """Time an exchange; a failed one (a peer died, stopped past the group's timeout, or sampled a different number
        of batches) is one line naming this rank and the hop."""
        start = time.perf_counter()
        try:
            yield
        except RuntimeError as exc:
            raise CollectiveError(
                f"distributed sampling, hop {hop}: the exchange failed on rank {self.rank} of {self.world} "
                f"({_first_line(exc)}); a peer rank died, stopped, or did not reach this batch within the group's "
                "timeout: check the other ranks' logs, then restart the job from its last checkpoint") from None
        finally:
            self.exchange_s += time.perf_counter() - start

    def _exchange(self, x: np.ndarray, send, recv, hop: int) -> np.ndarray:
        """One all-to-all of the hop's round."""
        with self._failures(hop):
            return all_to_all(torch.from_numpy(x), send, recv, self.group).numpy()

    def _start_exchange(self, x: np.ndarray, send, recv, hop: int):
        """:meth:`_exchange` in the background (gloo's threads move the rows while this one draws); returns the wait."""
        with self._failures(hop):
            received = all_to_all_start(torch.from_numpy(x), send, recv, self.group)

        def wait() -> np.ndarray:
            with self._failures(hop):
                return received().numpy()

        return wait

    def _keys(self, batch_keys, hop: int, edge_types) -> np.ndarray:
        """The single-process hop keys of (batch key, edge type) pairs."""
        return hop_keys(self.seed, batch_keys, hop, edge_types, self._key_stride)

    def _hop(self, batch: NodeMap, by_type: list, first: np.ndarray, counts: np.ndarray, key: int, hop: int):
        """Draw the in-edges of the frontier (per edge type sampled at this hop, its destination type's nodes from
        ``first`` on, as the single-process sampler's segments) and relabel them: this rank's own nodes here, the
        others by their owners in one request/response round. Returns (edge_index, edge_ids, {edge type: edge
        span}); ``counts`` and ``by_type`` grow by the new nodes."""
        W, rank = self.world, self.rank
        types, fan = self.types, self.kernel_fanouts[hop]
        K = len(types.edge_types)
        seg_et, seg_len, items = [], [], []
        for k in range(K):
            d = int(types.et_dst[k])
            if fan[k] != 0 and counts[d] > first[d]:
                seg_et.append(k)
                seg_len.append(int(counts[d] - first[d]))
                items.append(by_type[d][first[d] : counts[d]])
        item_ids = np.concatenate(items) if items else np.zeros(0, np.int64)
        item_et = np.repeat(np.array(seg_et, np.int64), seg_len)
        frontier, frontier_owner = batch.nodes[item_ids], batch.owner[item_ids]
        order, per_owner = _group_by_owner(frontier_owner, W)
        bounds = np.concatenate([[0], np.cumsum(per_owner)])
        mine = order[bounds[rank] : bounds[rank + 1]]
        remote = np.concatenate([order[: bounds[rank]], order[bounds[rank + 1] :]])  # grouped by owner
        send = per_owner.copy()
        send[rank] = 0
        # per peer, the requests of each edge type (in edge type order within a peer: the items are)
        send_by_type = np.bincount(frontier_owner[remote] * K + item_et[remote], minlength=W * K).reshape(W, K)
        header = np.concatenate([np.stack([send, np.full(W, key, np.int64), np.full(W, self._fingerprint)], 1),
                                 send_by_type], 1)
        got = self._exchange(header, [1] * W, [1] * W, hop)
        recv, their_keys, recv_by_type = got[:, 0], got[:, 1], got[:, 3:]
        if (got[:, 2] != self._fingerprint).any():
            others = np.flatnonzero(got[:, 2] != self._fingerprint).tolist()
            raise InputError(f"rank {rank}: ranks {others} sample with another seed, fanouts, replace, "
                             "weighted or hop_nodes; give every rank's DistNeighborSampler the same settings")
        # serve the peers first: they wait for these answers
        requests = self._exchange(frontier[remote], send, recv, hop)
        peer, et = np.nonzero(recv_by_type)  # row-major: peer by peer, edge type by edge type
        served = self._expand.plan(requests, recv_by_type[peer, et], et, fan)
        served_rows = self._expand.rows(served, self._keys(their_keys[peer], hop, et))
        answer_counts = self._exchange(served.counts, recv, send, hop)
        served_splits, answer_splits = _segment_sums(served.counts, recv), _segment_sums(answer_counts, send)
        answers = self._start_exchange(served_rows, served_splits, answer_splits, hop)
        self.sent_bytes += 8 * (int(send.sum()) + int(recv.sum()) + served_rows.size + (3 + K) * W)
        # this rank's own draws, while the answers travel, straight to their places in the hop's edge list
        own_et, own_len = _runs(item_et[mine])
        own = self._expand.plan(frontier[mine], own_len, own_et, fan, local=batch.local[item_ids[mine]])
        n_items = len(item_ids)
        item_counts = np.empty(n_items, np.int64)
        item_counts[mine], item_counts[remote] = own.counts, answer_counts
        out_at = np.cumsum(item_counts) - item_counts
        total = int(item_counts.sum())
        edge_index, edge_ids = np.empty((2, total), np.int64), np.empty(total, np.int64)
        self._src_owner = grown(self._src_owner, total)
        src_owner = self._src_owner[:total]
        self._expand.draw(own, self._keys([key] * len(own_et), hop, own_et), out_at[mine], edge_index[0], src_owner,
                          edge_ids, local_sources=True)
        ids = self._expand.ids
        to_sources(answers(), answer_counts, out_at[remote], rank, len(ids.owned.ids), *ids.owned, *ids.halo,
                   edge_index[0], src_owner, edge_ids)
        dst = np.repeat(item_ids, item_counts)
        before = batch.count
        batch.relabel(edge_index[0], src_owner)
        ends = np.concatenate([[0], np.cumsum(seg_len)]).astype(np.int64)
        edge_ends = np.concatenate([[0], np.cumsum(item_counts)])[ends]
        spans = {k: (int(edge_ends[s]), int(edge_ends[s + 1])) for s, k in enumerate(seg_et)}
        if len(types.node_types) == 1:  # batch ids are the ids within the one type
            counts[0] = batch.count
            by_type[0] = np.arange(batch.count)
            edge_index[1] = dst
            return edge_index, edge_ids, spans
        new = np.arange(before, batch.count)
        self._tlocal = grown(self._tlocal, batch.count, keep=before)
        new_type = np.searchsorted(types.type_offset, batch.nodes[before : batch.count], side="right") - 1
        for t in np.unique(new_type):
            added = new[new_type == t]
            self._tlocal[added] = counts[t] + np.arange(len(added))
            by_type[t] = np.concatenate([by_type[t], added])
            counts[t] += len(added)
        tlocal = self._tlocal
        edge_index[0] = tlocal[edge_index[0]]
        edge_index[1] = tlocal[dst]
        return edge_index, edge_ids, spans


def _runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of equal consecutive ``values``: (value, length) of each."""
    if not len(values):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(values)) + 1])
    return values[starts].astype(np.int64), np.diff(np.concatenate([starts, [len(values)]])).astype(np.int64)


@numba.njit(cache=True, nogil=True)
def _group_by_owner(owner, world):
    """The positions of ``owner`` grouped by owner (ascending), in order within a group, and each group's size."""
    sizes = np.zeros(world, np.int64)
    for i in range(owner.shape[0]):
        sizes[owner[i]] += 1
    at = np.cumsum(sizes) - sizes
    order = np.empty(owner.shape[0], np.int64)
    for i in range(owner.shape[0]):
        order[at[owner[i]]] = i
        at[owner[i]] += 1
    return order, sizes


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _segment_sums(values: np.ndarray, lengths: np.ndarray) -> list[int]:
    """Sums of consecutive segments of ``values`` of the given lengths."""
    ends = np.cumsum(lengths)
    csum = np.concatenate([[0], np.cumsum(values)])
    return (csum[ends] - csum[ends - lengths]).astype(np.int64).tolist()
