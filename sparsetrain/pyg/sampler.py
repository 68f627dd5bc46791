"""`NeighborSampler`: PyG's ``BaseSampler`` contract on sparsetrain's fused sampler.

What PyG's own ``NeighborSampler`` does with pyg-lib or torch-sparse, done by the Numba sampler of
:mod:`sparsetrain.sampling` with ``hop_nodes="new"`` (PyG's hops: each hop samples only for the
nodes the hop before reached first). ``sample_from_nodes`` returns PyG's ``SamplerOutput``: nodes
seeds first, then each hop's new nodes; edges hop by hop (so ``trim_to_layer`` works) as local
``(row, col)`` = (source, destination); ``edge`` the sampled edges' ids in the caller's edge order
(the graph's ``edge_perm``), so ``edge_permutation`` is ``None``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import BaseSampler, EdgeSamplerInput, NegativeSampling, NodeSamplerInput, SamplerOutput
from torch_geometric.sampler.base import NumNeighbors, SubgraphType

from sparsetrain.datasets.dataset import GraphDataset
from sparsetrain.pyg.errors import PyGOptionError
from sparsetrain.pyg.hetero import sample_hetero_from_nodes
from sparsetrain.pyg.stores import DatasetGraphStore, as_dataset
from sparsetrain.sampling.graph import CSCGraph
from sparsetrain.sampling.edge_seeds import LinkMiniBatch, LinkNeighborSampler
from sparsetrain.sampling.input import EdgeSamplerInput as FusedEdgeInput
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.minibatch import MiniBatch
from sparsetrain.sampling.sampler import NeighborSampler as FusedSampler

_pinned = threading.local()


@contextlib.contextmanager
def batch_key(key: int | None):
    """Within the block, this thread's sampler calls use batch key ``key`` (None: their own count).

    The loaders' sampling threads (:mod:`sparsetrain.pyg.workers`) reserve keys in batch order with ``next_key()``
    and pin them here, so their batches are those of ``num_workers=0``.
    """
    before, _pinned.key = getattr(_pinned, "key", None), key
    try:
        yield
    finally:
        _pinned.key = before


def graph_of(data: Any, weight_attr: str | None = None) -> CSCGraph:
    """The CSC graph behind ``data``: a PyG ``Data`` (edge ids = its ``edge_index`` columns), a dataset or folder, or a ``(FeatureStore, GraphStore)`` pair."""
    if isinstance(data, Data):
        weight = None if weight_attr is None else data[weight_attr]
        return CSCGraph.from_edge_index(data.edge_index, data.num_nodes, None if weight is None else weight.float())
    if isinstance(data, (GraphDataset, str, os.PathLike)):
        return as_dataset(data).graph
    if isinstance(data, (tuple, list)) and len(data) == 2:
        graph_store = data[1]
        if isinstance(graph_store, DatasetGraphStore):
            return graph_store.graph
        if weight_attr is not None:
            raise PyGOptionError("weight_attr is not supported for (FeatureStore, GraphStore) data; pass a Data with that edge attribute")
        row, colptr, perm = graph_store.csc()
        if isinstance(row, dict):
            raise PyGOptionError("the graph store holds typed edges; sample a heterogeneous graph from its HeteroData (or a typed sparsetrain dataset)")
        return CSCGraph(colptr.to(torch.int64), row, edge_perm=None if perm is None else perm.to(torch.int64))
    raise PyGOptionError(f"data is a {type(data).__name__}; pass a torch_geometric Data, a sparsetrain dataset (or its folder), "
                         "or a (FeatureStore, GraphStore) pair")


def _concat(parts: list[torch.Tensor]) -> torch.Tensor:
    # NumPy's single-threaded copy: torch.cat's thread pool cost 20x more on a loaded 2-core machine (55 vs 2.8 ms for 500K ids)
    return torch.from_numpy(np.concatenate([p.numpy() for p in parts]))


class NeighborSampler(BaseSampler):
    """PyG's ``NeighborSampler`` (same constructor) backed by sparsetrain's fused Numba sampler.

    ``num_neighbors``: a list (or ``NumNeighbors``), -1 = all. ``replace``: draw with replacement.
    ``weight_attr``: an edge attribute of ``data`` to draw proportionally to. ``seed``: the random
    stream (default: drawn from torch's generator, so ``torch.manual_seed`` fixes it); batch ``b`` of
    a process (of DataLoader worker ``w`` of ``W``: ``b * W + w``) uses key ``b``, so the same seed
    gives the same batches. Not supported, each a :class:`~sparsetrain.pyg.errors.PyGOptionError`
    naming the option: ``subgraph_type`` other than ``"directional"``, ``disjoint=True``, temporal
    sampling (``time_attr``), ``sample_direction="backward"``.
    """

    exclude_seed_edges: str = "none"
    """What ``sample_from_edges`` removes from the sampled subgraph: ``"none"`` (PyG's behaviour), ``"self"`` (the
    positive seed edges) or ``"reverse"`` (also their reverses); set by ``LinkNeighborLoader(exclude_seed_edges=)``."""

    def __init__(self, data, num_neighbors, subgraph_type: SubgraphType | str = "directional", replace: bool = False,
                 disjoint: bool = False, temporal_strategy: str = "uniform", time_attr: str | None = None,
                 weight_attr: str | None = None, is_sorted: bool = False, share_memory: bool = False, directed: bool = True,
                 sample_direction: str = "forward", *, seed: int | None = None) -> None:
        if not directed or SubgraphType(subgraph_type) != SubgraphType.directional:
            raise PyGOptionError(f"subgraph_type={SubgraphType(subgraph_type).value!r} (or directed=False) is not supported; "
                                 "sparsetrain samples subgraph_type='directional'")
        if disjoint:
            raise PyGOptionError("disjoint=True is not supported; sparsetrain samples one shared subgraph per batch (disjoint=False)")
        if time_attr is not None:
            raise PyGOptionError(f"time_attr={time_attr!r}: temporal sampling is not supported; leave time_attr=None")
        if sample_direction != "forward":
            raise PyGOptionError(f"sample_direction={sample_direction!r} is not supported; sparsetrain samples in-edges ('forward')")
        self.data = data
        self.replace = bool(replace)
        self.disjoint = False
        self.subgraph_type = SubgraphType.directional
        self.weight_attr = weight_attr
        self.seed = int(torch.randint(0, 2**62, ()).item()) if seed is None else int(seed)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        if isinstance(data, HeteroData):
            self.num_neighbors = num_neighbors if isinstance(num_neighbors, NumNeighbors) else NumNeighbors(num_neighbors)
            self._hetero = True
            self.fused = None
            return
        if isinstance(num_neighbors, dict):
            raise PyGOptionError("num_neighbors is a dict (one list per edge type) but the graph is homogeneous; pass a list, e.g. [15, 10]")
        self.num_neighbors = num_neighbors if isinstance(num_neighbors, NumNeighbors) else NumNeighbors(list(num_neighbors))
        fanouts = self.num_neighbors.get_mapped_values()
        self._hetero = False
        self.graph = graph_of(data, weight_attr)
        self.num_nodes = self.graph.num_nodes
        self.fused = FusedSampler(self.graph, fanouts, replace=self.replace, weighted=weight_attr is not None, seed=self.seed, hop_nodes="new")

    def __getstate__(self) -> dict:
        """Pickled into worker processes (given a ``multiprocessing_context``) without the lock; keys restart."""
        state = dict(self.__dict__)
        state.pop("_counter"), state.pop("_lock")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    @property
    def is_hetero(self) -> bool:
        return self._hetero

    @property
    def is_temporal(self) -> bool:
        return False

    @property
    def edge_permutation(self) -> None:
        """``None``: ``SamplerOutput.edge`` already holds the caller's edge ids."""
        return None

    def next_key(self) -> int:
        """The batch key of this call: the one pinned by :func:`batch_key`, else the process's call count, interleaved
        across DataLoader worker processes."""
        pinned = getattr(_pinned, "key", None)
        if pinned is not None:
            return pinned
        with self._lock:
            count = next(self._counter)
        info = torch.utils.data.get_worker_info()
        return count if info is None else count * info.num_workers + info.id

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> SamplerOutput:
        """Sample around ``inputs.node`` (unique ids); see the class docstring for the output layout."""
        if self._hetero:
            return sample_hetero_from_nodes(self, inputs)
        if inputs.time is not None:
            raise PyGOptionError("the seeds carry times (input_time): temporal sampling is not supported; leave input_time=None")
        seeds = inputs.node.to("cpu", torch.int64)
        mb = self.fused.sample(SamplerInput(seeds, key=self.next_key()))
        return _output(mb, (inputs.input_id, inputs.time))

    def sample_from_edges(self, inputs: EdgeSamplerInput, neg_sampling: NegativeSampling | None = None) -> SamplerOutput:
        """PyG's link sampling: seed edges ``(inputs.row, inputs.col)`` plus negatives, their endpoints deduplicated and
        sampled as one batch (:class:`~sparsetrain.sampling.LinkNeighborSampler`); ``metadata`` as PyG's: binary (or no
        negatives) ``(input_id, edge_label_index, edge_label, None)``, triplet ``(input_id, src_index, dst_pos_index,
        dst_neg_index, None)``. Negatives are uniform, as PyG draws them; the seed edges stay in the blocks, as in
        PyG, unless ``exclude_seed_edges`` says otherwise."""
        if self._hetero:
            raise PyGOptionError("sample_from_edges on HeteroData is not supported; use torch_geometric's LinkNeighborLoader for typed graphs")
        if inputs.time is not None:
            raise PyGOptionError("the seed edges carry times (edge_label_time): temporal sampling is not supported")
        neg = NegativeSampling.cast(neg_sampling)
        if neg is not None and (neg.src_weight is not None or neg.dst_weight is not None):
            raise PyGOptionError("NegativeSampling with src_weight/dst_weight is not supported; sparsetrain draws uniform negatives")
        mode = None if neg is None else neg.mode.value
        link = LinkNeighborSampler(self.fused, neg_sampling=mode, amount=1.0 if neg is None else neg.amount,
                                   exclude=self.exclude_seed_edges)
        mb = link.sample(FusedEdgeInput(inputs.row.to("cpu", torch.int64), inputs.col.to("cpu", torch.int64), inputs.label,
                                        key=self.next_key(), input_id=inputs.input_id))
        if mode == "triplet":
            metadata = (inputs.input_id, mb.src_index, mb.dst_pos_index, mb.dst_neg_index, None)
        else:
            metadata = (inputs.input_id, mb.edge_label_index, mb.edge_label, None)
        return _output(mb, metadata)

    def __repr__(self) -> str:
        return f"sparsetrain.pyg.NeighborSampler(num_neighbors={self.num_neighbors.values}, replace={self.replace}, seed={self.seed})"


def _output(mb: MiniBatch | LinkMiniBatch, metadata: tuple) -> SamplerOutput:
    """PyG's ``SamplerOutput`` of a batch: nodes seeds first, edges hop by hop from the seeds outwards."""
    hops = mb.blocks[::-1]  # the seeds' hop first
    return SamplerOutput(
        node=mb.input_nodes,
        row=torch.cat([b.edge_index[0] for b in hops]),
        col=torch.cat([b.edge_index[1] for b in hops]),
        edge=torch.cat([b.edge_ids for b in hops]),
        batch=None,
        num_sampled_nodes=[mb.seeds.numel()] + [b.num_src - b.num_dst for b in hops],
        num_sampled_edges=[b.num_edges for b in hops],
        metadata=metadata,
    )
