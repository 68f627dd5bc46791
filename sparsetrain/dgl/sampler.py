"""DGL's ``NeighborSampler`` signature over sparsetrain's sampler: the settings a DGL script passes, and the one mapping
of DGL's fanouts (input layer first, a list or a dict per edge type for each layer) to sparsetrain's
:class:`~sparsetrain.sampling.Fanouts` (seeds outward, PyG's order)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparsetrain import _args
from sparsetrain.errors import InputError
from sparsetrain.sampling.fanouts import Fanouts
from sparsetrain.sampling.graph import CSCGraph


class DGLNeighborSampler:
    """DGL's ``dgl.dataloading.NeighborSampler(fanouts, edge_dir="in", prob=None, mask=None, replace=False,
    prefetch_node_feats=None, prefetch_labels=None, prefetch_edge_feats=None, output_device=None, fused=True)``, for
    :class:`sparsetrain.dgl.DataLoader`.

    ``fanouts[i]``: the neighbours of layer ``i``'s destination nodes, **input layer first** as in DGL (the last entry
    is drawn for the seeds), an int for every edge type (-1: all) or a dict ``{edge type: int}`` naming every edge type
    (its name or its canonical triple). ``prob`` (or ``mask``): the name of an edge feature of the DGL graph that
    weighs each edge's draw (0: never drawn). ``replace``: draw with replacement. ``prefetch_node_feats`` /
    ``prefetch_labels`` / ``prefetch_edge_feats``: names (a dict per type on typed graphs) put on the blocks as DGL
    does: the first block's ``srcdata``, the last block's ``dstdata``, every block's ``edata``. ``edge_dir="out"``
    is refused (sample the reversed graph instead); ``fused`` and ``output_device`` are accepted (sparsetrain's
    sampler is one fused pass; the loader's ``device`` places the batch).
    """

    def __init__(self, fanouts, edge_dir: str = "in", prob: str | None = None, mask: str | None = None,
                 replace: bool = False, prefetch_node_feats=None, prefetch_labels=None, prefetch_edge_feats=None,
                 output_device=None, fused: bool = True) -> None:
        if mask is not None and prob is not None:
            raise InputError("NeighborSampler: prob and mask exclude each other (as in DGL); multiply the "
                             "probability by the mask and give prob")
        self.fanouts = fanouts
        self.edge_dir = edge_dir
        self.prob = prob or mask
        self.replace = _args.boolean("NeighborSampler", "replace", replace)  # 'no' is refused, not read as True
        self.prefetch_node_feats = _names(prefetch_node_feats, "prefetch_node_feats")
        self.prefetch_labels = _names(prefetch_labels, "prefetch_labels")
        self.prefetch_edge_feats = _names(prefetch_edge_feats, "prefetch_edge_feats")
        self.output_device = output_device
        self.fused = fused
        _check_edge_dir(edge_dir)

    def __repr__(self) -> str:
        return (f"sparsetrain.dgl.DGLNeighborSampler(fanouts={self.fanouts!r}, replace={self.replace}, "
                f"prob={self.prob!r})")


class MultiLayerFullNeighborSampler(DGLNeighborSampler):
    """DGL's ``MultiLayerFullNeighborSampler(num_layers, **kwargs)``: every neighbour, ``num_layers`` hops."""

    def __init__(self, num_layers: int, **kwargs) -> None:
        super().__init__([-1] * num_layers, **kwargs)


@dataclass(frozen=True)
class SamplerSettings:
    """What the loader reads of a DGL-style sampler, ours or DGL's own."""

    fanouts: object
    prob: str | None
    replace: bool
    prefetch_node_feats: object
    prefetch_labels: object
    prefetch_edge_feats: object


def settings_of(sampler) -> SamplerSettings:
    """The settings of ``sampler``: a :class:`NeighborSampler` (or a ``MultiLayerFullNeighborSampler``) of
    sparsetrain's or of DGL's (read by its attributes, so a DGL script's sampler object works unchanged)."""
    cls = type(sampler)
    dgl_neighbor = cls.__module__.startswith("dgl.") and any(
        c.__name__ == "NeighborSampler" and c.__module__.startswith("dgl.") for c in cls.__mro__)
    if not isinstance(sampler, DGLNeighborSampler) and not dgl_neighbor:
        raise InputError(f"sparsetrain.dgl.DataLoader samples with a NeighborSampler (sparsetrain.dgl's or "
                         f"dgl.dataloading's); got {cls.__module__}.{cls.__name__}, which it does not run")
    _check_edge_dir(getattr(sampler, "edge_dir", "in"))
    return SamplerSettings(fanouts=sampler.fanouts, prob=getattr(sampler, "prob", None),
                           replace=_args.boolean("NeighborSampler", "replace", getattr(sampler, "replace", False)),
                           prefetch_node_feats=_names(getattr(sampler, "prefetch_node_feats", None),
                                                      "prefetch_node_feats"),
                           prefetch_labels=_names(getattr(sampler, "prefetch_labels", None), "prefetch_labels"),
                           prefetch_edge_feats=_names(getattr(sampler, "prefetch_edge_feats", None),
                                                      "prefetch_edge_feats"))


def _names(value, what: str = "prefetch names"):
    """DGL's prefetch names: None, a name, a list of names, or a dict per type of either (one name is a list of one,
    never its letters)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {k: _name_list(v, f"{what}[{k!r}]") for k, v in value.items()}
    return _name_list(value, what)


def _name_list(value, what: str) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InputError(f"NeighborSampler {what}={value!r}: give a feature name, a list of names, or a dict of "
                     "them per type")


def _check_edge_dir(edge_dir: str) -> None:
    if edge_dir != "in":
        raise InputError(f"NeighborSampler(edge_dir={edge_dir!r}): sparsetrain.dgl samples in-edges (DGL's "
                         "default 'in'); for out-edges, sample the reversed graph (dgl.reverse(g))")


def to_fanouts(fanouts, graph: CSCGraph) -> Fanouts:
    """DGL's per-layer ``fanouts`` (input layer first; ints, or dicts naming every edge type by name or canonical
    triple) as sparsetrain's :class:`Fanouts` (seeds outward)."""
    if not isinstance(fanouts, Sequence) or isinstance(fanouts, str):
        raise InputError(f"NeighborSampler fanouts={fanouts!r}: give a list, one entry per layer (input layer "
                         "first), each an int or a dict per edge type")
    seeds_outward = list(reversed(list(fanouts)))
    if not any(isinstance(f, Mapping) for f in seeds_outward):
        return Fanouts(seeds_outward)
    edge_types = list(graph.edge_types)
    per_type = {et: [] for et in edge_types}
    for layer, fanout in enumerate(seeds_outward):
        if not isinstance(fanout, Mapping):
            for et in edge_types:
                per_type[et].append(fanout)
            continue
        given = {_canonical(key, edge_types): value for key, value in fanout.items()}
        missing = [et for et in edge_types if et not in given]
        if missing:
            raise InputError(f"NeighborSampler fanouts: layer {len(seeds_outward) - 1 - layer} names no fanout for "
                             f"edge type {missing[0]}; as in DGL, a dict gives one for every edge type")
        for et in edge_types:
            per_type[et].append(given[et])
    return Fanouts(per_type)


def _canonical(key, edge_types: list) -> tuple:
    """An edge type as DGL names it (``"follows"`` or ``("user", "follows", "user")``) -> the graph's triple."""
    if isinstance(key, tuple):
        if tuple(key) in edge_types:
            return tuple(key)
    else:
        found = [et for et in edge_types if et[1] == key]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise InputError(f"NeighborSampler fanouts: edge type name {key!r} is ambiguous ({found}); name it by "
                             "its canonical triple")
    raise InputError(f"NeighborSampler fanouts: the graph has no edge type {key!r}; its edge types: {edge_types}")
