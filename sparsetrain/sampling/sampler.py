"""`NeighborSampler`: fused multi-hop neighbor sampling into a `MiniBatch`, over a homogeneous or a typed graph.

The core: options, seeds and batch keys, the result's assembly and its errors. Its parts, each in its own module:
the backend chosen once with the graph (:func:`~sparsetrain.sampling.gpu_backend.backend_for`: the CPU hop loop of
:mod:`~sparsetrain.sampling.cpu_backend` with its workspaces, the GPU's eager, padded and captured batches of
:mod:`~sparsetrain.sampling.gpu_backend`, or a pinned graph's either by the seeds' device), and the modes: disjoint
(:mod:`~sparsetrain.sampling.disjoint`), temporal (:mod:`~sparsetrain.sampling.temporal`), bidirectional and induced
subgraphs (:mod:`~sparsetrain.sampling.subgraph`) and the fused last hop (:mod:`~sparsetrain.sampling.fused_mean`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from sparsetrain.errors import BackendError, InputError
from sparsetrain.sampling import neighbor, subgraph, temporal
from sparsetrain.sampling.cpu_backend import Drawn
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.fused_mean import FuseLastHop
from sparsetrain.sampling.gpu_backend import backend_for
from sparsetrain.sampling.graph import DAMAGED, NODE_TYPE, CSCGraph, EdgeType
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.layout import MAX_EDGE_TYPES, KernelLayout
from sparsetrain.sampling.minibatch import Block, MiniBatch, one_type_view
from sparsetrain.sampling.subgraph import SUBGRAPH_TYPES

_SEED_MASK = (1 << 63) - 1
HOP_NODES = ("all", "new")


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
            raise InputError(f"graph is a {type(graph).__name__}; pass a sparsetrain.sampling.CSCGraph "
                             "(e.g. sparsetrain.datasets.load(path).graph)")
        if hop_nodes not in HOP_NODES:
            raise InputError(f"hop_nodes={hop_nodes!r}; give 'all' (every node found so far, DGL) or 'new' "
                             "(nodes first reached at the hop before, PyG)")
        if len(graph.edge_types) >= MAX_EDGE_TYPES:
            raise InputError(f"the graph has {len(graph.edge_types)} edge types; at most {MAX_EDGE_TYPES - 1} are "
                             "supported")
        if seed_type is not None and seed_type not in graph.node_types:
            raise InputError(f"seed_type={seed_type!r} is not a node type of the graph ({graph.node_types})")
        if subgraph_type not in SUBGRAPH_TYPES:
            raise InputError(f"subgraph_type={subgraph_type!r}; choose one of {', '.join(SUBGRAPH_TYPES)}")
        if temporal_strategy not in temporal.STRATEGIES:
            raise InputError(f"temporal_strategy={temporal_strategy!r}; choose 'uniform' or 'last'")
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
            raise InputError("subgraph_type='induced' with disjoint (or temporal) sampling is not supported: an "
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
        self._fused = FuseLastHop(self) if self.fuse_last_hop else None
        # the hops drawn into blocks: all of them, or all but the outermost when it is fused
        self._block_layout = self._layout if self._fused is None else self._fused.block_layout
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._backend = backend_for(self)

    def __getstate__(self) -> dict:
        """Pickled (e.g. into a loader's worker process) without its lock and backend (scratch, device views); the
        copy counts keys from 0 and chooses its backend again."""
        state = dict(self.__dict__)
        for name in ("_counter", "_lock", "_backend"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._backend = backend_for(self)  # (a pinned graph unpickled in another process is no longer pinned)

    @property
    def num_hops(self) -> int:
        return self.fanouts.num_hops

    @property
    def has_gpu_path(self) -> bool:
        """Whether this sampler's batches (of one seed type) can be drawn on the GPU: disjoint, temporal,
        bidirectional, induced and zero-hop sampling run on the CPU only, for now."""
        return not (self.disjoint or self.subgraph_type != "directional" or not self.num_hops)

    @property
    def last_batch_counts(self):
        """What this thread's last GPU batch queued on the device, per hop and in all (launches, copies, host waits,
        allocations: :class:`~sparsetrain.sampling.cuda.counts.BatchCounts`); ``None`` before a GPU batch."""
        return self._backend.last_batch_counts

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
            raise InputError("seeds is a dict per node type but the graph is homogeneous; pass one tensor of ids")
        named = list(inp.seeds.items()) if by_type else [(inp.node_type, inp.seeds)]
        seeds = [(self._seed_type(name), ids) for name, ids in named]
        for t, ids in seeds:
            self._check_seeds(t, ids)
        drawn = self._backend.select(seeds).draw(self, inp, named, seeds, key)
        return self._finish(drawn, key, by_type)

    def _finish(self, drawn: Drawn, key: int, by_type: bool) -> MiniBatch:
        """The batch a backend drew, assembled, with what its modes add (the fused last hop, each node's seed index,
        a flat subgraph)."""
        mb = self._assemble(drawn.seeds, drawn.nodes, drawn.layers, by_type)
        if self._fused is not None:  # the outermost hop draws for the nodes the next hop would sample for
            return self._fused.batch(self, mb, key, drawn.nodes, drawn.layers)
        if drawn.batch is not None:
            mb.batch = one_type_view(dict(zip(self._layout.node_types, drawn.batch)), NODE_TYPE)
        if self.subgraph_type != "directional":
            self._flatten(mb, drawn.flat, drawn.seeds)
        return mb

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
        backend = None if self.graph.is_typed or isinstance(inp.seeds, dict) else self._backend.select([(0, inp.seeds)])
        if backend is None or not backend.padded:
            raise BackendError("padded batches are sampled on the GPU from a homogeneous graph; call sample() "
                               "for others")
        self._check_seeds(0, inp.seeds)
        key = self._key(inp)
        backend.sample_padded(self, inp.seeds, key, out, capture, self._padded_hop(key, out, features))

    def _padded_hop(self, key: int, out, features):
        """A fused sampler's last hop of padded batch ``key``, averaged over ``features`` into ``out.neighbor_mean``
        (:class:`~sparsetrain.sampling.cuda.fused_mean.PaddedHop`); None when unfused."""
        if (features is not None) != self.fuse_last_hop or (features is not None and out.neighbor_mean is None):
            raise InputError("a padded batch with fuse_last_hop=True averages its last hop over features into "
                             "out.neighbor_mean: pass both, and neither for an unfused sampler")
        return None if features is None else self._fused.padded(self, key, out, features)

    def check_padded(self) -> None:
        """Wait for this thread's padded batches in flight and raise the first failed check (an epoch's end)."""
        self._backend.check_padded()

    def _key(self, inp: SamplerInput) -> int:
        if inp.key is not None:
            return inp.key
        with self._lock:
            return next(self._counter)

    def _check_seeds(self, t: int, seeds: torch.Tensor) -> None:
        if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
            raise InputError(f"seeds must be a 1-D integer tensor of node ids; got shape {list(seeds.shape)} "
                             f"dtype {seeds.dtype}")
        if seeds.device.type == "cuda":  # the GPU sampler checks them on the device: no host wait here
            return
        n = int(self._layout.type_size[t])
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= n):
            raise self._layout.seeds_outside(t)

    def _seed_type(self, node_type: str | None) -> int:
        """Index of the seeds' node type: a homogeneous graph's one type, else ``node_type`` or ``seed_type``."""
        layout = self._layout
        if not self.graph.is_typed:
            if node_type not in (None, layout.node_types[0]):
                raise InputError(f"the seeds are {node_type!r} nodes but the graph is homogeneous (its one node "
                                 "type "
                                 f"is {layout.node_types[0]!r}); drop node_type")
            return 0
        name = node_type or self.seed_type
        if name is None:
            raise InputError("the seeds' node type is unknown; pass seed_type= to the sampler or "
                             "SamplerInput(seeds, node_type=...)")
        if name not in layout.type_index:
            raise InputError(f"node type {name!r} of the seeds is not a node type of the graph "
                             f"({layout.node_types})")
        return layout.type_index[name]

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
        ``(node type index, ids)`` per seed type; ``by_type``: they came as a dict (so ``mb.seeds`` is one). Written by
        type; a homogeneous graph's batch is the user's view (:func:`.minibatch.one_type_batch`), built straight: the
        dicts by type would add about 10 us a batch, 9% of a 64-seed two-hop CPU batch."""
        if not self.graph.is_typed:
            blocks = [Block(ei, int(after[0]), int(before[0]), ids, dst_sorted=True)  # (work items in dst order)
                      for ei, ids, _, before, after in reversed(layers)]
            return MiniBatch(seeds=seeds[0][1], input_nodes=nodes[0], blocks=blocks)
        layout = self._layout
        types, edge_types = layout.node_types, layout.edge_types
        blocks, edges_per_hop, reached = [], {et: [] for et in edge_types}, [[0] * len(types)]
        for t, ids in seeds:
            reached[0][t] = ids.numel()
        for hop, (ei, ids, segments, before, after) in enumerate(layers):
            span = {k: (a, b) for k, a, b in segments}
            fanouts, after = layout.fanouts[hop].tolist(), np.asarray(after).tolist()
            reached.append(after)  # per hop, the nodes of each type so far
            edge_index, edge_ids = {}, {}
            for k, et in enumerate(edge_types):
                if fanouts[k] != 0:  # an edge type sampled at this hop, even if no node had such edges
                    a, b = span.get(k, (0, 0))
                    edge_index[et], edge_ids[et] = _cut(ei, a, b), _cut(ids, a, b)
                edges_per_hop[et].append(int(edge_index[et].shape[1]) if et in edge_index else 0)
            blocks.append(Block(edge_index=edge_index, edge_ids=edge_ids, num_src=dict(zip(types, after)),
                                num_dst=dict(zip(types, np.asarray(before).tolist()))))
        mb = MiniBatch(
            seeds={types[t]: ids for t, ids in seeds} if by_type else seeds[0][1],
            input_nodes={t: nodes[i] for i, t in enumerate(types)},
            blocks=blocks[::-1],
            seed_type=None if by_type else types[seeds[0][0]],
            nodes_per_hop={t: _new_per_hop(reached, i) for i, t in enumerate(types)},
            edges_per_hop=edges_per_hop,
        )
        return mb

    def _item(self, cols, seg_start, seg_et, i: int) -> tuple[int, int]:
        """Work item ``i``'s edge type index and dst node id."""
        s = int(np.searchsorted(seg_start, i, side="right")) - 1
        k = int(seg_et[s])
        return k, int(cols[i]) - int(self._layout.col_offset[k])

    def _bad_range(self, cols, seg_start, seg_et, i: int) -> InputError:
        k, node = self._item(cols, seg_start, seg_et, i)
        if self.graph.is_typed:
            return InputError(f"edge type {self._layout.edge_types[k]}: the in-edges of node {node} lie outside its "
                              f"edge list; {DAMAGED}")
        indptr = self.graph.indptr
        return InputError(
            f"{self.graph.source('indptr')}: node {node}'s in-edges are entries {int(indptr[node])} to "
            f"{int(indptr[node + 1])} of indices, which has {self.graph.num_edges}; {DAMAGED}"
        )

    def _bad_neighbor(self, cols, seg_start, seg_et, ws: neighbor.HostScratch, edge: int) -> InputError:
        """The error for sampled edge ``edge`` whose source ``ws.nbr[edge]`` is not a node id, naming its entry in
        ``indices``."""
        i = int(np.searchsorted(ws.offsets[: len(cols) + 1], edge, side="right")) - 1
        k, node = self._item(cols, seg_start, seg_et, i)
        start, value = int(ws.lo[i]), ws.nbr[edge]
        entry = start + int(np.flatnonzero(self.graph.indices.numpy()[start : start + ws.deg[i]] == value)[0])
        if self.graph.is_typed:
            et = self._layout.edge_types[k]
            entry -= int(self._layout.edge_offset[k])
            return InputError(f"edge type {et}: CSC entry {entry} is not a {et[0]!r} node id; {DAMAGED}")
        return InputError(
            f"{self.graph.source('indices')}: entry {entry} is {value} (an in-neighbor of node {node}), which must be "
            f"in [0, {self.graph.num_nodes}); {DAMAGED}"
        )

    def __repr__(self) -> str:
        typed = f", seed_type={self.seed_type!r}" if self.graph.is_typed else ""
        return (f"NeighborSampler(fanouts={self.fanouts}, replace={self.replace}, weighted={self.weighted}, "
                f"hop_nodes={self.hop_nodes!r}{typed}, seed={self.seed}, graph={self.graph!r})")




def _new_per_hop(reached: list[list[int]], i: int) -> list[int]:
    """Type ``i``'s nodes first reached at each hop, from its count so far at each hop (plain ints: a batch's few hops
    are cheaper in Python than in NumPy)."""
    return [reached[0][i]] + [b[i] - a[i] for a, b in zip(reached, reached[1:])]


def _cut(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """``t[..., a:b]`` as a contiguous copy (``t`` itself when that is all of it); on the host by NumPy, whose copy
    beats torch's on a strided slice."""
    if a == 0 and b == t.shape[-1]:
        return t
    if t.device.type == "cpu":
        return torch.from_numpy(t.numpy()[..., a:b].copy())
    return t[..., a:b].clone()


def _check_weights(graph: CSCGraph) -> None:
    if graph.weights is None:
        raise InputError("weighted=True but the graph has no edge weights; build the dataset with edge weights or "
                         "pass weighted=False")
    graph.check_files()
    w = graph.weights
    if w.dtype not in (torch.float32, torch.float64):
        raise InputError(f"graph.weights has dtype {w.dtype}; edge weights must be float32 or float64")
    if bool((w < 0).any()) or not bool(torch.isfinite(w).all()):
        raise InputError("graph.weights has negative or non-finite entries; sampling weights must be finite and "
                         ">= 0")
