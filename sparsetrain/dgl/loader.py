"""``sparsetrain.dgl.DataLoader``: DGL's node ``DataLoader(graph, indices, graph_sampler, ...)`` contract, sampled by
sparsetrain: iterating yields ``(input_nodes, output_nodes, blocks)`` with ``blocks`` DGL blocks
(:meth:`~sparsetrain.sampling.MiniBatch.to_dgl`), homogeneous or typed.

``graph`` is a ``dgl.DGLGraph`` (converted once to sparsetrain's CSC, its edge ids kept as ``dgl.EID``), a sparsetrain
dataset (:func:`sparsetrain.load`) or a :class:`~sparsetrain.sampling.CSCGraph`. DGL is imported only to build the
blocks, so this module imports without it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import torch

from sparsetrain import _args
from sparsetrain.dgl.sampler import SamplerSettings, settings_of, to_fanouts
from sparsetrain.errors import InputError, SettingTypeError
from sparsetrain.sampling.graph import NODE_TYPE, CSCGraph
from sparsetrain.sampling.input import SamplerInput
from sparsetrain.sampling.minibatch import import_dgl, one_type_view
from sparsetrain.sampling.sampler import NeighborSampler as FusedSampler

IGNORED = ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor", "worker_init_fn", "timeout",
           "use_prefetch_thread", "use_alternate_streams", "pin_prefetcher", "use_uva", "gpu_cache", "ddp_seed",
           "generator", "multiprocessing_context")
"""DGL / torch ``DataLoader`` keywords accepted and not needed: sparsetrain samples in one fused pass in the calling
process (its kernels are multi-threaded), with no worker processes, prefetch thread or UVA switch to set."""


class DataLoader:
    """DGL's ``dgl.dataloading.DataLoader(graph, indices, graph_sampler, device=None, batch_size=1, drop_last=False,
    shuffle=False, **kwargs)`` for node seeds, sampled by sparsetrain.

    ``indices``: the seed node ids (a tensor), or a dict ``{node type: ids}`` on a typed graph (seeds of every type
    shuffled together, as DGL does; each batch's ``output_nodes`` holds the types it drew). ``graph_sampler``:
    :class:`sparsetrain.dgl.DGLNeighborSampler` or DGL's own ``dgl.dataloading.NeighborSampler`` /
    ``MultiLayerFullNeighborSampler`` (its fanouts, ``replace``, ``prob``/``mask`` and prefetch names are read).
    Iterating yields ``(input_nodes, output_nodes, blocks)``: ``blocks`` one DGL block per layer, input layer first,
    with ``dgl.NID`` on their nodes and ``dgl.EID`` on their edges, in the graph's id type (a DGL graph's
    ``idtype``; int64 otherwise), on ``device`` (default: the graph's). The shuffle and the draws come from torch's
    global generator, so ``torch.manual_seed`` repeats a run. ``use_ddp=True`` splits ``indices`` across the ranks of
    the default process group as DGL does (each rank a contiguous share, padded by wrapping unless ``drop_last``).
    DGL's and torch's loader keywords in :data:`IGNORED` are accepted; any other is refused.
    """

    def __init__(self, graph, indices, graph_sampler, device=None, use_ddp: bool = False, batch_size: int = 1,
                 drop_last: bool = False, shuffle: bool = False, **kwargs) -> None:
        unknown = sorted(set(kwargs) - set(IGNORED))
        if unknown:
            raise SettingTypeError(f"sparsetrain.dgl.DataLoader got an unexpected keyword argument {unknown[0]!r}")
        batch_size = _args.integer("DataLoader", "batch_size", batch_size, low=1, error=InputError)
        drop_last = _args.boolean("DataLoader", "drop_last", drop_last)  # 'no' is refused, not read as True
        shuffle = _args.boolean("DataLoader", "shuffle", shuffle)
        use_ddp = _args.boolean("DataLoader", "use_ddp", use_ddp)
        self.graph = graph
        self.settings: SamplerSettings = settings_of(graph_sampler)
        self.graph_sampler = graph_sampler
        self.csc, self.idtype, source_device = _csc_of(graph, self.settings.prob)
        self.device = _device(device) if device is not None else source_device
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.typed_indices = isinstance(indices, Mapping)
        self.types, self.ids = _flat_indices(indices, self.csc)
        if use_ddp:
            self.types, self.ids = _rank_share(self.types, self.ids, drop_last)
        fanouts = to_fanouts(self.settings.fanouts, self.csc)
        seed = int(torch.randint(0, 2**62, ()).item())  # from torch's generator: torch.manual_seed repeats the run
        self.sampler = FusedSampler(self.csc, fanouts, replace=self.settings.replace,
                                    weighted=self.settings.prob is not None, seed=seed)

    def __len__(self) -> int:
        n = self.ids.numel()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple]:
        n = self.ids.numel()
        order = torch.randperm(n) if self.shuffle else torch.arange(n)
        for b in range(len(self)):
            positions = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield self._batch(positions)

    def _batch(self, positions: torch.Tensor) -> tuple:
        ids, types = self.ids[positions], self.types[positions]
        names = list(self.csc.node_types)
        present = list(dict.fromkeys(types.tolist()))  # DGL's output_nodes: the types drawn, in order drawn
        seeds = {names[t]: ids[types == t] for t in present}
        inp = SamplerInput(seeds) if self.typed_indices else SamplerInput(seeds[names[present[0]]],
                                                                         node_type=names[present[0]])
        mb = self.sampler.sample(inp)
        if self.device != mb_device(mb):
            mb = mb.to(self.device)
        blocks = mb.to_dgl(idtype=self.idtype)
        input_nodes = {t: v.to(self.idtype) for t, v in mb.input_nodes_by_type.items()}
        output_nodes = {t: v.to(self.idtype) for t, v in mb.seeds_by_type.items()}
        if self.typed_indices:  # the user's view: dicts by type, tensors on the one-type graph (its type '_N')
            input_nodes, output_nodes = one_type_view(input_nodes, NODE_TYPE), one_type_view(output_nodes, NODE_TYPE)
        else:  # seeds given as a tensor: a tensor back (a dict of a batch reaching several types)
            input_nodes = next(iter(input_nodes.values())) if len(input_nodes) == 1 else input_nodes
            output_nodes = next(iter(output_nodes.values()))
        self._prefetch(blocks, input_nodes, output_nodes)
        return input_nodes, output_nodes, blocks

    # ------------------------------------------------------------ DGL's prefetch names
    def _prefetch(self, blocks: list, input_nodes, output_nodes) -> None:
        """Put the sampler's prefetch names on the blocks as DGL does: node features on the first block's src nodes,
        labels on the last block's dst nodes, edge features on every block's edges."""
        s = self.settings
        if not (s.prefetch_node_feats or s.prefetch_labels or s.prefetch_edge_feats):
            return
        if not blocks:
            return
        _put_nodes(blocks[0], "src", input_nodes, s.prefetch_node_feats, self._node_data)
        _put_nodes(blocks[-1], "dst", output_nodes, s.prefetch_labels, self._node_data)
        if s.prefetch_edge_feats:
            dgl = import_dgl("DataLoader's prefetch_edge_feats")
            for block in blocks:
                for et in block.canonical_etypes:
                    names = _for_type(s.prefetch_edge_feats, et, block.is_homogeneous)
                    eids = block.edges[et].data[dgl.EID].long()
                    for name in names:
                        block.edges[et].data[name] = self._edge_data(name, et)[eids.cpu()].to(self.device)

    def _node_data(self, name: str, node_type: str) -> torch.Tensor:
        graph = self.graph
        if hasattr(graph, "nodes") and hasattr(graph, "ndata"):  # a DGLGraph
            data = graph.nodes[node_type].data
            if name not in data:
                raise InputError(f"DataLoader prefetch {name!r}: node type {node_type!r} of the DGL graph has no "
                                 f"such node data (it has {sorted(data.keys())}); add "
                                 f"g.nodes[{node_type!r}].data[{name!r}] or drop the name")
            return data[name]
        features = getattr(graph, "features_by_type", None)
        if features is None:
            raise InputError(f"DataLoader prefetch {name!r}: a CSCGraph holds no node data; pass the dataset "
                             "(sparsetrain.load(path)) or the DGL graph")
        labels = graph.labels_by_type.get(node_type)
        if name in ("label", "labels", "y") and labels is not None:
            return torch.as_tensor(labels)
        if name in ("feat", "features", "x") and features.get(node_type) is not None:
            return graph.feature_store(node_type)
        raise InputError(f"DataLoader prefetch {name!r}: a sparsetrain dataset has node data 'feat' and 'label'; "
                         f"name one of them")

    def _edge_data(self, name: str, edge_type) -> torch.Tensor:
        graph = self.graph
        if hasattr(graph, "edges") and hasattr(graph, "edata"):
            data = graph.edges[edge_type].data
            if name not in data:
                raise InputError(f"DataLoader prefetch_edge_feats {name!r}: edge type {edge_type} of the DGL graph "
                                 f"has no such edge data (it has {sorted(data.keys())}); add it or drop the name")
            return data[name]
        raise InputError(f"DataLoader prefetch_edge_feats {name!r}: edge data is read from a DGL graph's edata")


def mb_device(mb) -> torch.device:
    return next(iter(mb.input_nodes_by_type.values())).device


def _for_type(names, node_or_edge_type, homogeneous: bool) -> list:
    if names is None:
        return []
    if isinstance(names, Mapping):
        key = node_or_edge_type
        if key in names:
            return list(names[key])
        if isinstance(key, tuple) and key[1] in names:
            return list(names[key[1]])
        return []
    return list(names)


def _put_nodes(block, side: str, nodes, names, data) -> None:
    if not names:
        return
    per_type = nodes if isinstance(nodes, dict) else {(block.srctypes if side == "src" else block.dsttypes)[0]: nodes}
    frames = block.srcnodes if side == "src" else block.dstnodes
    for node_type, ids in per_type.items():
        for name in _for_type(names, node_type, block.is_homogeneous):
            source = data(name, node_type)
            rows = ids.long().cpu()
            value = source.gather(rows) if hasattr(source, "gather") and not isinstance(source, torch.Tensor) \
                else source[rows]
            frames[node_type].data[name] = value.to(ids.device)


# ---------------------------------------------------------------- graph and seeds

def _csc_of(graph, prob: str | None) -> tuple[CSCGraph, torch.dtype, torch.device]:
    """``graph`` as sparsetrain's CSC (weighted by DGL's ``prob`` edge feature when given), the id type and device of
    the batches."""
    if isinstance(graph, CSCGraph):
        return _weighted(graph, prob), torch.int64, torch.device("cpu")
    csc = getattr(graph, "graph", None)
    if isinstance(csc, CSCGraph):  # a sparsetrain dataset
        return _weighted(csc, prob), torch.int64, torch.device("cpu")
    if hasattr(graph, "canonical_etypes") and hasattr(graph, "idtype"):
        return _from_dgl(graph, prob), graph.idtype, graph.device
    raise InputError(f"DataLoader graph is a {type(graph).__name__}; give a dgl.DGLGraph, a sparsetrain dataset "
                     "(sparsetrain.load(path)) or a sparsetrain.sampling.CSCGraph")


def _weighted(csc: CSCGraph, prob: str | None) -> CSCGraph:
    if prob is not None and csc.weights is None:
        raise InputError(f"NeighborSampler prob={prob!r}: this sparsetrain graph has no edge weights; import it "
                         "with weights, or pass the DGL graph whose edata holds them")
    return csc


def _from_dgl(g, prob: str | None) -> CSCGraph:
    """A DGL graph's edges (in edge id order, so the CSC's edge ids are DGL's) as one CSC, once."""

    def edge_weight(et):
        if prob is None:
            return None
        data = g.edges[et].data
        if prob not in data:
            raise InputError(f"NeighborSampler prob={prob!r}: edge type {et} has no such edge feature; add "
                             f"g.edges[{et!r}].data[{prob!r}]")
        return data[prob].detach().cpu().float().reshape(-1)

    def edge_index(et):
        src, dst = g.edges(etype=et, order="eid")
        return torch.stack([src.cpu().long(), dst.cpu().long()])

    if g.is_homogeneous:
        et = g.canonical_etypes[0]
        return CSCGraph.from_edge_index(edge_index(et), g.num_nodes(), edge_weight(et))
    num_nodes = {t: g.num_nodes(t) for t in g.ntypes}
    weights = None if prob is None else {et: edge_weight(et) for et in g.canonical_etypes}
    return CSCGraph.from_edge_index_dict({et: edge_index(et) for et in g.canonical_etypes}, num_nodes, weights)


def _flat_indices(indices, csc: CSCGraph) -> tuple[torch.Tensor, torch.Tensor]:
    """Each seed's node type index and the seeds as one id tensor (DGL concatenates a dict's types in key order)."""
    names = list(csc.node_types)
    if isinstance(indices, Mapping):
        types, ids = [], []
        for node_type, value in indices.items():
            if node_type not in names:
                raise InputError(f"DataLoader indices: the graph has no node type {node_type!r}; key the ids by "
                                 f"its node types {names} (or give one tensor of ids on a graph of one node type)")
            t = _ids(value, f"indices[{node_type!r}]")
            ids.append(t)
            types.append(torch.full_like(t, names.index(node_type)))
        return torch.cat(types) if types else torch.empty(0, dtype=torch.int64), torch.cat(ids) if ids else \
            torch.empty(0, dtype=torch.int64)
    ids = _ids(indices, "indices")
    if len(names) != 1:
        raise InputError(f"DataLoader indices is a tensor; the graph has node types {names}: give a dict "
                         "{node type: ids}")
    return torch.zeros_like(ids), ids


def _device(device) -> torch.device:
    """``device`` as a ``torch.device`` this process can use: an unknown name or a GPU it does not see is one line
    when the loader is built, not a driver error at the first batch."""
    try:
        result = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError(f"DataLoader device={device!r}; give 'cpu', 'cuda' or 'cuda:N'") from None
    if result.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"DataLoader device={device!r}: no CUDA device is visible to this process; give "
                         "device='cpu'")
    if result.type == "cuda" and result.index is not None and result.index >= torch.cuda.device_count():
        raise InputError(f"DataLoader device={device!r}: this process sees {torch.cuda.device_count()} CUDA "
                         "device(s); give one of them")
    return result


def _ids(value, what: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise InputError(f"DataLoader {what}: give a 1-D tensor of node ids; got a {type(value).__name__}") \
            from None
    if t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool or t.dtype.is_complex:
        raise InputError(f"DataLoader {what}: give a 1-D tensor of node ids; got shape {list(t.shape)} dtype "
                         f"{t.dtype}")
    return t.detach().cpu().long()


def _rank_share(types: torch.Tensor | None, ids: torch.Tensor, drop_last: bool):
    """This rank's contiguous share of the seeds, as DGL's ``use_ddp`` splits them (padded by wrapping around unless
    ``drop_last``)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise InputError("DataLoader(use_ddp=True) needs torch.distributed's default process group; call "
                         "torch.distributed.init_process_group first")
    rank, world = dist.get_rank(), dist.get_world_size()
    n = ids.numel()
    per_rank = n // world if drop_last else math.ceil(n / world)
    order = torch.arange(per_rank * world) % max(n, 1)
    mine = order[rank * per_rank:(rank + 1) * per_rank]
    return (None if types is None else types[mine]), ids[mine]
