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
from sparsetrain.sampling.graph import NODE_TYPE, CSCGraph, EdgeType
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.layout import MAX_EDGE_TYPES, KernelLayout
from sparsetrain.sampling.minibatch import Block, Counted, MiniBatch
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
        self._sampled = [np.flatnonzero(f).tolist() for f in self._layout.fanouts]  # per hop, its edge types sampled
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
        by_type = isinstance(inp.seeds, dict)  # the seeds' own shape, which mb.seeds keeps
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
            mb.batch_by_type = dict(zip(self._layout.node_types, drawn.batch))
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
        why = self.padded_refusal() or ("the seeds are a dict by type" if isinstance(inp.seeds, dict) else None)
        if why is not None:
            raise BackendError(f"padded batches need the one-type graph, and {why}; call sample() for others")
        seed_type = self._seed_type(inp.node_type)
        backend = self._backend.select([(seed_type, inp.seeds)])
        if not backend.padded:
            raise BackendError("padded batches are sampled on the GPU; call sample() for others")
        self._check_seeds(seed_type, inp.seeds)
        key = self._key(inp)
        backend.sample_padded(self, inp.seeds, key, out, capture, self._padded_hop(key, out, features))

    def padded_refusal(self) -> str | None:
        """Why this sampler's graph cannot give padded batches (None: it can): the padded kernels sample one node and
        one edge type, the one-type graph's. The one rule, read by :meth:`sample_padded` and the static step's plan."""
        return f"the graph has node types {self.graph.node_types}" if self.graph.is_typed else None

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
        """Index of the seeds' node type: ``node_type``, else ``seed_type``, else ``_N`` (a homogeneous graph's)."""
        layout = self._layout
        name = node_type or self.seed_type or NODE_TYPE
        if name not in layout.type_index:
            if name == NODE_TYPE:
                raise InputError("the seeds' node type is unknown; pass seed_type= to the sampler or "
                                 "SamplerInput(seeds, node_type=...)")
            raise InputError(f"node type {name!r} of the seeds is not a node type of the graph "
                             f"({layout.node_types}); name one of those")
        return layout.type_index[name]

    def _flatten(self, mb: MiniBatch, flat: Block | None, seeds: list[tuple[int, torch.Tensor]]) -> None:
        """Make ``mb`` a flat-subgraph batch (``subgraph_type`` ``"induced"``: ``flat``; ``"bidirectional"``: built
        here)."""
        types = self._layout.node_types
        if flat is None:  # bidirectional: the sampled edges of every hop and their reverses
            hops = mb.blocks[::-1]
            ets = [et for et in self._layout.edge_types if any(et in b.edge_index_by_type for b in hops)]
            edge_index = {et: torch.cat([b.edge_index_by_type[et] for b in hops if et in b.edge_index_by_type], 1)
                          for et in ets}
            edge_ids = {et: torch.cat([b.edge_ids_by_type[et] for b in hops if et in b.edge_ids_by_type]) for et in ets}
            edge_index, edge_ids = subgraph.bidirectional(edge_index, edge_ids)
            num = {t: int(mb.input_nodes_by_type[t].numel()) for t in types}
            flat = Block(edge_index, num, dict(num), edge_ids)
        mb.subgraph = flat
        mb.blocks = subgraph.flat_blocks(flat, self.num_hops, {types[t]: ids.numel() for t, ids in seeds})

    def _assemble(self, seeds: list[tuple[int, torch.Tensor]], nodes: list[torch.Tensor], layers: list,
                  by_type: bool) -> MiniBatch:
        """The batch, by type, from the hop loop's nodes per type and per-hop ``(edge_index, edge_ids, segments, before,
        after)`` (innermost first; ``segments``: ``(edge type, first edge, end edge)``), on either target. ``seeds``:
        ``(node type index, ids)`` per seed type; ``by_type``: they came as a dict (so ``mb.seeds`` is one). A hop
        whose one segment holds all its edges (every hop of a one-type graph) takes them as they are; the per-hop
        counts are counted when read."""
        types, edge_types = self._layout.node_types, self._layout.edge_types
        blocks, num_src = [], None
        for hop, (ei, ids, segments, before, after) in enumerate(layers):
            # a hop's dst nodes are the nodes before it: the hop before's src nodes
            num_dst = dict(zip(types, before.tolist())) if num_src is None else num_src
            num_src = dict(zip(types, after.tolist()))
            sampled = self._sampled[hop]  # the edge types sampled at this hop, even if no node had such edges
            if len(segments) == 1 == len(sampled) and segments[0][2] == ids.shape[0]:  # one segment, all the edges
                et = edge_types[sampled[0]]
                edge_index, edge_ids = {et: ei}, {et: ids}
            else:
                span = {k: (a, b) for k, a, b in segments}
                edge_index, edge_ids = {}, {}
                for k in sampled:
                    a, b = span.get(k, (0, 0))
                    edge_index[edge_types[k]], edge_ids[edge_types[k]] = cut_columns(ei, a, b), cut_columns(ids, a, b)
            blocks.append(Block(edge_index, num_src, num_dst, edge_ids, True))  # (dst_sorted: work items in dst order)
        seeds = {types[t]: ids for t, ids in seeds}
        # (positional: the batch's fields in their order, and the per-hop counts when read: a 64-seed batch notices)
        return MiniBatch(seeds, dict(zip(types, nodes)), blocks[::-1], None, None, None,
                         None if by_type else next(iter(seeds)), Counted(lambda: _nodes_per_hop(types, seeds, blocks)),
                         Counted(lambda: _edges_per_hop(edge_types, blocks)))

    def _bad_range(self, cols, i: int) -> InputError:
        """The error for work item ``i``, whose column's ``indptr`` range lies outside the edges (the layout's one
        message, on either target)."""
        return self._layout.bad_range(self.graph.source("indptr"), self.graph.indptr, self.graph.num_edges,
                                      int(cols[i]))

    def _bad_neighbor(self, cols, ws: neighbor.HostScratch, edge: int) -> InputError:
        """The error for sampled edge ``edge`` whose source ``ws.nbr[edge]`` is not a node id of its type, naming its
        entry in ``indices`` (the layout's one message, on either target)."""
        i = int(np.searchsorted(ws.offsets[: len(cols) + 1], edge, side="right")) - 1
        start, value = int(ws.lo[i]), ws.nbr[edge]
        position = start + int(np.flatnonzero(self.graph.indices.numpy()[start : start + ws.deg[i]] == value)[0])
        return self._layout.bad_entry(self.graph.source("indices"), self.graph.indices, position)

    def __repr__(self) -> str:
        return (f"NeighborSampler(fanouts={self.fanouts}, replace={self.replace}, weighted={self.weighted}, "
                f"hop_nodes={self.hop_nodes!r}, seed_type={self.seed_type!r}, seed={self.seed}, graph={self.graph!r})")


def _nodes_per_hop(types: list[str], seeds: dict[str, torch.Tensor], blocks: list[Block]) -> dict[str, list[int]]:
    """Per node type, the nodes first reached at each hop (hop 0: the seeds), from the hops' blocks (innermost
    first)."""
    return {t: [seeds[t].numel() if t in seeds else 0] + [b.num_src_by_type[t] - b.num_dst_by_type[t] for b in blocks]
            for t in types}


def _edges_per_hop(edge_types: list[EdgeType], blocks: list[Block]) -> dict[EdgeType, list[int]]:
    """Per edge type, the edges sampled at each hop, from the hops' blocks (innermost first)."""
    return {et: [b.edge_index_by_type[et].shape[1] if et in b.edge_index_by_type else 0 for b in blocks]
            for et in edge_types}


def cut_columns(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
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
