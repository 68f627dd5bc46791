"""`NeighborSampler`: fused multi-hop neighbor sampling into a `MiniBatch`, over a homogeneous or a typed graph."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Mapping, Sequence

import numba
import numpy as np
import torch

from sparsetrain.sampling import disjoint, neighbor, subgraph, temporal
from sparsetrain.sampling.errors import SamplingBackendError, SamplingError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.fused_draw import draw_slots
from sparsetrain.sampling.fused_mean import FusedLastHop, FusedMiniBatch, feature_table
from sparsetrain.sampling.graph import DAMAGED, CSCGraph, EdgeType
from sparsetrain.sampling.input import SamplerInput, ids_on
from sparsetrain.sampling.layout import MAX_EDGE_TYPES, KernelLayout
from sparsetrain.sampling.minibatch import Block, MiniBatch
from sparsetrain.sampling.subgraph import SUBGRAPH_TYPES

_SEED_MASK = (1 << 63) - 1
PARALLEL_MIN_WORK = 1 << 16  # edges (or 8 x work items) below which a hop runs on one thread
HOP_NODES = ("all", "new")
_NO_ITEMS = np.empty(0, np.int64)  # the kernels' "option off" (not disjoint: no per-item seed index, no hash table)


class NeighborSampler:
    """Sample a message-flow graph around a batch of seed nodes, on a homogeneous or a typed :class:`CSCGraph`.

    ``fanouts[h]`` is how many in-neighbors every node gets at hop ``h`` from the
    seeds (``fanouts[0]`` for the seeds themselves, as in PyG's ``num_neighbors``;
    -1 = all), so ``blocks[-1]`` (the innermost) uses ``fanouts[0]``; ``[]`` samples
    no hop (the batch is its seeds). On a typed graph a list applies to every edge type, or ``fanouts`` is a dict
    ``{edge_type: [per hop]}`` (edge types it leaves out are not sampled). ``hop_nodes``
    says which nodes a hop samples for: ``"all"`` (default) every node found so far
    (DGL's message-flow graphs), ``"new"`` only the nodes first reached at the hop
    before (PyG's ``NeighborLoader``); either way a block's dst nodes are its first
    ``num_dst`` src nodes, with ``"new"`` only the newest of them have in-edges.
    Every block carries ``edge_ids``: the graph's ``edge_perm`` of each sampled edge,
    or its CSC position (within its edge type) when the graph has none.
    Without replacement by default; ``weighted=True`` draws proportionally to
    ``graph.weights``. ``seed_type``: the node type of the seeds on a typed graph
    (unless a :class:`SamplerInput` names one in ``node_type``, or gives seeds of several types as a dict).

    PyG's options, all off by default (the batches are then exactly those without them):

    - ``disjoint=True``: one subgraph per seed (:mod:`sparsetrain.sampling.disjoint`); a node reached from two
      seeds is in the batch twice, ``MiniBatch.batch`` gives each node's seed index, and seeds may repeat.
    - ``node_time`` / ``edge_time`` (a tensor, or a dict per node / edge type; edge times in edge-id order) with
      ``temporal_strategy`` ``"uniform"`` or ``"last"``: no edge later than the seed's time
      (:mod:`sparsetrain.sampling.temporal`; the seeds' times are ``SamplerInput.seed_time``, by default their
      node times). Temporal sampling is disjoint. The graph's columns are sorted by time once, here
      (``self.graph`` is then the sorted copy; edge ids stay the caller's).
    - ``subgraph_type``: ``"directional"`` (the sampled edges, hop by hop), ``"bidirectional"`` (those and their
      reverses) or ``"induced"`` (every edge between sampled nodes). The last two are one flat subgraph over all
      the batch's nodes (:mod:`sparsetrain.sampling.subgraph`), in ``MiniBatch.subgraph``; the blocks are that
      subgraph once per hop, the last cut to its edges into the seeds (``blocks[-1].num_dst`` is still the seed
      count, so a block-by-block model runs unchanged).

    ``fuse_last_hop=True`` (homogeneous graphs, directional sampling) leaves the outermost hop out of the batch: a
    :class:`~sparsetrain.sampling.fused_mean.FusedMiniBatch` whose ``last_hop.mean(features)`` draws that hop's edges
    (the same draws) and averages their sources' feature rows in one pass, the input of a mean-aggregating first
    layer (``GraphSAGE(...)(x, mb.to_pyg(), neighbor_mean=...)``); ``input_nodes`` are then that layer's dst nodes.

    Runs on the GPU when the graph is on CUDA (or pinned and the seeds are on CUDA), else on the CPU;
    both targets draw the same batches (PyG's options and seeds of several types: the CPU only, for now).
    The same ``seed`` gives the same batches, whatever the thread count: a :class:`SamplerInput` with ``key=k`` draws
    batch ``k`` (a loader passes its own keys, so a resumed run redraws the same
    batches); without a key, the ``b``-th call of :meth:`sample` uses key ``b``.
    Hop ``h`` of batch ``k`` draws from ``hop_key(seed, k, c)`` with counter ``c = h`` on
    a homogeneous graph and ``c = h * 2**20 + (index of the edge type)`` on a typed one.
    """

    def __init__(self, graph: CSCGraph, fanouts: Fanouts | Sequence[int] | Mapping[EdgeType, Sequence[int]], *,
                 replace: bool = False, weighted: bool = False, seed: int | None = None, hop_nodes: str = "all",
                 seed_type: str | None = None, disjoint: bool = False, node_time=None, edge_time=None,
                 temporal_strategy: str = "uniform", subgraph_type: str = "directional",
                 fuse_last_hop: bool = False) -> None:
        if not isinstance(graph, CSCGraph):
            raise SamplingError(f"graph is a {type(graph).__name__}; pass a sparsetrain.sampling.CSCGraph "
                                "(e.g. sparsetrain.datasets.load(path).graph)")
        if hop_nodes not in HOP_NODES:
            raise SamplingError(f"hop_nodes={hop_nodes!r}; give 'all' (every node found so far, DGL) or 'new' "
                                "(nodes first reached at the hop before, PyG)")
        if len(graph.edge_types) >= MAX_EDGE_TYPES:
            raise SamplingError(f"the graph has {len(graph.edge_types)} edge types; at most {MAX_EDGE_TYPES - 1} are "
                                "supported")
        if seed_type is not None and seed_type not in graph.node_types:
            raise SamplingError(f"seed_type={seed_type!r} is not a node type of the graph ({graph.node_types})")
        if subgraph_type not in SUBGRAPH_TYPES:
            raise SamplingError(f"subgraph_type={subgraph_type!r}; choose one of {', '.join(SUBGRAPH_TYPES)}")
        if temporal_strategy not in temporal.STRATEGIES:
            raise SamplingError(f"temporal_strategy={temporal_strategy!r}; choose 'uniform' or 'last'")
        self.fanouts = Fanouts.of(fanouts).for_graph(graph)
        if weighted:
            _check_weights(graph)
        self.times = None
        if node_time is not None or edge_time is not None:
            graph.check_files()
            self.times = temporal.Times(graph, node_time, edge_time, temporal_strategy)
            graph = self.times.sort(graph)
        self.disjoint = bool(disjoint) or self.times is not None
        if self.disjoint and subgraph_type == "induced":
            raise SamplingError("subgraph_type='induced' with disjoint (or temporal) sampling is not supported: an "
                                "induced subgraph is shared by the batch's seeds; use 'directional' or 'bidirectional'")
        self.temporal_strategy = temporal_strategy
        self.subgraph_type = subgraph_type
        self.graph = graph
        self.replace = bool(replace)
        self.weighted = bool(weighted)
        self.hop_nodes = hop_nodes
        self.seed_type = seed_type
        self.seed = int(torch.randint(0, 2**62, ()).item()) if seed is None else int(seed) & _SEED_MASK
        self._layout = KernelLayout(graph, self.fanouts)
        self.fuse_last_hop = bool(fuse_last_hop)
        if self.fuse_last_hop:
            self._check_fusable()
        # the hops drawn into blocks: all of them, or all but the outermost when it is fused
        self._block_layout = (KernelLayout(graph, Fanouts(self.fanouts.as_list()[:-1])) if self.fuse_last_hop
                              else self._layout)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._fused_slots = None  # a fused hop's draw slots in a padded batch (draw_slots), found at the first
        self._workspaces: list[neighbor.HostScratch] = []  # one per concurrent CPU call
        self._cuda = None
        self._placement = _placement(graph)

    def __getstate__(self) -> dict:
        """Pickled (e.g. into a loader's worker process) without its lock, scratch, device views and placement; the
        copy counts keys from 0."""
        state = dict(self.__dict__)
        for name in ("_counter", "_lock", "_workspaces", "_cuda", "_placement"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._workspaces = []
        self._cuda = None
        self._placement = _placement(self.graph)  # (a pinned graph unpickled in another process is no longer pinned)

    @property
    def num_hops(self) -> int:
        return self.fanouts.num_hops

    def _check_fusable(self) -> None:
        if self.graph.is_typed:
            raise SamplingError("fuse_last_hop=True needs a homogeneous graph (a typed first layer aggregates per edge "
                                "type); drop fuse_last_hop")
        if self.disjoint or self.subgraph_type != "directional":
            raise SamplingError("fuse_last_hop=True fuses directional, non-disjoint, non-temporal hops; drop "
                                "fuse_last_hop or those options")
        if not self.num_hops:
            raise SamplingError("fuse_last_hop=True needs at least one hop in fanouts")

    def _last_hop(self, key: int, nodes: torch.Tensor, first: int, num_dst: int) -> FusedLastHop:
        """The fused outermost hop of batch ``key``: ``nodes`` (global ids) draw in-edges into dst rows ``[first,
        num_dst)``."""
        hop = self.num_hops - 1
        return FusedLastHop(self.graph, nodes, first, num_dst, int(self._layout.fanouts[hop, 0]),
                            int(self._layout.hop_keys(self.seed, key, hop)[0]), self.replace, self.weighted)

    @property
    def has_gpu_path(self) -> bool:
        """Whether this sampler's batches (of one seed type) can be drawn on the GPU: disjoint, temporal,
        bidirectional, induced and zero-hop sampling run on the CPU only, for now."""
        return not (self.disjoint or self.subgraph_type != "directional" or not self.num_hops)

    @property
    def last_batch_counts(self):
        """What this thread's last GPU batch queued on the device, per hop and in all (launches, copies, host waits,
        allocations: :class:`~sparsetrain.sampling.cuda.counts.BatchCounts`); ``None`` before a GPU batch."""
        return None if self._cuda is None else self._cuda.last_batch_counts

    def to(self, device: torch.device | str) -> NeighborSampler:
        """This sampler (same seed, options and batches) over its graph on ``device``; itself when already there."""
        graph = self.graph.to(device)
        if graph is self.graph:
            return self
        moved = object.__new__(type(self))
        moved.__setstate__({**self.__getstate__(), "graph": graph})
        return moved

    @property
    def is_temporal(self) -> bool:
        return self.times is not None

    def sample(self, inp: SamplerInput | torch.Tensor) -> MiniBatch:
        """Sample the blocks of ``inp.seeds`` (unique node ids) with batch key ``inp.key``; see the class docstring.

        A plain tensor of seeds stands for ``SamplerInput(seeds)``.
        """
        if not isinstance(inp, SamplerInput):
            inp = SamplerInput(inp)
        key = self._key(inp)
        by_type = isinstance(inp.seeds, dict)
        if by_type and not self.graph.is_typed:
            raise SamplingError("seeds is a dict per node type but the graph is homogeneous; pass one tensor of ids")
        named = list(inp.seeds.items()) if by_type else [(inp.node_type, inp.seeds)]
        seeds = [(self._seed_type(name), ids) for name, ids in named]
        for t, ids in seeds:
            self._check_seeds(t, ids)
        if self._on_gpu(seeds):
            return self._sample_cuda(seeds[0][1], seeds[0][0], key)
        seed_time = None
        if self.times is not None:
            given = inp.seed_time if by_type or inp.seed_time is None else {named[0][0]: inp.seed_time}
            parts = [self.times.seed_times(self._layout.node_types[t], ids.to("cpu", torch.int64).numpy(),
                                           None if given is None else given.get(name))
                     for (t, ids), (name, _) in zip(seeds, named)]
            seed_time = np.concatenate(parts) if parts else np.zeros(0, self.times.node_time.dtype)
        elif inp.seed_time is not None:
            raise SamplingError("SamplerInput.seed_time is set but the sampler is not temporal; give it node_time or "
                                "edge_time")
        return self._sample_cpu([(t, ids.to("cpu", torch.int64)) for t, ids in seeds], key, seed_time, by_type)

    def sample_padded(self, inp: SamplerInput | torch.Tensor, out, capture: bool = False, features=None) -> None:
        """Sample ``inp``'s batch on the GPU into ``out``, fixed-size device buffers (a
        :class:`~sparsetrain.sampling.cuda.padded.PaddedOut`, e.g. a static step's), with no host wait: the batch's
        sizes stay on the device (``out.sizes``), and a bad seed or a damaged graph raises its one-line error at a
        later call or at :meth:`check_padded`, whichever comes first after the device has run the batch. The same
        batch as :meth:`sample` for the same key; homogeneous graphs on the GPU only. ``capture``: full batches (as
        many seeds as ``out`` holds) are captured as a CUDA graph after a few eager ones and replayed: one graph launch
        and one copy a batch (:mod:`~sparsetrain.sampling.cuda.capture`; a failed capture warns once and stays
        eager). With ``fuse_last_hop``, the last hop is drawn and its sources' rows of ``features`` (the whole table on
        the graph's GPU) averaged into ``out.neighbor_mean`` in the same run, with no host read either."""
        if not isinstance(inp, SamplerInput):
            inp = SamplerInput(inp)
        if self.graph.is_typed or isinstance(inp.seeds, dict) or not self._on_gpu([(0, inp.seeds)]):
            raise SamplingBackendError("padded batches are sampled on the GPU from a homogeneous graph; call sample() "
                                       "for others")
        self._check_seeds(0, inp.seeds)
        key = self._key(inp)
        self._sample_cuda(inp.seeds, 0, key, out, capture, self._padded_hop(key, out, features))

    def _padded_hop(self, key: int, out, features):
        """A fused sampler's last hop of padded batch ``key``, averaged over ``features`` into ``out.neighbor_mean``
        (:class:`~sparsetrain.sampling.cuda.fused_mean.PaddedHop`); None when unfused."""
        if (features is not None) != self.fuse_last_hop or (features is not None and out.neighbor_mean is None):
            raise SamplingError("a padded batch with fuse_last_hop=True averages its last hop over features into "
                                "out.neighbor_mean: pass both, and neither for an unfused sampler")
        if features is None:
            return None
        from sparsetrain.sampling.cuda.fused_mean import PaddedHop

        x, mean = feature_table(features, int(self.graph.num_nodes)), out.neighbor_mean
        if mean.device != x.device or mean.shape != (out.nodes[-1], x.shape[1]) or mean.dtype != torch.float32:
            raise SamplingError(f"out.neighbor_mean is {list(mean.shape)} {mean.dtype} on {mean.device}; the fused hop "
                                f"writes [{out.nodes[-1]}, {x.shape[1]}] float32 on the features' {x.device}")
        hop = self.num_hops - 1
        fanout = int(self._layout.fanouts[hop, 0])
        if self._fused_slots is None:  # (a fanout above 64 reads the largest in-degree: once)
            self._fused_slots = draw_slots(self.graph.indptr, fanout, self.replace)
        return PaddedHop(fanout, self._fused_slots, self._layout.hop_keys(self.seed, key, hop), x)

    def check_padded(self) -> None:
        """Wait for this thread's padded batches in flight and raise the first failed check (an epoch's end)."""
        if self._cuda is not None:
            self._cuda.workspace().late.drain()

    def _key(self, inp: SamplerInput) -> int:
        if inp.key is not None:
            return inp.key
        with self._lock:
            return next(self._counter)

    def _check_seeds(self, t: int, seeds: torch.Tensor) -> None:
        if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
            raise SamplingError(f"seeds must be a 1-D integer tensor of node ids; got shape {list(seeds.shape)} "
                                f"dtype {seeds.dtype}")
        if seeds.device.type == "cuda":  # the GPU sampler checks them on the device: no host wait here
            return
        n = int(self._layout.type_size[t])
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= n):
            raise self._layout.seeds_outside(t)

    def _on_gpu(self, seeds: list[tuple[int, torch.Tensor]]) -> bool:
        """Whether the batch is sampled on the GPU (by the placement chosen with the graph; a pinned graph's batches
        follow their seeds); the options the GPU kernels lack are an error there."""
        on_gpu = self._placement == "cuda" or (self._placement == "pinned"
                                               and any(ids.device.type == "cuda" for _, ids in seeds))
        if on_gpu and (not self.has_gpu_path or len(seeds) != 1):
            raise SamplingBackendError("disjoint, temporal, bidirectional and induced sampling, seeds of several types "
                                       "and zero hops run on the CPU only for now; keep the graph and the seeds on "
                                       "the host")
        return on_gpu

    def _seed_type(self, node_type: str | None) -> int:
        """Index of the seeds' node type: a homogeneous graph's one type, else ``node_type`` or ``seed_type``."""
        layout = self._layout
        if not self.graph.is_typed:
            if node_type not in (None, layout.node_types[0]):
                raise SamplingError(f"the seeds are {node_type!r} nodes but the graph is homogeneous (its one node "
                                    "type "
                                    f"is {layout.node_types[0]!r}); drop node_type")
            return 0
        name = node_type or self.seed_type
        if name is None:
            raise SamplingError("the seeds' node type is unknown; pass seed_type= to the sampler or "
                                "SamplerInput(seeds, node_type=...)")
        if name not in layout.type_index:
            raise SamplingError(f"node type {name!r} of the seeds is not a node type of the graph "
                                f"({layout.node_types})")
        return layout.type_index[name]

    def _sample_cuda(self, seeds: torch.Tensor, seed_type: int, key: int, padded=None, capture: bool = False,
                     fused=None) -> MiniBatch | None:
        from sparsetrain.sampling.cuda.driver import sample_layers
        from sparsetrain.sampling.cuda.graph import DeviceCSC

        if self._cuda is None:
            self._cuda = DeviceCSC(self.graph)
        device = self.graph.device if self._placement == "cuda" else seeds.device
        seeds = ids_on(seeds, device)
        layout = self._block_layout
        keys = [layout.hop_keys(self.seed, key, hop) for hop in range(layout.fanouts.shape[0])]
        if not keys and padded is None:  # a fused one-hop batch: its blocks are its seeds
            layers, nodes = [], [seeds]
        else:
            sampled = sample_layers(self._cuda, seeds, layout, keys, self.replace, self.weighted,
                                    self.hop_nodes == "new", seed_type, padded, capture, fused)
            if padded is not None:
                return None
            layers, nodes = sampled
        mb = self._assemble([(seed_type, seeds)], nodes, layers, False)
        if not self.fuse_last_hop:
            return mb
        first = int(layers[-1][3][0]) if layers and self.hop_nodes == "new" else 0
        return FusedMiniBatch.of(mb, self._last_hop(key, nodes[0][first:], first, int(nodes[0].numel())))

    def _sample_cpu(self, seeds: list[tuple[int, torch.Tensor]], key: int, seed_time: np.ndarray | None,
                    by_type: bool) -> MiniBatch:
        self.graph.check_files()
        layout = self._layout
        indptr, indices, weights = self.graph.numpy()
        if weights is None or not self.weighted:
            weights = np.empty(0, np.float32)
        edge_perm = np.empty(0, np.int64) if self.graph.edge_perm is None else self.graph.edge_perm.numpy()
        T = len(layout.node_types)
        counts = np.zeros(T, np.int64)
        first = np.zeros(T, np.int64)  # per node type, the first node the next hop samples for
        layers = []
        ws = self._acquire_workspace()
        node_map = disjoint.DisjointMap(sum(ids.numel() for _, ids in seeds)) if self.disjoint else None
        flat = None
        try:
            try:
                self._insert_seeds(ws, seeds, counts, node_map)
                for hop in range(self._block_layout.fanouts.shape[0]):
                    before = counts.copy()
                    edge_index, edge_ids, segments = self._hop(hop, key, ws, first, counts, indptr, indices, weights,
                                                               edge_perm, node_map, seed_time)
                    layers.append((torch.from_numpy(edge_index), torch.from_numpy(edge_ids), segments, before,
                                   counts.copy()))
                    if self.hop_nodes == "new":
                        first = before
                if self.subgraph_type == "induced":
                    flat = self._induced(ws, counts, indptr, indices, edge_perm)
            finally:
                if node_map is None:
                    for t in range(T):
                        with _threads_for(int(counts[t])):
                            neighbor.reset_table(ws.table, ws.nodes[t][: counts[t]], layout.type_offset[t])
            nodes = [torch.from_numpy(ws.nodes[t][: counts[t]].copy()) for t in range(T)]
            batch = None if node_map is None else [torch.from_numpy(ws.batch[t][: counts[t]].copy()) for t in range(T)]
        finally:
            self._release_workspace(ws)
        mb = self._assemble(seeds, nodes, layers, by_type)
        if self.fuse_last_hop:  # the outermost hop draws for the nodes the next hop would sample for
            return FusedMiniBatch.of(mb, self._last_hop(key, nodes[0][int(first[0]):], int(first[0]), int(counts[0])))
        if batch is not None:
            mb.batch = {t: batch[i] for i, t in enumerate(layout.node_types)} if mb.is_typed else batch[0]
        if self.subgraph_type != "directional":
            self._flatten(mb, flat, seeds)
        return mb

    def _insert_seeds(self, ws: neighbor.HostScratch, seeds, counts: np.ndarray, node_map) -> None:
        """Put the seeds in the node map (local ids from 0 per type); ``counts[t]`` is set as each type's go in."""
        layout = self._layout
        first_batch = 0
        for t, ids in seeds:
            seeds_np = ids.numpy()
            base = layout.type_offset[t]
            if node_map is not None:
                disjoint.insert_seeds(seeds_np, base, layout.type_offset[-1], first_batch, node_map.keys,
                                      node_map.values)
                ws.batch[t] = ws.fit(ws.batch[t], len(seeds_np))
                ws.batch[t][: len(seeds_np)] = np.arange(first_batch, first_batch + len(seeds_np))
                first_batch += len(seeds_np)
            else:
                repeated = neighbor.insert_seeds(seeds_np, base, ws.table)
                if repeated >= 0:
                    raise self._layout.seed_repeated(int(seeds_np[repeated]))
            ws.grow_nodes(t, len(seeds_np), 0)[: len(seeds_np)] = seeds_np
            counts[t] = len(seeds_np)

    def _hop(self, hop, key, ws, first, counts, indptr, indices, weights, edge_perm, node_map, seed_time):
        """Sample hop ``hop`` for every edge type (counts grow by the new nodes); ``(edge_index, edge_ids, segments)``.

        ``segments``: ``(edge type index, first edge, end edge)`` of each edge type sampled at this hop.
        """
        layout = self._layout
        fan = layout.fanouts[hop]
        segments = layout.segments(hop, counts, first)
        cols = layout.columns(ws.nodes, segments, np.concatenate, np.zeros(0, np.int64))
        item_batch = _NO_ITEMS
        if node_map is not None:  # disjoint: each work item's seed (batch) index, in the same order as cols
            seg_et_, seg_start_, seg_dst_ = segments
            parts = [ws.batch[layout.et_dst[k]][seg_dst_[i] : seg_dst_[i] + seg_start_[i + 1] - seg_start_[i]]
                     for i, k in enumerate(seg_et_)]
            item_batch = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        seg_et, seg_start, seg_dst = (np.array(a, np.int64) for a in segments)
        work = len(cols)
        ws.for_items(work)
        with _threads_for(work * 8):
            if self.times is None:
                num_edges = neighbor.count_hop(indptr, weights, cols, seg_start, fan[seg_et], self.replace,
                                               self.weighted, len(indices), ws.lo, ws.deg, ws.offsets)
            else:
                t = self.times
                num_edges = temporal.count_hop_in_time(indptr, indices, weights, cols, seg_start, seg_et, fan,
                                                       t.et_kind, t.et_src_base, t.node_time, t.edge_time,
                                                       seed_time[item_batch], t.last, self.replace, self.weighted,
                                                       len(indices), ws.lo, ws.deg, ws.offsets)
        if num_edges < 0:
            raise self._bad_range(cols, seg_start, seg_et, -1 - num_edges)
        ws.nbr = ws.fit(ws.nbr, num_edges)
        single = len(layout.node_types) == 1 and node_map is None
        if single:  # new nodes go straight to the one node array
            new_nodes = ws.grow_nodes(0, int(counts[0]) + num_edges, int(counts[0]))[counts[0] :]
        else:
            ws.new = new_nodes = ws.fit(ws.new, num_edges)
        if node_map is not None:
            node_map.reserve(int(counts.sum()) + num_edges)
        edge_index = np.empty((2, num_edges), np.int64)
        edge_ids = np.empty(num_edges, np.int64)
        with _threads_for(num_edges):
            found = neighbor.sample_hop(indices, weights, edge_perm, cols, seg_start, seg_et, seg_dst, fan,
                                        layout.hop_keys(self.seed, key, hop), self.replace, self.weighted,
                                        layout.col_offset, layout.edge_offset, layout.et_src, layout.type_offset,
                                        layout.type_size, ws.lo, ws.deg, ws.offsets, ws.nbr, ws.table, counts,
                                        new_nodes, edge_index, edge_ids, item_batch,
                                        _NO_ITEMS if node_map is None else node_map.keys,
                                        _NO_ITEMS if node_map is None else node_map.values)
        if found < 0:
            raise self._bad_neighbor(cols, seg_start, seg_et, ws, -1 - found)
        if node_map is not None:
            self._append_disjoint(ws, counts, new_nodes[:found])
        elif not single and found:
            new = new_nodes[:found]
            new_type = np.searchsorted(layout.type_offset, new, side="right") - 1
            for t in np.flatnonzero(np.bincount(new_type, minlength=len(layout.node_types))):
                mine = new[new_type == t] - layout.type_offset[t]
                start = int(counts[t]) - len(mine)
                ws.grow_nodes(t, int(counts[t]), start)[start : counts[t]] = mine
        ends = ws.offsets[seg_start]
        segments = [(int(k), int(ends[s]), int(ends[s + 1])) for s, k in enumerate(seg_et)]
        return edge_index, edge_ids, segments

    def _append_disjoint(self, ws: neighbor.HostScratch, counts: np.ndarray, keys: np.ndarray) -> None:
        """New (seed index, node) keys of a disjoint hop, appended to the node and batch arrays of their types."""
        if not len(keys):
            return
        offset = self._layout.type_offset
        total = offset[-1]
        position = keys % total
        one_type = len(offset) == 2
        new_type = None if one_type else np.searchsorted(offset, position, side="right") - 1
        for t in [0] if one_type else np.unique(new_type):
            mine = slice(None) if one_type else new_type == t
            start = int(counts[t]) - (len(keys) if one_type else int(mine.sum()))
            ws.grow_nodes(t, int(counts[t]), start)[start : counts[t]] = position[mine] - offset[t]
            ws.batch[t] = ws.fit(ws.batch[t], int(counts[t]), start)
            ws.batch[t][start : counts[t]] = keys[mine] // total

    def _induced(self, ws: neighbor.HostScratch, counts: np.ndarray, indptr, indices, edge_perm) -> Block:
        """Every edge of the graph between two nodes of the batch, per edge type (the node map still holds the
        batch)."""
        layout = self._layout
        edge_index, edge_ids = {}, {}
        for k, et in enumerate(layout.edge_types):
            d, s = layout.et_dst[k], layout.et_src[k]
            cols = ws.nodes[d][: counts[d]] + layout.col_offset[k]
            with _threads_for(int(counts[d]) * 8):
                ei, ids = subgraph.induced_edges(indptr, indices, edge_perm, cols, ws.table, layout.type_offset[s],
                                                 layout.type_size[s], layout.edge_offset[k])
            edge_index[et], edge_ids[et] = torch.from_numpy(ei), torch.from_numpy(ids)
        num = {t: int(counts[i]) for i, t in enumerate(layout.node_types)}
        if not layout.typed:
            (et,), (t,) = layout.edge_types, layout.node_types
            return Block(edge_index[et], num[t], num[t], edge_ids[et])
        return Block(edge_index, num, dict(num), edge_ids)

    def _flatten(self, mb: MiniBatch, flat: Block | None, seeds: list[tuple[int, torch.Tensor]]) -> None:
        """Make ``mb`` a flat-subgraph batch (``subgraph_type`` ``"induced"``: ``flat``; ``"bidirectional"``: built
        here)."""
        types = self._layout.node_types
        if flat is None:  # bidirectional: the sampled edges of every hop and their reverses
            hops = mb.blocks[::-1]
            if mb.is_typed:
                ets = [et for et in self._layout.edge_types if any(et in b.edge_index for b in hops)]
                edge_index = {et: torch.cat([b.edge_index[et] for b in hops if et in b.edge_index], 1) for et in ets}
                edge_ids = {et: torch.cat([b.edge_ids[et] for b in hops if et in b.edge_ids]) for et in ets}
                edge_index, edge_ids = subgraph.bidirectional(edge_index, edge_ids)
                num = {t: int(mb.input_nodes[t].numel()) for t in types}
                flat = Block(edge_index, num, dict(num), edge_ids)
            else:
                edge_index = torch.cat([b.edge_index for b in hops] or [torch.zeros(2, 0, dtype=torch.int64)], 1)
                edge_ids = torch.cat([b.edge_ids for b in hops] or [torch.zeros(0, dtype=torch.int64)])
                edge_index, edge_ids = subgraph.bidirectional(edge_index, edge_ids)
                flat = Block(edge_index, mb.input_nodes.numel(), mb.input_nodes.numel(), edge_ids)
        num_seeds = {types[t]: ids.numel() for t, ids in seeds}
        mb.subgraph = flat
        mb.blocks = subgraph.flat_blocks(flat, self.num_hops, num_seeds if mb.is_typed else seeds[0][1].numel())

    def _assemble(self, seeds: list[tuple[int, torch.Tensor]], nodes: list[torch.Tensor], layers: list,
                  by_type: bool) -> MiniBatch:
        """The batch from the hop loop's nodes per type and per-hop ``(edge_index, edge_ids, segments, before, after)``
        (innermost first; ``segments``: ``(edge type, first edge, end edge)``), on either target. ``seeds``:
        ``(node type index, ids)`` per seed type; ``by_type``: they came as a dict (so ``mb.seeds`` is one)."""
        if not self.graph.is_typed:
            blocks = [Block(ei, int(after[0]), int(before[0]), ids, dst_sorted=True)  # (work items in dst order)
                      for ei, ids, _, before, after in reversed(layers)]
            return MiniBatch(seeds=seeds[0][1], input_nodes=nodes[0], blocks=blocks)
        layout = self._layout
        types, edge_types = layout.node_types, layout.edge_types
        blocks, edges_per_hop = [], {et: [] for et in edge_types}
        for hop, (ei, ids, segments, before, after) in enumerate(layers):
            span = {k: (a, b) for k, a, b in segments}
            edge_index, edge_ids = {}, {}
            for k, et in enumerate(edge_types):
                if layout.fanouts[hop, k] != 0:  # an edge type sampled at this hop, even if no node had such edges
                    a, b = span.get(k, (0, 0))
                    edge_index[et], edge_ids[et] = _cut(ei, a, b), _cut(ids, a, b)
                edges_per_hop[et].append(int(edge_index[et].shape[1]) if et in edge_index else 0)
            blocks.append(Block(edge_index=edge_index, edge_ids=edge_ids,
                                num_src={t: int(after[i]) for i, t in enumerate(types)},
                                num_dst={t: int(before[i]) for i, t in enumerate(types)}))
        seed_counts = np.zeros(len(types), np.int64)
        for t, ids in seeds:
            seed_counts[t] = ids.numel()
        counts = np.stack([seed_counts] + [after for *_, after in layers])
        new_per_hop = np.diff(counts, axis=0, prepend=0)
        return MiniBatch(
            seeds={types[t]: ids for t, ids in seeds} if by_type else seeds[0][1],
            input_nodes={t: nodes[i] for i, t in enumerate(types)},
            blocks=blocks[::-1],
            seed_type=None if by_type else types[seeds[0][0]],
            nodes_per_hop={t: new_per_hop[:, i].tolist() for i, t in enumerate(types)},
            edges_per_hop=edges_per_hop,
        )

    def _item(self, cols, seg_start, seg_et, i: int) -> tuple[int, int]:
        """Work item ``i``'s edge type index and dst node id."""
        s = int(np.searchsorted(seg_start, i, side="right")) - 1
        k = int(seg_et[s])
        return k, int(cols[i]) - int(self._layout.col_offset[k])

    def _bad_range(self, cols, seg_start, seg_et, i: int) -> SamplingError:
        k, node = self._item(cols, seg_start, seg_et, i)
        if self.graph.is_typed:
            return SamplingError(f"edge type {self._layout.edge_types[k]}: the in-edges of node {node} lie outside its "
                                 f"edge list; {DAMAGED}")
        indptr = self.graph.indptr
        return SamplingError(
            f"{self.graph.source('indptr')}: node {node}'s in-edges are entries {int(indptr[node])} to "
            f"{int(indptr[node + 1])} of indices, which has {self.graph.num_edges}; {DAMAGED}"
        )

    def _bad_neighbor(self, cols, seg_start, seg_et, ws: neighbor.HostScratch, edge: int) -> SamplingError:
        """The error for sampled edge ``edge`` whose source ``ws.nbr[edge]`` is not a node id, naming its entry in
        ``indices``."""
        i = int(np.searchsorted(ws.offsets[: len(cols) + 1], edge, side="right")) - 1
        k, node = self._item(cols, seg_start, seg_et, i)
        start, value = int(ws.lo[i]), ws.nbr[edge]
        entry = start + int(np.flatnonzero(self.graph.indices.numpy()[start : start + ws.deg[i]] == value)[0])
        if self.graph.is_typed:
            et = self._layout.edge_types[k]
            entry -= int(self._layout.edge_offset[k])
            return SamplingError(f"edge type {et}: CSC entry {entry} is not a {et[0]!r} node id; {DAMAGED}")
        return SamplingError(
            f"{self.graph.source('indices')}: entry {entry} is {value} (an in-neighbor of node {node}), which must be "
            f"in [0, {self.graph.num_nodes}); {DAMAGED}"
        )

    def _acquire_workspace(self) -> neighbor.HostScratch:
        with self._lock:
            if self._workspaces:
                return self._workspaces.pop()
        return neighbor.HostScratch(int(self._layout.type_offset[-1]), len(self._layout.node_types))

    def _release_workspace(self, ws: neighbor.HostScratch) -> None:
        with self._lock:
            self._workspaces.append(ws)

    def __repr__(self) -> str:
        typed = f", seed_type={self.seed_type!r}" if self.graph.is_typed else ""
        return (f"NeighborSampler(fanouts={self.fanouts}, replace={self.replace}, weighted={self.weighted}, "
                f"hop_nodes={self.hop_nodes!r}{typed}, seed={self.seed}, graph={self.graph!r})")


def _cut(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """A contiguous copy of ``t[..., a:b]``; on the host by NumPy, whose copy beats torch's on a strided slice."""
    if t.device.type == "cpu":
        return torch.from_numpy(t.numpy()[..., a:b].copy())
    return t[..., a:b].clone()


def _placement(graph: CSCGraph) -> str:
    """Where a sampler over ``graph`` draws its batches, decided once with the graph: ``"cuda"`` (in device memory:
    every batch on the GPU), ``"pinned"`` (page-locked host memory: on the GPU when the seeds are on it, else on the
    CPU) or ``"host"`` (the CPU)."""
    if graph.device.type == "cuda":
        return "cuda"
    return "pinned" if graph.is_pinned() else "host"


def _check_weights(graph: CSCGraph) -> None:
    if graph.weights is None:
        raise SamplingError("weighted=True but the graph has no edge weights; build the dataset with edge weights or "
                            "pass weighted=False")
    graph.check_files()
    w = graph.weights
    if w.dtype not in (torch.float32, torch.float64):
        raise SamplingError(f"graph.weights has dtype {w.dtype}; edge weights must be float32 or float64")
    if bool((w < 0).any()) or not bool(torch.isfinite(w).all()):
        raise SamplingError("graph.weights has negative or non-finite entries; sampling weights must be finite and "
                            ">= 0")


@contextlib.contextmanager
def _threads_for(work: int):
    """Run small kernels on the calling thread: waking the pool costs more than it saves (more on a loaded machine)."""
    if work >= PARALLEL_MIN_WORK:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)
