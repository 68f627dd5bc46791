"""Typed batches stay byte-identical across refactors: a sha256 of sampled batches on an ogbn-mag-shaped random
graph."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from sparsetrain.sampling import CSCGraph, NeighborSampler, SamplerInput

# sha256 of the batches below, recorded on the tree before the typed and homogeneous graphs became one class
# (main at 125e9cc): the unified sampler must draw exactly the same typed batches.
TYPED_BATCHES_SHA256 = "3a59c420da2e7149a183ef36bf31a61194e72bd260bef12e5514916de325bf63"

MAG_NODES = {"paper": 900, "author": 1300, "institution": 40, "field_of_study": 150}
MAG_RELATIONS = [("author", "writes", "paper", 3000), ("paper", "cites", "paper", 4000),
                 ("author", "affiliated_with", "institution", 1000), ("paper", "has_topic", "field_of_study", 2500)]


def mag_like_graph(seed: int = 11) -> CSCGraph:
    """Four node types, eight edge types (each relation and its reverse), repeated edges included, in random order."""
    rng = np.random.default_rng(seed)
    edges = {}
    for src, rel, dst, count in MAG_RELATIONS:
        ei = np.stack([rng.integers(0, MAG_NODES[src], count), rng.integers(0, MAG_NODES[dst], count)])
        edges[(src, rel, dst)] = torch.from_numpy(ei)
        edges[(dst, f"rev_{rel}", src)] = torch.from_numpy(ei[::-1].copy())
    return CSCGraph.from_edge_index_dict(edges, MAG_NODES)


def typed_digest(graph, sampler_for) -> str:
    digest = hashlib.sha256()
    cases = [([5, 3], "dgl"), ([5, 3], "pyg"), ([-1, 2], "dgl"), ([4, 4, 2], "pyg"),
             ({("author", "writes", "paper"): [6, 2], ("paper", "cites", "paper"): [3, 0],
               ("paper", "rev_writes", "author"): [0, 4]}, "dgl")]
    for fanouts, hops in cases:
        sampler = sampler_for(graph, fanouts, hops)
        for key in range(3):
            seeds = torch.from_numpy(np.random.default_rng(key).permutation(MAG_NODES["paper"])[:48])
            mb = sampler.sample(SamplerInput(seeds, key=key, node_type="paper"))
            for t in sorted(mb.input_nodes):
                digest.update(t.encode() + mb.input_nodes[t].numpy().tobytes())
            for block in mb.blocks:
                digest.update(
                    repr(sorted(block.num_src.items())).encode() + repr(sorted(block.num_dst.items())).encode()
                )
                for et in sorted(block.edge_index):
                    ids = block.edge_ids[et]  # the edge's column in the edge_index it was built from
                    digest.update(repr(et).encode() + block.edge_index[et].numpy().tobytes() + ids.numpy().tobytes())
    return digest.hexdigest()


def test_typed_batches_are_byte_identical_to_before_the_one_graph_model():
    hop_nodes = {"dgl": "all", "pyg": "new"}

    def sampler_for(g, fanouts, hops):
        return NeighborSampler(g, fanouts, seed_type="paper", hop_nodes=hop_nodes[hops], seed=7)

    assert typed_digest(mag_like_graph(), sampler_for) == TYPED_BATCHES_SHA256
