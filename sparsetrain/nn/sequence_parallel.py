"""Cluster-aware sequence parallelism for the graph transformer (DeepSpeed-Ulysses style).

A long node sequence (ordered by cluster, so clusters are id ranges) is split across
ranks at cluster boundaries: every rank holds whole clusters, balanced by node count.
Dense cluster attention is then local to a rank and needs no communication. Attention
that crosses clusters (along graph edges, or the global linear term) switches Q/K/V
from sequence-sharded ``[local nodes, heads, dim]`` to head-sharded ``[all nodes,
heads / P, dim]`` with one all-to-all, attends over the whole sequence for its heads,
and switches the output back with a second all-to-all. Both are the library's one
differentiable all-to-all (:func:`sparsetrain.collective.all_to_all`), so each one's backward
is the other. Works over any ``torch.distributed`` backend that has ``all_to_all_single``
(gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsetrain.collective import all_to_all, group_info
from sparsetrain.errors import SettingError


def cluster_shard_bounds(cluster_ptr: torch.Tensor, world_size: int) -> list[int]:
    """Node boundaries ``[0, b_1, ..., N]`` of ``world_size`` shards, each cut at the cluster boundary
    closest to an equal share of nodes (so every rank holds whole clusters)."""
    ptr = torch.as_tensor(cluster_ptr, dtype=torch.int64).cpu()
    n = int(ptr[-1])
    bounds = [0]
    for r in range(1, world_size):
        target = r * n / world_size
        at = int(torch.argmin((ptr.double() - target).abs()))
        bounds.append(max(bounds[-1], int(ptr[at])))
    bounds.append(n)
    return bounds


@dataclass
class SequenceShards:
    """This rank's slice ``[lo, hi)`` of a node sequence split at ``bounds`` over ``group``."""

    bounds: list[int]
    rank: int
    world_size: int
    group: object = None

    @classmethod
    def from_clusters(cls, cluster_ptr: torch.Tensor, group=None) -> SequenceShards:
        """Shards of whole clusters over the ranks of ``group`` (default: the world)."""
        info = group_info(group)
        return cls(cluster_shard_bounds(cluster_ptr, info.world_size), info.rank, info.world_size, group)

    @property
    def lo(self) -> int:
        return self.bounds[self.rank]

    @property
    def hi(self) -> int:
        return self.bounds[self.rank + 1]

    @property
    def num_nodes(self) -> int:
        return self.bounds[-1]

    def sizes(self) -> list[int]:
        return [b - a for a, b in zip(self.bounds[:-1], self.bounds[1:])]

    def local_cluster_pointers(self, cluster_ptr: torch.Tensor) -> torch.Tensor:
        """The clusters inside ``[lo, hi)`` as local pointers; raises if a cluster straddles the cut."""
        ptr = torch.as_tensor(cluster_ptr, dtype=torch.int64)
        inside = ptr[(ptr >= self.lo) & (ptr <= self.hi)]
        if inside.numel() == 0 or int(inside[0]) != self.lo or int(inside[-1]) != self.hi:
            raise SettingError(
                f"rank {self.rank}: shard [{self.lo}, {self.hi}) cuts through a cluster; build the shards with "
                "SequenceShards.from_clusters(cluster_ptr) so every rank holds whole clusters"
            )
        return inside - self.lo

    def check_heads(self, heads: int) -> None:
        if heads % self.world_size:
            raise SettingError(f"{heads} attention heads cannot be split over {self.world_size} ranks; use a "
                               f"multiple of {self.world_size} heads")


def seq_to_head(x: torch.Tensor, shards: SequenceShards) -> torch.Tensor:
    """``[local nodes, heads, dim]`` on every rank -> ``[all nodes, heads / P, dim]`` (this rank's heads)."""
    shards.check_heads(x.shape[1])
    n, heads, dim = x.shape
    if n != shards.hi - shards.lo:
        raise SettingError(f"rank {shards.rank}: got {n} local nodes but the shard [{shards.lo}, {shards.hi}) "
                           f"has {shards.hi - shards.lo}")
    p = shards.world_size
    local_heads = heads // p
    # row block r of the send buffer is this rank's nodes with rank r's heads
    send = x.reshape(n, p, local_heads, dim).transpose(0, 1).reshape(p * n, local_heads, dim)
    return all_to_all(send, [n] * p, shards.sizes(), shards.group)


def head_to_seq(y: torch.Tensor, shards: SequenceShards) -> torch.Tensor:
    """Inverse of :func:`seq_to_head`: ``[all nodes, heads / P, dim]`` -> ``[local nodes, heads, dim]``."""
    _, local_heads, dim = y.shape
    p = shards.world_size
    n = shards.hi - shards.lo
    recv = all_to_all(y, shards.sizes(), [n] * p, shards.group)
    return recv.view(p, n, local_heads, dim).transpose(0, 1).reshape(n, p * local_heads, dim)
