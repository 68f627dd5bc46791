"""Every sampler mode's batches stay byte-identical across the split of ``NeighborSampler`` into a core, its modes
and its backends: a sha256 of batches drawn with each option (plain, replace, weighted, PyG's hops, disjoint,
temporal by node and by edge time, bidirectional, induced, a fused last hop, typed seeds of several types) on small
random graphs."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput

# recorded on the tree before the split (wt-sampler at 4a905dd): the split sampler must draw exactly these batches
MODES_SHA256 = "1c0ef78df769647ddd0f8aa11815ddcee996c887cced93c9a92e7c0fb7b1a9f9"


def _update(digest, value) -> None:
    """Fold ``value`` (a tensor, a dict by type, a Block, a number, None) into ``digest`` in a fixed order."""
    if value is None:
        digest.update(b"none")
    elif isinstance(value, torch.Tensor):
        digest.update(repr((value.dtype, list(value.shape))).encode() + value.contiguous().numpy().tobytes())
    elif isinstance(value, dict):
        for k in sorted(value, key=repr):
            digest.update(repr(k).encode())
            _update(digest, value[k])
    else:
        digest.update(repr(value).encode())


def batch_digest(digest, mb) -> None:
    """The batch's nodes, blocks, seed indices, flat subgraph and fused last hop."""
    _update(digest, mb.input_nodes)
    for block in mb.blocks:
        for part in (block.edge_index, block.edge_ids, block.num_src, block.num_dst):
            _update(digest, part)
    _update(digest, getattr(mb, "batch", None))
    flat = getattr(mb, "subgraph", None)
    if flat is not None:
        for part in (flat.edge_index, flat.edge_ids, flat.num_src, flat.num_dst):
            _update(digest, part)
    hop = getattr(mb, "last_hop", None)
    if hop is not None:
        for part in (hop.nodes, hop.first, hop.num_dst, hop.fanout, hop.key):
            _update(digest, part)


def homogeneous(n: int = 300, e: int = 3000, seed: int = 0) -> tuple[CSCGraph, torch.Tensor, torch.Tensor]:
    """A random graph with weights and a permutation of its edge ids, node times and edge times (edge-id order)."""
    rng = np.random.default_rng(seed)
    ei = torch.from_numpy(rng.integers(0, n, (2, e)))
    w = torch.from_numpy(rng.random(e).astype(np.float32))
    g = CSCGraph.from_edge_index(ei, n, edge_weight=w)
    return g, torch.from_numpy(rng.integers(0, 50, n)), torch.from_numpy(rng.integers(0, 50, e))


def typed() -> CSCGraph:
    rng = np.random.default_rng(3)
    sizes = {"a": 120, "b": 90}
    edges = {}
    for src, rel, dst, count in (("a", "to", "b", 700), ("b", "to", "a", 600), ("a", "self", "a", 500)):
        edges[(src, rel, dst)] = torch.from_numpy(np.stack([rng.integers(0, sizes[src], count),
                                                            rng.integers(0, sizes[dst], count)]))
    return CSCGraph.from_edge_index_dict(edges, sizes)


def modes_digest() -> str:
    g, node_time, edge_time = homogeneous()
    tg = typed()
    cases = [
        (g, [5, 3, 2], {}), (g, [4, -1], {"replace": True}), (g, [6, 3], {"weighted": True}),
        (g, [6, 3, 2], {"hop_nodes": "new"}), (g, [4, 3], {"disjoint": True}),
        (g, [4, 3], {"node_time": node_time}), (g, [4, 3], {"edge_time": edge_time, "temporal_strategy": "last"}),
        (g, [3, 2], {"subgraph_type": "bidirectional"}), (g, [3, 2], {"subgraph_type": "induced"}),
        (g, [5, 4, 3], {"fuse_last_hop": True}), (g, [5, 4], {"fuse_last_hop": True, "hop_nodes": "new"}),
        (g, [3], {"fuse_last_hop": True}), (g, [], {}),
        (tg, [4, 3], {"seed_type": "b"}), (tg, [3, 2], {"seed_type": "a", "hop_nodes": "new", "disjoint": True}),
        (tg, [3, 2], {"seed_type": "a", "subgraph_type": "induced"}),
        (tg, [3, 2], {"seed_type": "a", "subgraph_type": "bidirectional"}),
    ]
    digest = hashlib.sha256()
    for graph, fanouts, kw in cases:
        sampler = NeighborSampler(graph, fanouts, seed=11, **kw)
        for key in range(3):
            rng = np.random.default_rng(key)
            if graph.is_typed:
                seeds = torch.from_numpy(rng.permutation(120 if kw["seed_type"] == "a" else 90)[:24])
                inp = SamplerInput(seeds, key=key)
            else:
                seed_time = torch.from_numpy(rng.integers(10, 50, 40)) if "edge_time" in kw else None
                inp = SamplerInput(torch.from_numpy(rng.permutation(300)[:40]), key=key, seed_time=seed_time)
            batch_digest(digest, sampler.sample(inp))
        mixed = {"a": torch.tensor([3, 7, 9]), "b": torch.tensor([1, 2])}
        if graph.is_typed and not kw.get("disjoint"):
            batch_digest(digest, sampler.sample(SamplerInput(mixed, key=5)))
    return digest.hexdigest()


def test_every_mode_draws_the_batches_it_drew_before_the_split():
    assert modes_digest() == MODES_SHA256
