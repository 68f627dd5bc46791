"""A synthetic IGBH-shaped typed graph (``synthesize(preset="igbh-<size>")``, ``synth --preset igbh-<size>``).

IGBH's node types and stored relations with IGB's published per-type counts (:data:`~sparsetrain.datasets.presets.
IGBH_NODES`, :data:`~sparsetrain.datasets.presets.IGBH_EDGES`; scaled by ``scale``), drawn as
:mod:`~sparsetrain.datasets.synth_mag` draws its graph (power-law degrees, edges mostly between nodes of the same
hidden class), every node type with features (IGBH's 1024 by default) and papers with a learnable label (19 classes
by default, as IGBH's). The edges are then stored as MLPerf's reference adds them to the imported IGBH
(:func:`~sparsetrain.datasets.igb.with_reference_reverses`: ``cites`` symmetrised with a self-loop per paper,
``rev_<rel>`` for the others), so a synthetic graph and an imported one have the same edge types. large's journal
and conference types (and its published/venue relations) are left out: their edge counts are not published with
the others.
"""

from __future__ import annotations

from sparsetrain.datasets.igb import with_reference_reverses
from sparsetrain.datasets.presets import IGBH_EDGES, IGBH_NODES, IGBH_PRESETS, IGBH_RELATIONS
from sparsetrain.datasets.sources import GraphInput
from sparsetrain.datasets.synth_mag import typed_graph
from sparsetrain.errors import DatasetError


def igbh_graph(preset: str, scale: float, num_classes: int, feature_dim: int, seed: int) -> GraphInput:
    """The IGBH-shaped graph of ``preset`` (``igbh-tiny|small|medium|large``) at ``scale`` times its counts."""
    if preset not in IGBH_PRESETS:
        raise DatasetError(f"preset {preset!r} is not an IGBH preset; choose one of {', '.join(IGBH_PRESETS)}")
    size = IGBH_PRESETS[preset]
    nodes = IGBH_NODES[size]
    graph = typed_graph(nodes, dict(zip(IGBH_RELATIONS, IGBH_EDGES[size])), scale, num_classes, feature_dim, seed,
                        f"IGBH-{size}'s size", featured=tuple(nodes))
    graph.edges = with_reference_reverses(graph.edges, graph.num_nodes["paper"])
    graph.provenance = {"generator": "synth-igbh", "preset": preset, "scale": scale, "classes": num_classes,
                        "seed": seed}
    return graph
