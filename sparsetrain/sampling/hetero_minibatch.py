"""`HeteroBlock` and `HeteroMiniBatch`: what the typed sampler returns, in the dict form PyG's hetero layers take.

Local ids are per node type: local id ``i`` of type ``t`` is global node ``input_nodes[t][i]`` in every
block; a block's dst nodes of type ``t`` are the first ``num_dst[t]`` of them, and the seeds are the first
nodes of ``seed_type``. ``edge_index[et]`` holds (local src-type id, local dst-type id) rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from sparsetrain.sampling.errors import SamplingBackendError
from sparsetrain.sampling.hetero_graph import EdgeType
from sparsetrain.sampling.minibatch import MiniBatch


@dataclass
class HeteroBlock:
    """One hop of a typed message-flow graph: per edge type ``edge_index`` [2, E] and ``edge_ids`` (CSC positions of
    that edge type), per node type ``num_src`` / ``num_dst``."""

    edge_index: dict[EdgeType, torch.Tensor]
    edge_ids: dict[EdgeType, torch.Tensor]
    num_src: dict[str, int]
    num_dst: dict[str, int]

    @property
    def num_edges(self) -> int:
        return sum(e.shape[1] for e in self.edge_index.values())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> HeteroBlock:
        move = lambda d: {k: v.to(device, non_blocking=non_blocking) for k, v in d.items()}  # noqa: E731
        return replace(self, edge_index=move(self.edge_index), edge_ids=move(self.edge_ids))

    def __repr__(self) -> str:
        return f"HeteroBlock(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


@dataclass
class HeteroMiniBatch(MiniBatch):
    """A sampled typed computation graph (a :class:`~sparsetrain.sampling.MiniBatch` whose fields are per type).

    ``seeds``: global ids of ``seed_type`` nodes. ``input_nodes[t]``: global ids of every type-``t`` node the first
    block reads, in local-id order. ``blocks``: :class:`HeteroBlock` s, outermost hop first. ``nodes_per_hop[t][h]``:
    type-``t`` nodes first reached at hop ``h`` (hop 0: the seeds); ``edges_per_hop[et][h]``: edges sampled at hop
    ``h + 1``. ``x`` (a dict per node type) and ``y`` (seed labels) are left for a loader to attach.
    """

    input_nodes: dict[str, torch.Tensor]
    blocks: list[HeteroBlock]
    x: dict[str, torch.Tensor] | None = None
    seed_type: str = ""
    nodes_per_hop: dict[str, list[int]] = field(default_factory=dict)
    edges_per_hop: dict[EdgeType, list[int]] = field(default_factory=dict)

    def to_pyg(self) -> list[tuple[dict[EdgeType, torch.Tensor], tuple[dict[str, int], dict[str, int]]]]:
        """Per hop, outermost first, ``(edge_index_dict, (num_src_dict, num_dst_dict))``: what a ``HeteroConv`` takes
        block by block (``conv(x_dict, edge_index_dict)``, then each type's output cut to its ``num_dst``)."""
        return [(block.edge_index, (block.num_src, block.num_dst)) for block in self.blocks]

    def to_dgl(self) -> list:
        """Per hop, outermost first, a typed DGL block (``dgl.create_block`` from a dict per edge type) with ``dgl.NID``."""
        try:
            import dgl
        except ImportError as exc:
            raise SamplingBackendError(f"HeteroMiniBatch.to_dgl() needs the dgl package ({exc}); install dgl or use .to_pyg()") from None
        blocks = []
        for block in self.blocks:
            b = dgl.create_block({et: (ei[0], ei[1]) for et, ei in block.edge_index.items()}, num_src_nodes=block.num_src,
                                 num_dst_nodes=block.num_dst, idtype=torch.int64, device=self.seeds.device)
            for t in b.srctypes:
                b.srcnodes[t].data[dgl.NID] = self.input_nodes[t][: block.num_src[t]]
            for t in b.dsttypes:
                b.dstnodes[t].data[dgl.NID] = self.input_nodes[t][: block.num_dst[t]]
            blocks.append(b)
        return blocks

    def to(self, device: torch.device | str, non_blocking: bool = False) -> HeteroMiniBatch:
        """A copy with every tensor on ``device``."""
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return replace(
            self,
            seeds=move(self.seeds),
            input_nodes={t: move(v) for t, v in self.input_nodes.items()},
            blocks=[b.to(device, non_blocking) for b in self.blocks],
            x=None if self.x is None else {t: move(v) for t, v in self.x.items()},
            y=move(self.y),
        )

    def __repr__(self) -> str:
        nodes = {t: v.numel() for t, v in self.input_nodes.items()}
        return f"HeteroMiniBatch(seed_type={self.seed_type!r}, seeds={self.seeds.numel()}, input_nodes={nodes}, blocks={len(self.blocks)})"
