"""`HeteroNeighborSampler`: fused multi-hop neighbor sampling over a typed graph into a `HeteroMiniBatch`."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from sparsetrain.sampling import hetero_kernels as hk
from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.graph import DAMAGED, CSCGraph, EdgeType
from sparsetrain.sampling.hetero_minibatch import HeteroBlock, HeteroMiniBatch
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.rng import hop_key
from sparsetrain.sampling.sampler import _threads_for

_SEED_MASK = (1 << 63) - 1
HOP_SEMANTICS = ("dgl", "pyg")
_MAX_EDGE_TYPES = 1 << 20  # hop keys are (hop, edge type) pairs packed into one counter


def normalize_fanouts(graph: CSCGraph, fanouts) -> dict[EdgeType, list[int]]:
    """A list (every edge type) or a dict per edge type (missing types: 0) -> ``{edge_type: [per hop]}``."""
    if isinstance(fanouts, Mapping):
        unknown = [k for k in fanouts if tuple(k) not in graph.edge_types]
        if unknown:
            raise SamplingError(f"fanouts names edge type {unknown[0]!r}, which the graph does not have; its edge types are {graph.edge_types}")
        lengths = {len(list(v)) for v in fanouts.values()}
        if len(lengths) != 1:
            raise SamplingError(f"fanouts per edge type have different hop counts {sorted(lengths)}; give every edge type one entry per hop")
        hops = lengths.pop()
        out = {et: [int(f) for f in fanouts.get(et, [0] * hops)] for et in graph.edge_types}
    elif isinstance(fanouts, Sequence) and not isinstance(fanouts, str):
        out = {et: [int(f) for f in fanouts] for et in graph.edge_types}
    else:
        raise SamplingError(f"fanouts={fanouts!r}; give a list of ints (one per hop, every edge type) or a dict {{edge_type: list}}")
    for et, per_hop in out.items():
        if not per_hop or any(f < -1 for f in per_hop):
            raise SamplingError(f"fanouts for {et} is {per_hop}; give a non-empty list of ints >= 0, or -1 for all neighbors")
    return out


class _Topology:
    """The typed graph's flat layout as the kernels read it (see :mod:`sparsetrain.sampling.hetero_kernels`)."""

    def __init__(self, graph: CSCGraph) -> None:
        graph.check_files()
        self.node_types = graph.node_types
        self.type_index = {t: i for i, t in enumerate(self.node_types)}
        self.type_size = np.array([graph.num_nodes[t] for t in self.node_types], np.int64)
        self.type_offset = np.concatenate([[0], np.cumsum(self.type_size)]).astype(np.int64)
        self.edge_types = graph.edge_types
        self.et_src = np.array([self.type_index[et[0]] for et in self.edge_types], np.int64)
        self.indptr, self.indices, _ = graph.numpy()
        self.edge_perm = np.empty(0, np.int64) if graph.edge_perm is None else graph.edge_perm.numpy()
        self.col_offset = np.array(graph.types.col_offset[:-1], np.int64)
        self.edge_offset = np.append(self.indptr[self.col_offset], len(self.indices)).astype(np.int64)


class _Workspace:
    def __init__(self, total_nodes: int) -> None:
        self.table = np.full(total_nodes, -1, np.int32 if total_nodes < 2**31 else np.int64)
        self.lo = self.deg = self.offsets = self.pos = self.src = self.dst = self.new = np.empty(0, np.int64)

    @staticmethod
    def fit(array: np.ndarray, size: int) -> np.ndarray:
        return array if array.shape[0] >= size else np.empty(max(size, array.shape[0] + array.shape[0] // 2), np.int64)


class HeteroNeighborSampler:
    """Sample a typed message-flow graph around a batch of seed nodes of one node type.

    ``fanouts``: a list (hop ``h`` from the seeds takes ``fanouts[h]`` in-neighbors per node for every edge type) or a
    dict ``{edge_type: [per hop]}`` (PyG's ``num_neighbors``; missing edge types are not sampled); -1 = all. Uniform
    without replacement. ``hops="dgl"``: every hop samples for every node found so far (blocks are DGL message-flow
    graphs); ``hops="pyg"``: a hop samples only for the nodes first reached at the previous hop (PyG's
    ``NeighborLoader``). Deterministic by ``seed`` and the batch key of :class:`SamplerInput` (same as
    :class:`~sparsetrain.sampling.NeighborSampler`). ``seed_type`` is the node type of the seeds unless a
    ``SamplerInput`` names one in ``node_type``.
    """

    def __init__(self, graph: CSCGraph, fanouts: Sequence[int] | Mapping[EdgeType, Sequence[int]], *, seed_type: str | None = None,
                 hops: str = "dgl", seed: int | None = None) -> None:
        if not isinstance(graph, CSCGraph) or not graph.is_typed:
            raise SamplingError(f"graph is a {type(graph).__name__}; pass a typed sparsetrain.sampling.CSCGraph (e.g. sparsetrain.datasets.load(path).graph of a typed dataset)")
        if hops not in HOP_SEMANTICS:
            raise SamplingError(f"hops={hops!r}; choose 'dgl' (every hop samples all nodes found so far) or 'pyg' (only nodes new at the previous hop)")
        if seed_type is not None and seed_type not in graph.num_nodes:
            raise SamplingError(f"seed_type={seed_type!r} is not a node type of the graph ({graph.node_types})")
        if len(graph.edge_types) >= _MAX_EDGE_TYPES:
            raise SamplingError(f"the graph has {len(graph.edge_types)} edge types; at most {_MAX_EDGE_TYPES - 1} are supported")
        self.graph = graph
        self.fanouts = normalize_fanouts(graph, fanouts)
        self.num_hops = len(next(iter(self.fanouts.values())))
        self.seed_type = seed_type
        self.hops = hops
        self.seed = int(torch.randint(0, 2**62, ()).item()) if seed is None else int(seed) & _SEED_MASK
        self._topo = _Topology(graph)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._workspaces: list[_Workspace] = []

    def sample(self, inp: SamplerInput | torch.Tensor) -> HeteroMiniBatch:
        """Sample the blocks of ``inp.seeds`` (unique ids of the seed type) with batch key ``inp.key``."""
        if not isinstance(inp, SamplerInput):
            inp = SamplerInput(inp)
        seed_type = inp.node_type or self.seed_type
        if seed_type is None:
            raise SamplingError("the seeds' node type is unknown; pass seed_type= to the sampler or SamplerInput(seeds, node_type=...)")
        if seed_type not in self.graph.num_nodes:
            raise SamplingError(f"node type {seed_type!r} of the seeds is not a node type of the graph ({self.graph.node_types})")
        seeds = inp.seeds
        if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
            raise SamplingError(f"seeds must be a 1-D integer tensor of node ids; got shape {list(seeds.shape)} dtype {seeds.dtype}")
        n = self.graph.num_nodes[seed_type]
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= n):
            raise SamplingError(f"seeds has ids outside [0, {n}); seeds must be {seed_type!r} node ids of this graph")
        key = inp.key
        if key is None:
            with self._lock:
                key = next(self._counter)
        ws = self._acquire()
        try:
            return self._sample(seeds.to("cpu", torch.int64), seed_type, key, ws)
        finally:
            self._release(ws)

    def _sample(self, seeds: torch.Tensor, seed_type: str, key: int, ws: _Workspace) -> HeteroMiniBatch:
        topo = self._topo
        T, ET = len(topo.node_types), len(topo.edge_types)
        s = topo.type_index[seed_type]
        nodes = [np.zeros(0, np.int64) for _ in range(T)]
        seeds_np = seeds.numpy()
        repeated = hk.insert_typed_seeds(seeds_np, topo.type_offset[s], ws.table)
        if repeated >= 0:
            raise SamplingError(f"seed {int(seeds_np[repeated])} appears more than once in seeds; pass unique seeds (e.g. torch.unique(seeds))")
        nodes[s] = seeds_np.copy()
        counts = np.zeros(T, np.int64)
        counts[s] = len(seeds_np)
        per_hop_nodes = [counts.copy()]
        layers = []
        try:
            for hop in range(self.num_hops):
                before = counts.copy()
                first = per_hop_nodes[-2] if (self.hops == "pyg" and len(per_hop_nodes) > 1) else np.zeros(T, np.int64)
                fan = np.array([self.fanouts[et][hop] for et in topo.edge_types], np.int64)
                keys = np.array([hop_key(self.seed, key, hop * _MAX_EDGE_TYPES + k) for k in range(ET)], np.uint64)
                w_et, w_node, w_dst, bounds = [], [], [], [0]
                for k, et in enumerate(topo.edge_types):
                    d = topo.type_index[et[2]]
                    lo_d = first[d] if self.hops == "pyg" else 0
                    count = int(before[d] - lo_d) if fan[k] != 0 else 0
                    if count > 0:
                        w_node.append(nodes[d][lo_d : before[d]])
                        w_dst.append(np.arange(lo_d, before[d], dtype=np.int64))
                        w_et.append(np.full(count, k, np.int64))
                    bounds.append(bounds[-1] + max(count, 0))
                w_et = np.concatenate(w_et) if w_et else np.zeros(0, np.int64)
                w_node = np.concatenate(w_node) if w_node else np.zeros(0, np.int64)
                w_dst = np.concatenate(w_dst) if w_dst else np.zeros(0, np.int64)
                cols = topo.col_offset[w_et] + w_node
                W = len(w_et)
                ws.lo, ws.deg, ws.offsets = ws.fit(ws.lo, W), ws.fit(ws.deg, W), ws.fit(ws.offsets, W + 1)
                with _threads_for(W * 8):
                    num_edges = hk.count_typed_hop(topo.indptr, cols, w_et, fan, len(topo.indices), ws.lo, ws.deg, ws.offsets)
                if num_edges < 0:
                    raise SamplingError(f"edge type {topo.edge_types[w_et[-1 - num_edges]]}: the in-edges of node {int(w_node[-1 - num_edges])} "
                                        f"lie outside its edge list; {DAMAGED}")
                ws.pos, ws.src, ws.dst, ws.new = (ws.fit(a, num_edges) for a in (ws.pos, ws.src, ws.dst, ws.new))
                with _threads_for(num_edges):
                    found = hk.sample_typed_hop(topo.indices, w_et, w_node, w_dst, np.array(bounds, np.int64), fan, keys, topo.et_src,
                                                topo.type_offset, topo.type_size, ws.lo, ws.deg, ws.offsets, ws.pos, ws.table, counts,
                                                ws.src, ws.dst, ws.new)
                if found < 0:
                    e = -1 - found
                    k = int(np.searchsorted(topo.edge_offset, ws.pos[e], side="right")) - 1
                    raise SamplingError(f"edge type {topo.edge_types[k]}: CSC entry {int(ws.pos[e] - topo.edge_offset[k])} is not a "
                                        f"{topo.edge_types[k][0]!r} node id; {DAMAGED}")
                new = ws.new[:found]
                if found:
                    new_type = np.searchsorted(topo.type_offset, new, side="right") - 1
                    for t in np.unique(new_type):
                        nodes[t] = np.concatenate([nodes[t], new[new_type == t] - topo.type_offset[t]])
                per_hop_nodes.append(counts.copy())
                off = ws.offsets
                layer = {}
                for k, et in enumerate(topo.edge_types):
                    a, b = off[bounds[k]], off[bounds[k + 1]]
                    if b > a or fan[k] != 0:
                        ids = topo.edge_perm[ws.pos[a:b]] if len(topo.edge_perm) else ws.pos[a:b] - topo.edge_offset[k]
                        layer[et] = (np.stack([ws.src[a:b], ws.dst[a:b]]), ids)
                layers.append((layer, before, counts.copy()))
        finally:
            for t in range(T):
                hk.reset_typed_table(ws.table, nodes[t], topo.type_offset[t])
        return self._assemble(seed_type, seeds, nodes, layers, per_hop_nodes)

    def _assemble(self, seed_type, seeds, nodes, layers, per_hop_nodes) -> HeteroMiniBatch:
        types = self._topo.node_types
        blocks = []
        for layer, before, after in reversed(layers):
            blocks.append(HeteroBlock(
                edge_index={et: torch.from_numpy(ei) for et, (ei, _) in layer.items()},  # fresh arrays, not workspace views
                edge_ids={et: torch.from_numpy(ids) for et, (_, ids) in layer.items()},
                num_src={t: int(after[i]) for i, t in enumerate(types)},
                num_dst={t: int(before[i]) for i, t in enumerate(types)},
            ))
        counts = np.stack(per_hop_nodes)
        new_per_hop = np.diff(counts, axis=0, prepend=0)
        edges_per_hop = {et: [int(layer[et][0].shape[1]) if et in layer else 0 for layer, _, _ in layers] for et in self._topo.edge_types}
        return HeteroMiniBatch(
            seed_type=seed_type,
            seeds=seeds,
            input_nodes={t: torch.from_numpy(nodes[i]) for i, t in enumerate(types)},
            blocks=blocks,
            nodes_per_hop={t: new_per_hop[:, i].tolist() for i, t in enumerate(types)},
            edges_per_hop=edges_per_hop,
        )

    def _acquire(self) -> _Workspace:
        with self._lock:
            if self._workspaces:
                return self._workspaces.pop()
        return _Workspace(int(self._topo.type_offset[-1]))

    def _release(self, ws: _Workspace) -> None:
        with self._lock:
            self._workspaces.append(ws)

    def __repr__(self) -> str:
        return f"HeteroNeighborSampler(hops={self.hops!r}, num_hops={self.num_hops}, seed_type={self.seed_type!r}, seed={self.seed}, graph={self.graph!r})"
