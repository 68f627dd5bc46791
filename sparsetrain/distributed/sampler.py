"""`DistNeighborSampler`: multi-hop neighbour sampling over a partitioned graph, SPMD, with no RPC.

Each rank samples its own seeds. At every hop the frontier's nodes owned by the rank are drawn locally; the others
go to their owners in one request/response round over the collective layer (per hop: the request counts and batch
keys, the requested ids, then each request's draw count and the drawn edges, four ``all_to_all`` calls of which two
carry payload), and the rank dedupes and relabels the answers itself. An owner draws a node's neighbours from the
stream keyed by (seed, requester's batch key, hop, global node id) over the node's in-edges in the global order, as
the single-process :class:`~sparsetrain.sampling.NeighborSampler` does, and the relabelling numbers new nodes by first
appearance in the dst-major edge list, as it does: the batches are the single-process ones, whatever the number of
ranks. Every call is collective: every rank calls :meth:`sample` the same number of times (an empty batch joins
the exchanges; :func:`~sparsetrain.distributed.seeds.rank_batches` pads the short ranks), so no rank waits on a
collective another never calls; a dead or stopped peer is an error after the group's timeout, not a hang.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Sequence

import numba
import numpy as np
import torch

from sparsetrain import _args
from sparsetrain.collective.all_to_all import all_to_all, all_to_all_start
from sparsetrain.collective.groups import group_info
from sparsetrain.distributed.errors import DistSamplingError, PeerLostError
from sparsetrain.distributed.expand import Expander, grown, hop_keys
from sparsetrain.distributed.relabel import NodeMap, to_sources
from sparsetrain.partition.load import Partition
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.minibatch import Block, MiniBatch

HOP_NODES = ("all", "new")


class DistNeighborSampler:
    """Sample blocks around a rank's seeds on a partitioned graph; the batch of ``SamplerInput(seeds, key=k)`` equals
    ``NeighborSampler(whole_graph, fanouts, seed=seed, ...).sample(SamplerInput(seeds, key=k))``.

    ``part``: this rank's :class:`~sparsetrain.partition.Partition` (rank ``r`` of the group holds part ``r``).
    ``fanouts``, ``replace``, ``weighted``, ``hop_nodes``: as the single-process sampler's (homogeneous graphs;
    disjoint, temporal and flat-subgraph sampling are not offered). ``seed``: the same on every rank. Seeds are global
    ids the rank owns; ``input_nodes`` and the seeds of the batch are global ids, and ``node_owner`` (an extra field
    of the returned batch) gives the part owning each input node, for the feature fetch.
    """

    def __init__(self, part: Partition, fanouts: Sequence[int], *, seed: int, replace: bool = False,
                 weighted: bool = False, hop_nodes: str = "all", group=None) -> None:
        if part.dataset.is_typed:
            raise DistSamplingError(f"{part.path}: typed parts are not supported yet; partition a homogeneous graph")
        if hop_nodes not in HOP_NODES:
            raise DistSamplingError(f"hop_nodes={hop_nodes!r}; give 'all' (DGL) or 'new' (PyG)")
        seed = _args.integer("DistNeighborSampler", "seed", seed, low=-(2**63), high=2**63 - 1,
                             error=DistSamplingError)  # the same on every rank; True or 1.9 are refused
        replace = _args.boolean("DistNeighborSampler", "replace", replace)
        weighted = _args.boolean("DistNeighborSampler", "weighted", weighted)
        if weighted and part.dataset.graph.weights is None:
            raise DistSamplingError(f"{part.path}: weighted=True but the part has no edge weights; partition a "
                                    "dataset with edge weights or pass weighted=False")
        info = group_info(group)
        if info.world_size != part.num_parts or info.rank != part.rank:
            raise DistSamplingError(f"{part.path}: rank {info.rank} of {info.world_size} holds part {part.rank} of "
                                    f"{part.num_parts}; run one rank per part and load part = rank")
        self.part, self.group, self.seed = part, group, seed
        self.fanouts = Fanouts.of(fanouts).for_graph(part.dataset.graph).as_list()
        self.hop_nodes = hop_nodes
        self.rank, self.world = info.rank, info.world_size
        self._expand = Expander(part, replace=replace, weighted=weighted)
        self._batch = NodeMap(self._expand.ids)
        self._src_owner = np.empty(0, np.int64)  # scratch kept from batch to batch
        self.sent_bytes = 0  # request ids and served rows this rank sent to peers, over all calls
        self.exchange_s = 0.0  # wall seconds in the exchanges (moving bytes, waiting for peers), over all calls
        # every rank must draw with the same settings, or the owners' draws would silently be another sampler's
        settings = repr((seed, self.fanouts, bool(replace), bool(weighted), hop_nodes)).encode()
        self._fingerprint = int.from_bytes(hashlib.sha256(settings).digest()[:7], "little")

    @property
    def num_hops(self) -> int:
        return len(self.fanouts)

    def sample(self, inp: SamplerInput) -> MiniBatch:
        """The blocks of ``inp.seeds`` (unique global ids owned by this rank; may be empty) with key ``inp.key``.
        Collective over the group."""
        if not isinstance(inp, SamplerInput) or inp.key is None or isinstance(inp.seeds, dict):
            raise DistSamplingError("pass SamplerInput(seeds, key=k) with a key: every rank's batches need keys that "
                                    "never collide (sparsetrain.distributed.rank_batches makes them)")
        if not isinstance(inp.seeds, torch.Tensor) or inp.seeds.dtype.is_floating_point or inp.seeds.dtype.is_complex \
                or inp.seeds.dtype == torch.bool:
            raise DistSamplingError(f"seeds of dtype {getattr(inp.seeds, 'dtype', type(inp.seeds).__name__)}: give "
                                    "node ids as an integer tensor (1.5 would be read as node 1)")
        seeds = inp.seeds.to("cpu", torch.int64)
        nodes = seeds.numpy()
        local, foreign = self._expand.local_ids(nodes)
        if foreign >= 0:
            raise DistSamplingError(f"{self.part.path}: seed {nodes[foreign]} is not owned by part {self.rank}; pass "
                                    "the part's own nodes (Partition.owned_global(), rank_batches)")
        if len(np.unique(nodes)) != len(nodes):
            raise DistSamplingError("seeds has repeated ids; pass unique seeds (e.g. torch.unique(seeds))")
        batch = self._batch
        batch.start(nodes, local)
        first, layers = 0, []
        for hop, fanout in enumerate(self.fanouts):
            before = batch.count
            edge_index, edge_ids = self._hop(batch, first, inp.key, hop, fanout)
            layers.append((torch.from_numpy(edge_index), torch.from_numpy(edge_ids), before, batch.count))
            if self.hop_nodes == "new":
                first = before
        blocks = [Block(ei, after, before, ids) for ei, ids, before, after in reversed(layers)]
        mb = MiniBatch(seeds=inp.seeds, input_nodes=torch.from_numpy(batch.nodes[: batch.count].copy()), blocks=blocks)
        mb.node_owner = torch.from_numpy(batch.owner[: batch.count].copy())
        return mb

    @contextlib.contextmanager
    def _failures(self, hop: int):
        """Time an exchange; a failed one (a peer died, stopped past the group's timeout, or sampled a different number
        of batches) is one line naming this rank and the hop."""
        start = time.perf_counter()
        try:
            yield
        except RuntimeError as exc:
            raise PeerLostError(
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

    def _hop(self, batch: NodeMap, first: int, key: int, hop: int, fanout: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw the in-edges of the frontier (the batch's nodes from ``first`` on) and relabel them: this rank's own
        nodes here, the others by their owners in one request/response round. Returns (edge_index, edge_ids)."""
        W, rank = self.world, self.rank
        frontier = batch.nodes[first : batch.count]
        order, per_owner = _group_by_owner(batch.owner[first : batch.count], W)
        bounds = np.concatenate([[0], np.cumsum(per_owner)])
        mine = order[bounds[rank] : bounds[rank + 1]]
        remote = np.concatenate([order[: bounds[rank]], order[bounds[rank + 1] :]])  # grouped by owner
        send = per_owner.copy()
        send[rank] = 0
        header = np.stack([send, np.full(W, key, np.int64), np.full(W, self._fingerprint)], 1)
        got = self._exchange(header, [1] * W, [1] * W, hop)
        recv, their_keys = got[:, 0], got[:, 1]
        if (got[:, 2] != self._fingerprint).any():
            others = np.flatnonzero(got[:, 2] != self._fingerprint).tolist()
            raise DistSamplingError(f"rank {rank}: ranks {others} sample with another seed, fanouts, replace, "
                                    "weighted or hop_nodes; give every rank's DistNeighborSampler the same settings")
        # serve the peers first: they wait for these answers
        requests = self._exchange(frontier[remote], send, recv, hop)
        served = self._expand.plan(requests, fanout)
        served_rows = self._expand.rows(served, recv, hop_keys(self.seed, their_keys, hop), fanout)
        answer_counts = self._exchange(served.counts, recv, send, hop)
        served_splits, answer_splits = _segment_sums(served.counts, recv), _segment_sums(answer_counts, send)
        answers = self._start_exchange(served_rows, served_splits, answer_splits, hop)
        self.sent_bytes += 8 * (int(send.sum()) + int(recv.sum()) + served_rows.size + 2 * W)
        # this rank's own draws, while the answers travel, straight to their places in the hop's edge list
        own = self._expand.plan(frontier[mine], fanout, cols=batch.local[first : batch.count][mine])
        counts = np.empty(len(frontier), np.int64)
        counts[mine], counts[remote] = own.counts, answer_counts
        out_at = np.cumsum(counts) - counts
        total = int(counts.sum())
        edge_index, edge_ids = np.empty((2, total), np.int64), np.empty(total, np.int64)
        self._src_owner = grown(self._src_owner, total)
        src_owner = self._src_owner[:total]
        self._expand.draw(own, [len(mine)], hop_keys(self.seed, [key], hop), fanout, out_at[mine], edge_index[0],
                          src_owner, edge_ids, local_sources=True)
        ids = self._expand.ids
        to_sources(answers(), answer_counts, out_at[remote], rank, len(ids.owned.ids), *ids.owned, *ids.halo,
                   edge_index[0], src_owner, edge_ids)
        edge_index[1] = np.repeat(np.arange(first, first + len(frontier)), counts)
        batch.relabel(edge_index[0], src_owner)
        return edge_index, edge_ids


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
