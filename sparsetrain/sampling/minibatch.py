"""`Block` and `MiniBatch`: what a sampler returns, with PyG and DGL views; fields are per type when the graph is typed.

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

Inside the package every field is read and written by type (``*_by_type``: a homogeneous batch is the one-type case,
node type ``_N``, edge type ``(_N, _E, _N)``); the unsuffixed fields are the user's view, the one value of a
homogeneous batch.
"""

from __future__ import annotations

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
    """A field by type: a dict as it is, the one value of a homogeneous batch under ``one_type`` (None: empty)."""
    if value is None:
        return {}
    return value if isinstance(value, dict) else {one_type: value}


def one_type_view(values: dict, one_type):
    """The user's view of a dict by type: the one value when its only key is ``one_type`` (a homogeneous graph's
    node or edge type), else the dict."""
    return values[one_type] if list(values) == [one_type] else values


def one_type_batch(mb: MiniBatch, dst_sorted: bool = False) -> MiniBatch:
    """The user's view of a batch assembled by type: ``mb`` itself unless its one node type is a homogeneous graph's
    (``_N``), else each field its one type's value (edge type ``(_N, _E, _N)``; no edges at a hop that sampled none).
    ``dst_sorted``: the blocks' edges come grouped by destination (see :class:`Block`)."""
    if list(mb.input_nodes) != [NODE_TYPE]:
        return mb
    device = mb.input_nodes[NODE_TYPE].device

    def one(values: dict, *empty: int) -> torch.Tensor:
        got = values.get(EDGE_TYPE)
        return torch.zeros(*empty, 0, dtype=torch.int64, device=device) if got is None else got

    blocks = [Block(one(b.edge_index, 2), b.num_src[NODE_TYPE], b.num_dst[NODE_TYPE], one(b.edge_ids),
                    dst_sorted=dst_sorted) for b in mb.blocks]
    return MiniBatch(seeds=mb.seeds, input_nodes=mb.input_nodes[NODE_TYPE], blocks=blocks)


def _move(value, device, non_blocking: bool):
    """A tensor, or a dict of them, on ``device`` (``None`` stays ``None``)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: v.to(device, non_blocking=non_blocking) for k, v in value.items()}
    return value.to(device, non_blocking=non_blocking)


class BlockSize(tuple):
    """A block's ``(num_src, num_dst)`` from a sampler whose edges come grouped by destination, in ascending order:
    what :meth:`Block.to_pyg` returns for such a block, so a model builds its adjacency without checking the order (a
    check that is a host wait a block on a GPU). It is a plain 2-tuple otherwise."""

    dst_sorted = True

    def __new__(cls, num_src: int, num_dst: int) -> BlockSize:
        return super().__new__(cls, (num_src, num_dst))


@dataclass
class Block:
    """One hop: ``edge_index`` [2, E] int64 local (src, dst) ids; dst nodes are the first ``num_dst`` src nodes.

    ``edge_ids``: int64 [E], the graph's id of each edge (aligned with the columns of ``edge_index``): the
    graph's ``edge_perm`` there, or the edge's CSC position; ``None`` when the block was built without them.
    Typed: ``edge_index`` / ``edge_ids`` are dicts per edge type, ``num_src`` / ``num_dst`` dicts per node type.
    ``dst_sorted``: the edges come grouped by destination in ascending order (a sampler's homogeneous blocks):
    :meth:`to_pyg` then gives the size as a :class:`BlockSize`.
    """

    edge_index: torch.Tensor | dict[EdgeType, torch.Tensor]
    num_src: int | dict[str, int]
    num_dst: int | dict[str, int]
    edge_ids: torch.Tensor | dict[EdgeType, torch.Tensor] | None = None
    dst_sorted: bool = False

    @property
    def is_typed(self) -> bool:
        return isinstance(self.edge_index, dict)

    @property
    def edge_index_by_type(self) -> dict[EdgeType, torch.Tensor]:
        """``edge_index`` by edge type (a homogeneous block's under ``("_N", "_E", "_N")``)."""
        return by_type(self.edge_index, EDGE_TYPE)

    @property
    def edge_ids_by_type(self) -> dict[EdgeType, torch.Tensor]:
        """``edge_ids`` by edge type (empty when the block has none)."""
        return by_type(self.edge_ids, EDGE_TYPE)

    @property
    def num_src_by_type(self) -> dict[str, int]:
        return by_type(self.num_src, NODE_TYPE)

    @property
    def num_dst_by_type(self) -> dict[str, int]:
        return by_type(self.num_dst, NODE_TYPE)

    @property
    def num_edges(self) -> int:
        return sum(e.shape[1] for e in self.edge_index_by_type.values())

    def to_pyg(self) -> tuple:
        """``(edge_index, (num_src, num_dst))`` for ``conv((x_src, x_src[:num_dst]), edge_index)``; per type when
        typed (what a ``HeteroConv`` takes: ``conv(x_dict, edge_index_dict)``, each output cut to its ``num_dst``)."""
        if self.dst_sorted and not self.is_typed:
            return self.edge_index, BlockSize(self.num_src, self.num_dst)
        return self.edge_index, (self.num_src, self.num_dst)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Block:
        return replace(self, edge_index=_move(self.edge_index, device, non_blocking),
                       edge_ids=_move(self.edge_ids, device, non_blocking))

    def __repr__(self) -> str:
        return f"Block(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


@dataclass
class MiniBatch:
    """A sampled computation graph.

    ``seeds``: the batch's target nodes (global ids). ``input_nodes``: global ids
    of every node whose features the first block reads, seeds first.
    ``blocks``: outermost hop first (``blocks[0].num_src == len(input_nodes)``,
    ``blocks[-1].num_dst == len(seeds)``). ``x`` / ``y`` / ``edge_attr`` are left for a loader to
    attach (features of ``input_nodes``, labels of ``seeds``, per block the features of its ``edge_ids``).

    Typed (:attr:`is_typed`): ``seeds`` are ids of ``seed_type`` nodes; ``input_nodes`` and ``x`` are dicts per node
    type, ``edge_attr`` a dict per edge type for each block; ``nodes_per_hop[t][h]``: type-``t`` nodes first reached
    at hop ``h`` (hop 0: the seeds); ``edges_per_hop[et][h]``: edges sampled at hop ``h + 1``. A typed batch sampled
    from seeds of several node types has ``seeds`` as a dict per type and ``seed_type`` ``None``.

    Set by the sampler's options (:class:`~sparsetrain.sampling.NeighborSampler`): ``batch`` (disjoint sampling: the
    index of the seed whose subgraph each node of ``input_nodes`` is in, a dict per node type when typed) and
    ``subgraph`` (bidirectional / induced subgraphs: one block over all the batch's nodes).
    """

    seeds: torch.Tensor
    input_nodes: torch.Tensor | dict[str, torch.Tensor]
    blocks: list[Block]
    x: torch.Tensor | dict[str, torch.Tensor] | None = None
    y: torch.Tensor | None = None
    edge_attr: list[torch.Tensor] | list[dict[EdgeType, torch.Tensor]] | None = None
    seed_type: str | None = None
    nodes_per_hop: dict[str, list[int]] | None = None
    edges_per_hop: dict[EdgeType, list[int]] | None = None
    batch: torch.Tensor | dict[str, torch.Tensor] | None = None
    subgraph: Block | None = None

    @property
    def is_typed(self) -> bool:
        """True for a batch of a typed graph (``input_nodes``, ``x`` and the blocks' fields are dicts by type)."""
        return isinstance(self.input_nodes, dict)

    @property
    def input_nodes_by_type(self) -> dict[str, torch.Tensor]:
        """``input_nodes`` by node type (a homogeneous batch's under ``"_N"``)."""
        return by_type(self.input_nodes, NODE_TYPE)

    @property
    def seeds_by_type(self) -> dict[str, torch.Tensor]:
        """``seeds`` by node type (``seed_type``'s, or each type's of a batch seeded by several)."""
        return by_type(self.seeds, NODE_TYPE if self.seed_type is None else self.seed_type)

    @property
    def batch_by_type(self) -> dict[str, torch.Tensor]:
        """``batch`` by node type (empty unless disjoint)."""
        return by_type(self.batch, NODE_TYPE)

    @property
    def x_by_type(self) -> dict[str, torch.Tensor]:
        """``x`` by node type; set by type, the user's ``x`` is then the view (the one tensor when homogeneous)."""
        return by_type(self.x, NODE_TYPE)

    @x_by_type.setter
    def x_by_type(self, x: dict[str, torch.Tensor]) -> None:
        self.x = x if self.is_typed else x.get(NODE_TYPE)

    def set_edge_attr_by_type(self, attr: list[dict[EdgeType, torch.Tensor]]) -> None:
        """Each block's edge features by edge type; the user's ``edge_attr`` is the view (per block the one tensor,
        or None, when homogeneous)."""
        self.edge_attr = attr if self.is_typed else [a.get(EDGE_TYPE) for a in attr]

    @property
    def edge_types(self) -> list[EdgeType]:
        """The edge types the batch's blocks hold, in the order they first appear (a homogeneous batch's one)."""
        if not self.is_typed:
            return [EDGE_TYPE]
        seen = {}
        for block in [self.subgraph] if self.subgraph is not None else self.blocks:
            seen.update(dict.fromkeys(block.edge_index))
        return list(seen)

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
        """The batch as DGL's message-flow graphs: per hop, outermost first, a DGL block (``dgl.create_block``; from a
        dict per edge type when typed) whose src nodes are the first ``num_src`` of :attr:`input_nodes` and dst nodes
        the first ``num_dst`` (DGL's layout: the dst nodes lead the src nodes), with the graph's node ids in
        ``srcdata[dgl.NID]`` / ``dstdata[dgl.NID]`` and each edge's graph id in ``edata[dgl.EID]`` (the blocks
        ``dgl.dataloading.NeighborSampler`` yields). ``idtype``: the blocks' id type (DGL's ``int64`` or ``int32``).
        Needs DGL (:func:`import_dgl` says how to install it); :class:`sparsetrain.dgl.DataLoader` yields these
        blocks in DGL's ``(input_nodes, output_nodes, blocks)`` contract."""
        dgl = import_dgl("MiniBatch.to_dgl()")
        if self.is_typed:
            return [self._typed_dgl_block(dgl, block, idtype) for block in self.blocks]
        device = self.input_nodes.device
        blocks = []
        for block in self.blocks:
            src, dst = block.edge_index
            b = dgl.create_block((src.to(idtype), dst.to(idtype)), num_src_nodes=block.num_src,
                                 num_dst_nodes=block.num_dst, idtype=idtype, device=device)
            b.srcdata[dgl.NID] = self.input_nodes[: block.num_src].to(idtype)
            b.dstdata[dgl.NID] = self.input_nodes[: block.num_dst].to(idtype)
            if block.edge_ids is not None:
                b.edata[dgl.EID] = block.edge_ids.to(idtype)
            blocks.append(b)
        return blocks

    def _typed_dgl_block(self, dgl, block: Block, idtype: torch.dtype):
        device = next(iter(self.input_nodes.values())).device
        b = dgl.create_block({et: (ei[0].to(idtype), ei[1].to(idtype)) for et, ei in block.edge_index.items()},
                             num_src_nodes=block.num_src, num_dst_nodes=block.num_dst, idtype=idtype, device=device)
        for t in b.srctypes:
            b.srcnodes[t].data[dgl.NID] = self.input_nodes[t][: block.num_src[t]].to(idtype)
        for t in b.dsttypes:
            b.dstnodes[t].data[dgl.NID] = self.input_nodes[t][: block.num_dst[t]].to(idtype)
        if block.edge_ids is not None:
            for et, ids in block.edge_ids.items():
                b.edges[et].data[dgl.EID] = ids.to(idtype)
        return b

    def to(self, device: torch.device | str, non_blocking: bool = False) -> MiniBatch:
        """A copy with every tensor on ``device``."""
        return replace(
            self,
            seeds=_move(self.seeds, device, non_blocking),
            input_nodes=_move(self.input_nodes, device, non_blocking),
            blocks=[b.to(device, non_blocking) for b in self.blocks],
            x=_move(self.x, device, non_blocking),
            y=_move(self.y, device, non_blocking),
            batch=_move(self.batch, device, non_blocking),
            subgraph=None if self.subgraph is None else self.subgraph.to(device, non_blocking),
            edge_attr=None if self.edge_attr is None else [_move(e, device, non_blocking) for e in self.edge_attr],
        )

    def __repr__(self) -> str:
        if self.is_typed:
            nodes = {t: v.numel() for t, v in self.input_nodes.items()}
            seeds = {t: v.numel() for t, v in self.seeds.items()} if isinstance(self.seeds, dict) else len(self.seeds)
            return (f"MiniBatch(seed_type={self.seed_type!r}, seeds={seeds}, input_nodes={nodes}, "
                    f"blocks={len(self.blocks)})")
        hops = ", ".join(repr(b) for b in self.blocks)
        return f"MiniBatch(seeds={self.seeds.numel()}, input_nodes={self.input_nodes.numel()}, blocks=[{hops}])"
