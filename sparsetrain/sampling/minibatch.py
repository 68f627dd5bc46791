"""`Block` and `MiniBatch`: what a sampler returns, held by type, with the user's single-type view, PyG and DGL views.

Semantics are DGL's message-flow graphs. A block is one hop: a bipartite graph
from ``num_src`` source nodes to ``num_dst`` destination nodes, where the
destination nodes are the first ``num_dst`` source nodes. ``edge_index`` holds
local ids (row 0 source, row 1 destination). Local id ``i`` of every block is
global node ``input_nodes[i]``; the seeds are the first nodes, so the output
of the last block lines up with ``seeds``.

On a typed graph (GraphBolt's convention) the same fields are dicts: ``num_src`` /
``num_dst`` / ``input_nodes`` per node type, ``edge_index`` / ``edge_ids`` per edge
type ``(src_type, relation, dst_type)``, local ids counted within a node type (local
id ``i`` of type ``t`` is global node ``input_nodes[t][i]``; ``edge_index[et]`` holds
local src-type and dst-type ids), and the seeds are the first nodes of ``seed_type``.

Every field is held by type (``*_by_type``: a homogeneous batch is the one-type case, node type ``_N``, edge type
``(_N, _E, _N)``, GraphBolt's and DGL's names) and read so inside the package; the unsuffixed attributes are the
user's view (:func:`one_type_view`, the one place it is made): a homogeneous batch's one value, else the dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from sparsetrain.errors import BackendError
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE, EdgeType

DGL_INSTALL = ("`pip install torch==2.2.1 dgl==2.1.0 \"torchdata<0.8\"` (DGL's last release, 2.1.0, runs on torch "
               "2.2.1; it has no build for newer torch)")
"""How to get DGL, said by every error that needs it."""


def import_dgl(what: str):
    """The ``dgl`` module, or a one-line :class:`BackendError` saying that ``what`` needs it and how to install
    it (DGL fails in several ways on a torch it was not built for: each is that one line, with its cause)."""
    try:
        import dgl
    except ImportError as exc:
        cause = "it is not installed" if getattr(exc, "name", None) == "dgl" else f"it failed to import: {exc}"
        raise BackendError(f"{what} needs DGL and {cause}; {DGL_INSTALL}, or use .to_pyg() / "
                           "sparsetrain.pyg") from None
    except Exception as exc:  # a DGL built for another torch: a missing library, a bad symbol
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendError(f"{what} needs DGL, which failed to import with torch {torch.__version__} "
                           f"({first}); {DGL_INSTALL}") from None
    return dgl


def by_type(value, one_type) -> dict:
    """A field by type from the user's shape: a dict as it is, the one value of a homogeneous batch under
    ``one_type`` (None: empty). The inverse of :func:`one_type_view`, at the same edge (the public setters)."""
    if value is None:
        return {}
    return value if isinstance(value, dict) else {one_type: value}


def one_type_view(values: dict | None, one_type, node_types=None, empty=None):
    """The user's view of a dict by type: its ``one_type`` value (``empty`` when it has none) on a homogeneous graph,
    else the dict (None stays None). ``node_types``: the batch's node types, which decide (a homogeneous graph's are
    ``["_N"]``); without them the dict's own keys decide (its only key is ``one_type``)."""
    if values is None:
        return None
    one = list(values) == [one_type] if node_types is None else list(node_types) == [NODE_TYPE]
    return values.get(one_type, empty) if one else values


class Counted(Mapping):
    """A dict made at its first read (a batch's per-hop counts, which few readers need); pickled and copied as the
    plain dict."""

    __slots__ = ("_make", "_value")

    def __init__(self, make) -> None:
        self._make, self._value = make, None

    def _dict(self) -> dict:
        if self._value is None:
            self._value, self._make = self._make(), None
        return self._value

    def __getitem__(self, key):
        return self._dict()[key]

    def __iter__(self):
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __eq__(self, other) -> bool:
        return self._dict() == (dict(other) if isinstance(other, Mapping) else other)

    def __repr__(self) -> str:
        return repr(self._dict())

    def __reduce__(self):
        return dict, (self._dict(),)


def _no_edges(*shape: int) -> torch.Tensor:
    """A homogeneous block's view at a hop that sampled no edges."""
    return torch.zeros(*shape, 0, dtype=torch.int64)


def _move(values: dict | None, device, non_blocking: bool) -> dict | None:
    """A dict of tensors by type on ``device`` (``None`` stays ``None``)."""
    return None if values is None else {k: v.to(device, non_blocking=non_blocking) for k, v in values.items()}


class BlockSize(tuple):
    """A block's ``(num_src, num_dst)`` from a sampler whose edges come grouped by destination, in ascending order:
    what :meth:`Block.to_pyg` returns for such a block, so a model builds its adjacency without checking the order (a
    check that is a host wait a block on a GPU). It is a plain 2-tuple otherwise."""

    dst_sorted = True

    def __new__(cls, num_src: int | dict, num_dst: int | dict) -> BlockSize:
        return super().__new__(cls, (num_src, num_dst))


@dataclass
class Block:
    """One hop, by type: ``edge_index_by_type[et]`` [2, E] int64 local (src, dst) ids (src ids of ``et[0]``, dst ids
    of ``et[2]``); per node type, the dst nodes are the first ``num_dst_by_type[t]`` of its ``num_src_by_type[t]``
    src nodes. A homogeneous block has node type ``_N`` and edge type ``(_N, _E, _N)``.

    ``edge_ids_by_type``: int64 [E] per edge type, the graph's id of each edge (aligned with the columns of
    ``edge_index``): the graph's ``edge_perm`` there, or the edge's CSC position; ``None`` when the block was built
    without them. ``dst_sorted``: the edges come grouped by destination in ascending order (a sampler's blocks):
    :meth:`to_pyg` then gives a homogeneous block's size as a :class:`BlockSize`.

    The unsuffixed ``edge_index`` / ``edge_ids`` / ``num_src`` / ``num_dst`` are the user's view: a homogeneous
    block's one value (``edge_index`` [2, E]), else the dicts.
    """

    edge_index_by_type: dict[EdgeType, torch.Tensor]
    num_src_by_type: dict[str, int]
    num_dst_by_type: dict[str, int]
    edge_ids_by_type: dict[EdgeType, torch.Tensor] | None = None
    dst_sorted: bool = False

    def _view(self, values, one_type, empty=None):
        return one_type_view(values, one_type, self.num_src_by_type, empty)

    @property
    def edge_index(self) -> torch.Tensor | dict[EdgeType, torch.Tensor]:
        """The user's view of ``edge_index_by_type`` ([2, E] on a homogeneous block, [2, 0] at a hop that sampled
        none)."""
        edge_index = self._view(self.edge_index_by_type, EDGE_TYPE)
        return _no_edges(2) if edge_index is None else edge_index

    @property
    def edge_ids(self) -> torch.Tensor | dict[EdgeType, torch.Tensor] | None:
        """The user's view of ``edge_ids_by_type`` ([E] on a homogeneous block; None when built without them)."""
        ids = self._view(self.edge_ids_by_type, EDGE_TYPE)
        return _no_edges() if ids is None and self.edge_ids_by_type is not None else ids

    @property
    def num_src(self) -> int | dict[str, int]:
        return self._view(self.num_src_by_type, NODE_TYPE)

    @property
    def num_dst(self) -> int | dict[str, int]:
        return self._view(self.num_dst_by_type, NODE_TYPE)

    @property
    def num_edges(self) -> int:
        return sum(e.shape[1] for e in self.edge_index_by_type.values())

    def to_pyg(self) -> tuple:
        """``(edge_index, (num_src, num_dst))`` for ``conv((x_src, x_src[:num_dst]), edge_index)``; per type on a typed
        block (what a ``HeteroConv`` takes: ``conv(x_dict, edge_index_dict)``, each output cut to its ``num_dst``).
        The size is a :class:`BlockSize` when the edges are ``dst_sorted``."""
        size = (self.num_src, self.num_dst)
        return self.edge_index, BlockSize(*size) if self.dst_sorted else size

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Block:
        return replace(self, edge_index_by_type=_move(self.edge_index_by_type, device, non_blocking),
                       edge_ids_by_type=_move(self.edge_ids_by_type, device, non_blocking))

    def __repr__(self) -> str:
        return f"Block(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


@dataclass
class MiniBatch:
    """A sampled computation graph, held by type (a homogeneous batch is the one node type ``_N``, edge type
    ``(_N, _E, _N)``).

    ``seeds_by_type``: the batch's target nodes (global ids) per node type; ``seed_type``: their one type (``None``
    when they came as a dict per type). ``input_nodes_by_type``: per node type, the global ids of every node whose
    features the first block reads, seeds first (local id ``i`` of type ``t`` is global node
    ``input_nodes_by_type[t][i]``). ``blocks``: outermost hop first (``blocks[0].num_src`` counts the input nodes,
    ``blocks[-1].num_dst`` the seeds). ``x_by_type`` / ``y`` / ``edge_attr_by_type`` are left for a loader to attach
    (features of the input nodes, labels of the seeds, per block the features of its edges by edge type).
    ``nodes_per_hop[t][h]``: type-``t`` nodes first reached at hop ``h`` (hop 0: the seeds); ``edges_per_hop[et][h]``:
    edges sampled at hop ``h + 1``.

    Set by the sampler's options (:class:`~sparsetrain.sampling.NeighborSampler`): ``batch_by_type`` (disjoint
    sampling: the index of the seed whose subgraph each input node is in) and ``subgraph`` (bidirectional / induced
    subgraphs: one block over all the batch's nodes).

    The unsuffixed ``seeds`` / ``input_nodes`` / ``x`` / ``edge_attr`` / ``batch`` are the user's view
    (:func:`one_type_view`): a homogeneous batch's one tensor, else the dicts (``seeds``: ``seed_type``'s ids, or
    the dict of a batch seeded by several types). Setting ``x`` / ``edge_attr`` / ``batch`` takes either shape.
    """

    seeds_by_type: dict[str, torch.Tensor]
    input_nodes_by_type: dict[str, torch.Tensor]
    blocks: list[Block]
    x_by_type: dict[str, torch.Tensor] | None = None
    y: torch.Tensor | None = None
    edge_attr_by_type: list[dict[EdgeType, torch.Tensor]] | None = None
    seed_type: str | None = None
    nodes_per_hop: dict[str, list[int]] | None = None
    edges_per_hop: dict[EdgeType, list[int]] | None = None
    batch_by_type: dict[str, torch.Tensor] | None = None
    subgraph: Block | None = None

    def _view(self, values, one_type=NODE_TYPE):
        return one_type_view(values, one_type, self.input_nodes_by_type)

    @property
    def is_typed(self) -> bool:
        """False for a batch of the one-type graph (node type ``_N``): what a step that needs one refuses on."""
        return list(self.input_nodes_by_type) != [NODE_TYPE]

    @property
    def seeds(self) -> torch.Tensor | dict[str, torch.Tensor]:
        """The seeds: ``seed_type``'s ids, or a dict per type when they came as one."""
        return self.seeds_by_type if self.seed_type is None else self.seeds_by_type[self.seed_type]

    @property
    def input_nodes(self) -> torch.Tensor | dict[str, torch.Tensor]:
        return self._view(self.input_nodes_by_type)

    @property
    def x(self) -> torch.Tensor | dict[str, torch.Tensor] | None:
        return self._view(self.x_by_type)

    @x.setter
    def x(self, x: torch.Tensor | dict[str, torch.Tensor] | None) -> None:
        self.x_by_type = None if x is None else by_type(x, NODE_TYPE)

    @property
    def batch(self) -> torch.Tensor | dict[str, torch.Tensor] | None:
        return self._view(self.batch_by_type)

    @batch.setter
    def batch(self, batch: torch.Tensor | dict[str, torch.Tensor] | None) -> None:
        self.batch_by_type = None if batch is None else by_type(batch, NODE_TYPE)

    @property
    def edge_attr(self) -> list | None:
        """Per block, the features of its edges (the one tensor, or None, on a homogeneous batch)."""
        return None if self.edge_attr_by_type is None else [self._view(a, EDGE_TYPE) for a in self.edge_attr_by_type]

    @edge_attr.setter
    def edge_attr(self, attr: list | None) -> None:
        self.edge_attr_by_type = None if attr is None else [by_type(a, EDGE_TYPE) for a in attr]

    @property
    def edge_types(self) -> list[EdgeType]:
        """The edge types the batch's blocks hold, in the order they first appear (a batch of no blocks: the edge types
        it was sampled over, ``edges_per_hop``'s)."""
        seen = {}
        for block in [self.subgraph] if self.subgraph is not None else self.blocks:
            seen.update(dict.fromkeys(block.edge_index_by_type))
        return list(seen) if seen else list(self.edges_per_hop or {})

    @property
    def num_sampled_edges(self) -> int:
        return sum(block.num_edges for block in self.blocks)

    def to_pyg(self) -> list[tuple]:
        """Per hop, outermost first, ``(edge_index, (num_src, num_dst))`` (dicts by type when typed).

        A PyG model runs block by block::

            h = x
            for conv, (edge_index, size) in zip(convs, mb.to_pyg()):
                h = conv((h, h[: size[1]]), edge_index)
        """
        return [block.to_pyg() for block in self.blocks]

    def to_dgl(self, idtype: torch.dtype = torch.int64) -> list:
        """The batch as DGL's message-flow graphs: per hop, outermost first, a DGL block (``dgl.create_block`` from a
        dict per edge type: DGL's homogeneous block when the only types are ``_N`` / ``(_N, _E, _N)``) whose src nodes
        are the first ``num_src`` of :attr:`input_nodes` and dst nodes the first ``num_dst`` (DGL's layout: the dst
        nodes lead the src nodes), with the graph's node ids in ``srcdata[dgl.NID]`` / ``dstdata[dgl.NID]`` and each
        edge's graph id in ``edata[dgl.EID]`` (the blocks ``dgl.dataloading.NeighborSampler`` yields). ``idtype``: the
        blocks' id type (DGL's ``int64`` or ``int32``). Needs DGL (:func:`import_dgl` says how to install it);
        :class:`sparsetrain.dgl.DataLoader` yields these blocks in DGL's ``(input_nodes, output_nodes, blocks)``
        contract."""
        dgl = import_dgl("MiniBatch.to_dgl()")
        device = next(iter(self.input_nodes_by_type.values())).device
        none = torch.zeros(0, dtype=idtype, device=device)
        edge_types = dict.fromkeys([*(self.edges_per_hop or {}), *self.edge_types])  # DGL's: every one, at every hop
        blocks = []
        for block in self.blocks:
            edge_index, edge_ids = block.edge_index_by_type, block.edge_ids_by_type
            edges = {et: tuple(edge_index[et].to(idtype)) if et in edge_index else (none, none) for et in edge_types}
            b = dgl.create_block(edges, num_src_nodes=block.num_src_by_type, num_dst_nodes=block.num_dst_by_type,
                                 idtype=idtype, device=device)
            for t in b.srctypes:
                b.srcnodes[t].data[dgl.NID] = self.input_nodes_by_type[t][: block.num_src_by_type[t]].to(idtype)
            for t in b.dsttypes:
                b.dstnodes[t].data[dgl.NID] = self.input_nodes_by_type[t][: block.num_dst_by_type[t]].to(idtype)
            for et in edge_types if edge_ids is not None else ():
                b.edges[et].data[dgl.EID] = edge_ids[et].to(idtype) if et in edge_ids else none
            blocks.append(b)
        return blocks

    def to(self, device: torch.device | str, non_blocking: bool = False) -> MiniBatch:
        """A copy with every tensor on ``device``."""
        return replace(
            self,
            seeds_by_type=_move(self.seeds_by_type, device, non_blocking),
            input_nodes_by_type=_move(self.input_nodes_by_type, device, non_blocking),
            blocks=[b.to(device, non_blocking) for b in self.blocks],
            x_by_type=_move(self.x_by_type, device, non_blocking),
            y=None if self.y is None else self.y.to(device, non_blocking=non_blocking),
            batch_by_type=_move(self.batch_by_type, device, non_blocking),
            subgraph=None if self.subgraph is None else self.subgraph.to(device, non_blocking),
            edge_attr_by_type=None if self.edge_attr_by_type is None else [_move(e, device, non_blocking)
                                                                           for e in self.edge_attr_by_type],
        )

    def __repr__(self) -> str:
        count = lambda values: self._view({t: v.numel() for t, v in values.items()})  # noqa: E731
        seeds = {t: v.numel() for t, v in self.seeds_by_type.items()}
        seeds = seeds if self.seed_type is None else seeds[self.seed_type]
        hops = ", ".join(repr(b) for b in self.blocks)
        nodes = count(self.input_nodes_by_type)
        return f"MiniBatch(seed_type={self.seed_type!r}, seeds={seeds}, input_nodes={nodes}, blocks=[{hops}])"
