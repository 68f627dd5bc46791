"""`NeighborSampler`: fused multi-hop neighbor sampling into a `MiniBatch`."""

from __future__ import annotations

import contextlib
import itertools
import threading
import warnings
from collections.abc import Sequence

import numba
import numpy as np
import torch

from sparsetrain.sampling import neighbor
from sparsetrain.sampling.errors import SamplingError
from sparsetrain.sampling.graph import DAMAGED, CSCGraph
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.minibatch import Block, MiniBatch
from sparsetrain.sampling.rng import hop_key

_SEED_MASK = (1 << 63) - 1
PARALLEL_MIN_WORK = 1 << 16  # edges (or 8 x dst nodes) below which a hop runs on one thread
HOP_NODES = ("all", "new")


class NeighborSampler:
    """Sample a message-flow graph around a batch of seed nodes.

    ``fanouts[h]`` is how many in-neighbors every node gets at hop ``h`` from the
    seeds (``fanouts[0]`` for the seeds themselves, as in PyG's ``num_neighbors``;
    -1 = all), so ``blocks[-1]`` (the innermost) uses ``fanouts[0]``. ``hop_nodes``
    says which nodes a hop samples for: ``"all"`` (default) every node found so far
    (DGL's message-flow graphs), ``"new"`` only the nodes first reached at the hop
    before (PyG's ``NeighborLoader``); either way a block's dst nodes are its first
    ``num_dst`` src nodes, with ``"new"`` only the newest of them have in-edges.
    Every block carries ``edge_ids``: the graph's ``edge_perm`` of each sampled edge,
    or its CSC position when the graph has none.
    Without replacement by default; ``weighted=True`` draws proportionally to
    ``graph.weights``. Runs on the GPU when the graph is on CUDA (or pinned and
    the seeds are on CUDA), else on the CPU. The same ``seed`` gives the same
    batches, whatever the thread count: a :class:`SamplerInput` with ``key=k`` draws
    batch ``k`` (a loader passes its own keys, so a resumed run redraws the same
    batches); without a key, the ``b``-th call of :meth:`sample` uses key ``b``.
    """

    def __init__(self, graph: CSCGraph, fanouts: Sequence[int], *, replace: bool = False, weighted: bool = False, seed: int | None = None,
                 hop_nodes: str = "all") -> None:
        if not isinstance(graph, CSCGraph):
            raise SamplingError(f"graph is a {type(graph).__name__}; pass a sparsetrain.sampling.CSCGraph (e.g. sparsetrain.datasets.load(path).graph)")
        fanouts = list(fanouts)
        if not fanouts or any(not isinstance(f, (int, np.integer)) or isinstance(f, bool) or f < -1 for f in fanouts):
            raise SamplingError(f"fanouts={fanouts!r}; give a non-empty list of ints >= 0, or -1 for all neighbors")
        if hop_nodes not in HOP_NODES:
            raise SamplingError(f"hop_nodes={hop_nodes!r}; give 'all' (every node found so far, DGL) or 'new' (nodes first reached at the hop before, PyG)")
        if weighted:
            if graph.weights is None:
                raise SamplingError("weighted=True but the graph has no edge weights; build the dataset with edge weights or pass weighted=False")
            graph.check_files()
            w = graph.weights
            if w.dtype not in (torch.float32, torch.float64):
                raise SamplingError(f"graph.weights has dtype {w.dtype}; edge weights must be float32 or float64")
            if bool((w < 0).any()) or not bool(torch.isfinite(w).all()):
                raise SamplingError("graph.weights has negative or non-finite entries; sampling weights must be finite and >= 0")
        self.graph = graph
        self.fanouts = [int(f) for f in fanouts]
        self.replace = bool(replace)
        self.weighted = bool(weighted)
        self.hop_nodes = hop_nodes
        self.seed = int(torch.randint(0, 2**62, ()).item()) if seed is None else int(seed) & _SEED_MASK
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._workspaces: list[neighbor.Workspace] = []  # one per concurrent CPU call
        self._cuda = None

    @property
    def num_hops(self) -> int:
        return len(self.fanouts)

    def sample(self, inp: SamplerInput | torch.Tensor, *, batch: int | None = None) -> MiniBatch:
        """Sample the blocks of ``inp.seeds`` (unique node ids) with batch key ``inp.key``; see the class docstring.

        A plain tensor of seeds stands for ``SamplerInput(seeds)``. ``batch=`` is the
        deprecated spelling of ``SamplerInput(seeds, key=batch)``.
        """
        if batch is not None:
            if isinstance(inp, SamplerInput):
                raise SamplingError("sample() got both a SamplerInput and batch=; put the key in SamplerInput(seeds, key=...) only")
            warnings.warn("NeighborSampler.sample(seeds, batch=k) is deprecated; pass SamplerInput(seeds, key=k) "
                          "(from sparsetrain.sampling import SamplerInput)", DeprecationWarning, stacklevel=2)
            inp = SamplerInput(inp, key=batch)
        elif not isinstance(inp, SamplerInput):
            inp = SamplerInput(inp)
        seeds, key = inp.seeds, inp.key
        if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype == torch.bool:
            raise SamplingError(f"seeds must be a 1-D integer tensor of node ids; got shape {list(seeds.shape)} dtype {seeds.dtype}")
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self.graph.num_nodes):
            raise SamplingError(f"seeds has ids outside [0, {self.graph.num_nodes}); seeds must be node ids of this graph")
        if key is None:
            with self._lock:
                key = next(self._counter)
        keys = [hop_key(self.seed, key, hop) for hop in range(self.num_hops)]
        if self._on_gpu(seeds):
            return self._sample_cuda(seeds, keys)
        return self._sample_cpu(seeds.to("cpu", torch.int64), keys)

    def _on_gpu(self, seeds: torch.Tensor) -> bool:
        return self.graph.device.type == "cuda" or (seeds.device.type == "cuda" and self.graph.is_pinned())

    def _sample_cuda(self, seeds: torch.Tensor, keys: list[int]) -> MiniBatch:
        from sparsetrain.sampling import neighbor_cuda

        if self._cuda is None:
            self._cuda = neighbor_cuda.CudaGraph(self.graph)
        device = self.graph.device if self.graph.device.type == "cuda" else seeds.device
        seeds = seeds.to(device, torch.int64)
        if torch.unique(seeds).numel() != seeds.numel():
            raise SamplingError("seeds has repeated node ids; pass unique seeds (e.g. torch.unique(seeds))")
        layers, nodes = neighbor_cuda.sample_layers(self._cuda, seeds, self.fanouts, self.replace, self.weighted, keys, self.hop_nodes == "new")
        return _assemble(seeds, layers, nodes)

    def _sample_cpu(self, seeds: torch.Tensor, keys: list[int]) -> MiniBatch:
        self.graph.check_files()
        indptr, indices, weights = self.graph.numpy()
        if weights is None or not self.weighted:
            weights = np.empty(0, np.float32)
        edge_perm = np.empty(0, np.int64) if self.graph.edge_perm is None else self.graph.edge_perm.numpy()
        new_only = self.hop_nodes == "new"
        ws = self._acquire_workspace()
        try:
            num_nodes = seeds.numel()
            ws.for_edges(0, num_nodes)
            ws.nodes[:num_nodes] = seeds.numpy()
            repeated = neighbor.insert_seeds(ws.nodes[:num_nodes], ws.table)
            if repeated >= 0:
                raise SamplingError(f"seed {int(ws.nodes[repeated])} appears more than once in seeds; pass unique seeds (e.g. torch.unique(seeds))")
            layers = []
            first = 0  # the hop samples for nodes[first:num_dst]
            try:
                for fanout, key in zip(self.fanouts, keys):
                    num_dst = num_nodes
                    count = num_dst - first
                    ws.for_dst(count)
                    with _threads_for(count * 8):
                        num_edges = neighbor.count_hop(indptr, weights, ws.nodes[first:], count, fanout, self.replace, self.weighted,
                                                       len(indices), ws.lo, ws.deg, ws.offsets)
                    if num_edges < 0:
                        raise self._bad_range(int(ws.nodes[first - 1 - num_edges]))
                    ws.for_edges(num_dst, num_edges)
                    edge_index = np.empty((2, num_edges), np.int64)
                    edge_ids = np.empty(num_edges, np.int64)
                    with _threads_for(num_edges):
                        found = neighbor.sample_hop(
                            indices, weights, edge_perm, ws.nodes, first, num_dst, fanout, self.replace, self.weighted, np.uint64(key),
                            ws.lo, ws.deg, ws.offsets, ws.nbr, ws.table, edge_index, edge_ids,
                        )
                    if found < 0:
                        raise self._bad_neighbor(ws, first, count, -1 - found)
                    num_nodes = found
                    layers.append((torch.from_numpy(edge_index), num_nodes, num_dst, torch.from_numpy(edge_ids)))
                    if new_only:
                        first = num_dst
            finally:
                with _threads_for(num_nodes):
                    neighbor.reset_table(ws.table, ws.nodes[:num_nodes])
            input_nodes = torch.from_numpy(ws.nodes[:num_nodes].copy())
        finally:
            self._release_workspace(ws)
        return _assemble(seeds, layers, input_nodes)

    def _bad_range(self, node: int) -> SamplingError:
        indptr = self.graph.indptr
        return SamplingError(
            f"{self.graph.source('indptr')}: node {node}'s in-edges are entries {int(indptr[node])} to {int(indptr[node + 1])} of "
            f"indices, which has {self.graph.num_edges}; {DAMAGED}"
        )

    def _bad_neighbor(self, ws: neighbor.Workspace, first: int, count: int, edge: int) -> SamplingError:
        """The error for sampled edge ``edge`` whose source ``ws.nbr[edge]`` is not a node id, naming its entry in ``indices``."""
        node = int(np.searchsorted(ws.offsets[: count + 1], edge, side="right")) - 1
        start, value = int(ws.lo[node]), ws.nbr[edge]
        entry = start + int(np.flatnonzero(self.graph.indices.numpy()[start : start + ws.deg[node]] == value)[0])
        return SamplingError(
            f"{self.graph.source('indices')}: entry {entry} is {value} (an in-neighbor of node {int(ws.nodes[first + node])}), which must be "
            f"in [0, {self.graph.num_nodes}); {DAMAGED}"
        )

    def _acquire_workspace(self) -> neighbor.Workspace:
        with self._lock:
            if self._workspaces:
                return self._workspaces.pop()
        return neighbor.Workspace(self.graph.num_nodes)

    def _release_workspace(self, ws: neighbor.Workspace) -> None:
        with self._lock:
            self._workspaces.append(ws)

    def __repr__(self) -> str:
        return (f"NeighborSampler(fanouts={self.fanouts}, replace={self.replace}, weighted={self.weighted}, hop_nodes={self.hop_nodes!r}, "
                f"seed={self.seed}, graph={self.graph!r})")


@contextlib.contextmanager
def _threads_for(work: int):
    """Run small kernels on the calling thread: waking the pool costs more than it saves (and much more on a loaded machine)."""
    if work >= PARALLEL_MIN_WORK:
        yield
        return
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)


def _assemble(seeds: torch.Tensor, layers: list[tuple[torch.Tensor, int, int, torch.Tensor]], input_nodes: torch.Tensor) -> MiniBatch:
    """Innermost-first hop results ``(edge_index, num_src, num_dst, edge_ids)`` to a MiniBatch (outermost block first)."""
    blocks = [Block(edge_index, num_src, num_dst, edge_ids) for edge_index, num_src, num_dst, edge_ids in reversed(layers)]
    return MiniBatch(seeds=seeds, input_nodes=input_nodes, blocks=blocks)
