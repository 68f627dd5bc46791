"""`Block` and `MiniBatch`: what a sampler returns, with PyG and DGL views.

Semantics are DGL's message-flow graphs. A block is one hop: a bipartite graph
from ``num_src`` source nodes to ``num_dst`` destination nodes, where the
destination nodes are the first ``num_dst`` source nodes. ``edge_index`` holds
local ids (row 0 source, row 1 destination). Local id ``i`` of every block is
global node ``input_nodes[i]``; the seeds are the first nodes, so the output
of the last block lines up with ``seeds``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from sparsetrain.sampling.errors import SamplingBackendError


@dataclass
class Block:
    """One hop: ``edge_index`` [2, E] int64 local (src, dst) ids; dst nodes are the first ``num_dst`` src nodes.

    ``edge_ids``: int64 [E], the graph's id of each edge (aligned with the columns of ``edge_index``): the
    graph's ``edge_perm`` there, or the edge's CSC position; ``None`` when the block was built without them.
    """

    edge_index: torch.Tensor
    num_src: int
    num_dst: int
    edge_ids: torch.Tensor | None = None

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    def to_pyg(self) -> tuple[torch.Tensor, tuple[int, int]]:
        """``(edge_index, (num_src, num_dst))`` for ``conv((x_src, x_src[:num_dst]), edge_index)``."""
        return self.edge_index, (self.num_src, self.num_dst)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Block:
        edge_ids = None if self.edge_ids is None else self.edge_ids.to(device, non_blocking=non_blocking)
        return replace(self, edge_index=self.edge_index.to(device, non_blocking=non_blocking), edge_ids=edge_ids)

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
    """

    seeds: torch.Tensor
    input_nodes: torch.Tensor
    blocks: list[Block]
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    edge_attr: list[torch.Tensor] | None = None

    @property
    def num_sampled_edges(self) -> int:
        return sum(block.num_edges for block in self.blocks)

    def to_pyg(self) -> list[tuple[torch.Tensor, tuple[int, int]]]:
        """Per hop, outermost first, ``(edge_index, (num_src, num_dst))``.

        A PyG model runs block by block::

            h = x
            for conv, (edge_index, size) in zip(convs, mb.to_pyg()):
                h = conv((h, h[: size[1]]), edge_index)
        """
        return [block.to_pyg() for block in self.blocks]

    def to_dgl(self) -> list:
        """Per hop, outermost first, a DGL block (``dgl.create_block``) with ``dgl.NID`` on src and dst nodes."""
        try:
            import dgl
        except ImportError as exc:
            raise SamplingBackendError(
                f"MiniBatch.to_dgl() needs the dgl package ({exc}); install dgl (e.g. the torch 2.2.1 + dgl 2.1.0 environment .ci/run builds in .ci/venv-dgl) or use .to_pyg()"
            ) from None
        device = self.input_nodes.device
        blocks = []
        for block in self.blocks:
            src, dst = block.edge_index
            b = dgl.create_block((src, dst), num_src_nodes=block.num_src, num_dst_nodes=block.num_dst, idtype=torch.int64, device=device)
            b.srcdata[dgl.NID] = self.input_nodes[: block.num_src]
            b.dstdata[dgl.NID] = self.input_nodes[: block.num_dst]
            blocks.append(b)
        return blocks

    def to(self, device: torch.device | str, non_blocking: bool = False) -> MiniBatch:
        """A copy with every tensor on ``device``."""
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return replace(
            self,
            seeds=move(self.seeds),
            input_nodes=move(self.input_nodes),
            blocks=[b.to(device, non_blocking) for b in self.blocks],
            x=move(self.x),
            y=move(self.y),
            edge_attr=None if self.edge_attr is None else [move(e) for e in self.edge_attr],
        )

    def __repr__(self) -> str:
        hops = ", ".join(repr(b) for b in self.blocks)
        return f"MiniBatch(seeds={self.seeds.numel()}, input_nodes={self.input_nodes.numel()}, blocks=[{hops}])"
