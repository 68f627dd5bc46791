"""Stage 3, fetch: attach a batch's input-node features ``x`` and seed labels ``y``.

Features come from any feature store (``gather(ids)``: tiers, caches, ``ShardedFeatures``,
whose gather is a collective) or a tensor. For typed batches the same stage takes one
store per node type and fills ``x`` per type; a node type without a store gets its global
node ids as ``x`` (int64), for a model that embeds them (:class:`~sparsetrain.nn.RGCN`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from sparsetrain.sampling.minibatch import MiniBatch
from sparsetrain.storage.rows import gather_rows
from sparsetrain.storage.tensor import TensorFeatures


class FetchFeatures:
    """``x = features[input_nodes]``, ``y = labels[seeds]`` (``labels`` None: ``y`` left as sampled); :meth:`prefetch` starts a read early.

    With ``edge_features`` (a store or tensor of one row per graph edge, e.g. ``ds.edge_features``),
    ``edge_attr[i]`` = the rows of block ``i``'s ``edge_ids``.

    A plain, contiguous CPU tensor is read with the prefetching Numba gather (``TensorFeatures``;
    ~15% off a products-scale step against ``x[ids]``); a tensor that requires grad keeps torch
    indexing, so gradients reach it.
    """

    def __init__(self, features, labels: torch.Tensor | None = None, edge_features=None) -> None:
        typed = isinstance(features, dict)
        stores = {t: _store(f) for t, f in features.items()} if typed else _store(features)
        self.features = stores
        self.labels = labels
        self.edge_features = edge_features
        self._prefetch = ({t: p for t, f in stores.items() if (p := getattr(f, "prefetch", None)) is not None} if typed
                          else getattr(stores, "prefetch", None))

    def prefetch(self, mb: MiniBatch) -> None:
        """Let a store with a ``prefetch(ids)`` hook (a cache) start fetching the batch's rows; else nothing."""
        if isinstance(self._prefetch, dict):
            for t, hook in self._prefetch.items():
                if t in mb.input_nodes:
                    hook(mb.input_nodes[t])
        elif self._prefetch is not None:
            self._prefetch(mb.input_nodes)

    def over(self, batches: Iterator[MiniBatch]) -> Iterator[MiniBatch]:
        """Batch k + 1's rows are prefetched (a cache starts reading them) before batch k is gathered."""
        pending = None
        for mb in batches:
            self.prefetch(mb)
            if pending is not None:
                yield self(pending)
            pending = mb
        if pending is not None:
            yield self(pending)

    def __call__(self, mb: MiniBatch) -> MiniBatch:
        if isinstance(self.features, dict):  # typed: one store per node type; a type without one gets its node ids (for an embedding)
            mb.x = {t: gather_rows(self.features[t], ids) if t in self.features else ids for t, ids in mb.input_nodes.items()}
        else:
            mb.x = gather_rows(self.features, mb.input_nodes)
        if self.labels is not None:  # without node labels, y stays what the sampler set (edge labels of a link batch)
            mb.y = self.labels[mb.seeds]
        if self.edge_features is not None:
            mb.edge_attr = [gather_rows(self.edge_features, block.edge_ids) for block in mb.blocks]
        return mb


def _store(features):
    if (isinstance(features, torch.Tensor) and features.device.type == "cpu" and features.is_contiguous()
            and not features.requires_grad):
        return TensorFeatures(features)
    return features
