"""Stage 3, fetch: attach a batch's input-node features ``x`` and seed labels ``y``.

Features come from any feature store (``gather(ids)``: tiers, caches, ``ShardedFeatures``,
whose gather is a collective) or a tensor. For typed batches the same stage takes one
store per node type and fills ``x`` per type; a node type without a store gets its global
node ids as ``x`` (int64), for a model that embeds them (:class:`~sparsetrain.nn.RGCN`).
Inside, both are one loop over types: a homogeneous batch is the one-type case (node type
``_N``, edge type ``(_N, _E, _N)``), its ``x`` and ``edge_attr`` the one value.

Every gathered batch of floating-point features is checked for NaN and inf before it goes on:
one min/max reduction over rows already in hand (a NaN anywhere makes both NaN, an infinity
shows as one of them; no overflow, no temporary); only when one is not finite are the rows
looked at, to name them (:func:`check_finite`). Rows on a GPU are checked late (:class:`LateFinite`): the min/max
goes to a ring of pinned host buffers and is read once it has arrived, a batch or more later and at the latest at the
epoch's end, so the check costs no host wait.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from sparsetrain._late_reads import LateChecks
from sparsetrain.engine.late_loss import TorchEvents
from sparsetrain.errors import DatasetError, LoaderError
from sparsetrain.sampling.graph import EDGE_TYPE, NODE_TYPE
from sparsetrain.sampling.minibatch import MiniBatch, by_type, one_type_view
from sparsetrain.storage.mmap import MmapFeatures
from sparsetrain.storage.rows import gather_rows
from sparsetrain.storage.tensor import TensorFeatures


class FetchFeatures:
    """``x = features[input_nodes]``, ``y = labels[seeds]`` (``labels`` None: ``y`` left as sampled); :meth:`prefetch`
    starts a read early.

    With ``edge_features`` (a store or tensor of one row per graph edge, e.g. ``ds.edge_features``),
    ``edge_attr[i]`` = the rows of block ``i``'s ``edge_ids`` (typed: ``edge_features`` a dict by edge type, e.g. a
    typed ``ds.edge_features``, and ``edge_attr[i]`` a dict by the edge types that have them).

    A batch with a fused last hop (``NeighborSampler(fuse_last_hop=True)``) gets ``neighbor_mean``, that hop drawn and
    averaged over the whole table (a tensor or mapped store's; :mod:`sparsetrain.sampling.fused_mean`).

    A plain, contiguous CPU tensor is read with the prefetching Numba gather (``TensorFeatures``;
    ~15% off a products-scale step against ``x[ids]``); a tensor that requires grad keeps torch
    indexing, so gradients reach it.
    """

    phase = "fetch"  # its profiler range (stages/chain.py)

    def __init__(self, features, labels: torch.Tensor | None = None, edge_features=None) -> None:
        self._stores = {t: _store(f) for t, f in by_type(features, NODE_TYPE).items()}
        self.features = one_type_view(self._stores, NODE_TYPE)  # the user's view: a homogeneous graph's one store
        self.labels = labels
        self.edge_features = edge_features
        self._edge_stores = by_type(edge_features, EDGE_TYPE)
        self._prefetch = {t: hook for t, store in self._stores.items()
                          if (hook := getattr(store, "prefetch", None)) is not None}
        self._table = None  # the whole feature table a fused last hop averages rows of, taken at its first batch
        self.finite = LateFinite()  # the NaN/inf checks, of rows on a GPU read late

    def prefetch(self, mb: MiniBatch) -> None:
        """Let a store with a ``prefetch(ids)`` hook (a cache) start fetching the batch's rows; else nothing."""
        nodes = mb.input_nodes_by_type
        for t, hook in self._prefetch.items():
            if t in nodes:
                hook(nodes[t])

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
        self.finite.drain()  # the epoch's last checks (before its end is reported)
        for store in self._stores.values():  # ids a GPU store range-checked on the device: one read an epoch
            if getattr(store, "ids_checked_on_device", False) and hasattr(store, "check"):
                store.check()

    def __call__(self, mb: MiniBatch) -> MiniBatch:
        x = {}
        for t, ids in mb.input_nodes_by_type.items():
            store = self._stores.get(t)
            if store is None:  # a type without features: its node ids (for an embedding)
                x[t] = ids
                continue
            x[t] = gather_rows(store, ids)
            self.finite(x[t], ids, store, "" if t == NODE_TYPE else f"node type {t!r}: ")
        mb.x_by_type = x
        if self.labels is not None:  # without node labels, y stays what the sampler set (edge labels of a link batch)
            mb.y = self.labels[mb.seeds]
        if self.edge_features is not None:
            mb.edge_attr_by_type = [self._edge_rows(block) for block in mb.blocks]
        last_hop = getattr(mb, "last_hop", None)
        if last_hop is not None:
            mb.neighbor_mean = last_hop.mean(self._whole_table())
            self.finite(mb.neighbor_mean, mb.input_nodes_by_type[NODE_TYPE], self._stores[NODE_TYPE],
                        "the fused last hop's mean: ")
            mb.last_hop = None  # its graph stays where it is: the device stage moves the batch's tensors
        return mb

    def _whole_table(self) -> torch.Tensor:
        if self._table is None:
            store = self._stores[NODE_TYPE]
            if isinstance(store, TensorFeatures):
                self._table = store.tensor
            elif isinstance(store, MmapFeatures) and not store.direct:
                self._table = store.tensor()
            else:
                raise LoaderError(f"a fused last hop averages rows of the whole feature table, which a "
                                  f"{type(store).__name__} does not hold; keep the features in a tensor or a mapped "
                                  "file (--features memory, mmap or device)")
        return self._table

    def _edge_rows(self, block) -> dict:
        """One block's edge feature rows by the edge types that have edge features."""
        attr = {}
        for et, ids in (block.edge_ids_by_type or {}).items():
            store = self._edge_stores.get(et)
            if store is not None:
                attr[et] = gather_rows(store, ids)
                self.finite(attr[et], ids, store, ("" if et == EDGE_TYPE else f"edge type {et}: ") + "edge features: ")
        return attr


def check_finite(x: torch.Tensor, ids: torch.Tensor, store, what: str = "") -> None:
    """Raise :class:`~sparsetrain.errors.DatasetError` naming ``store``'s file and a few of ``ids`` when the
    floating-point rows ``x`` (``x[i]`` read for ``ids[i]``) hold a NaN or an infinity. Costs one min/max pass when
    they do not (benchmarks/finite_check.py: about a quarter of the gather, ~1% of a CPU training step)."""
    if not x.dtype.is_floating_point or x.numel() == 0:
        return
    if all(math.isfinite(v) for v in torch.stack(torch.aminmax(x)).tolist()):
        return
    bad = (~torch.isfinite(x.reshape(len(x), -1))).any(dim=1).nonzero().flatten()
    shown = ", ".join(str(int(i)) for i in ids.reshape(-1)[bad].cpu().sort().values[:5])
    source = feature_source(store)
    if source == TENSOR:
        fix = "replace them before training (e.g. torch.nan_to_num)"
    else:
        fix = ("the file changed after import (`sparsetrain info` on its folder checks every file); re-import the data "
               "with finite values (`sparsetrain preprocess`)")
    more = " ..." if len(bad) > 5 else ""
    raise DatasetError(f"{source}: {what}rows {shown}{more} hold NaN or inf ({len(bad)} of the {len(x)} rows this "
                       f"batch read); {fix}")


TENSOR = "the feature tensor"


class LateFinite:
    """:func:`check_finite` for a batch's rows, read late when they are on a GPU: their min and max are copied to the
    next of ``RING`` pinned host buffers with an event after the copy and checked once the event has passed (at a later
    batch, or at :meth:`drain`, the epoch's end), as the trainer reads its losses (:class:`LateChecks`); no host wait
    unless the host runs ``RING`` batches ahead. A check that fails reads the rows again from their store to name them.
    Rows in host memory are checked at once. ``events``: :class:`~sparsetrain.engine.late_loss.TorchEvents`, or a
    stand-in with its three methods; ``late=True`` reads host rows late too (tests: a lagging device on a CPU).
    ``waits``: host waits made at a batch."""

    RING = LateChecks.RING

    def __init__(self, events=TorchEvents, late: bool = False) -> None:
        self._events, self._late_all = events, late
        self._late = LateChecks(events)
        self._host: torch.Tensor | None = None
        self.pushed = 0
        self.waits = 0
        self.drain_waits = 0

    def __call__(self, x: torch.Tensor, ids: torch.Tensor, store, what: str = "") -> None:
        if not x.dtype.is_floating_point or x.numel() == 0:
            return
        if not (x.is_cuda or self._late_all):
            check_finite(x, ids, store, what)
            return
        values = torch.stack(torch.aminmax(x)).double()
        if self._host is None:
            self._host = torch.zeros(self.RING, 2, dtype=torch.float64, pin_memory=values.is_cuda)
        host = self._host[self.pushed % self.RING]  # free: the check RING before this one was read at the last call
        host.copy_(values, non_blocking=True)
        n = len(x)
        self._late.add(self._events.record(values), host, lambda read: _finite_or_raise(read, n, ids, store, what))
        self.pushed += 1
        self.waits += self._late.settle()

    def drain(self) -> None:
        """Read every check in flight (the first that failed raises)."""
        self.drain_waits += self._late.drain()


def _finite_or_raise(values: list[float], rows: int, ids: torch.Tensor, store, what: str) -> None:
    """A late check's min and max, arrived: finite, or the rows read again from ``store`` to name the bad ones."""
    if all(math.isfinite(v) for v in values):
        return
    if not isinstance(store, dict) and len(ids) == rows:
        check_finite(gather_rows(store, ids), ids, store, what)  # raises, naming the rows (the same rows, read again)
    raise DatasetError(f"{feature_source(store)}: {what}a batch's {rows} rows hold NaN or inf (read late); replace "
                       "them before training (e.g. torch.nan_to_num) or re-import the data with finite values")


def feature_source(store) -> str:
    """The file ``store``'s rows come from (through any caches in front of it), or ``TENSOR`` for rows in memory."""
    while hasattr(store, "backing"):
        store = store.backing
    path = getattr(store, "path", None)
    return TENSOR if path is None else str(path)


def _store(features):
    if (isinstance(features, torch.Tensor) and features.device.type == "cpu" and features.is_contiguous()
            and not features.requires_grad):
        return TensorFeatures(features)
    return features
