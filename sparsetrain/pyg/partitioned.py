"""PyG's ``(FeatureStore, GraphStore)`` over one part of a partitioned folder: ``partitioned_stores(DIR, rank)``.

Under ``torch.distributed`` (one rank per part), ``sparsetrain.pyg.NeighborLoader(partitioned_stores(DIR), ...)``
samples the partitioned graph with :class:`~sparsetrain.partitioned.DistNeighborSampler` and fetches ``x`` through
:class:`~sparsetrain.partitioned.PartitionedFeatures`: ids stay global, and each batch is the single-process drop-in's
batch for the same seeds and key. Sampling and fetching are collective, so every rank runs as many batches
(the loader pads the short ranks with empty batches) and ``num_workers`` must be 0. ``y`` is exact for the nodes a
rank owns (the seeds) and -1 for the others (remote labels are not sent).
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist
from torch_geometric.data import FeatureStore, GraphStore
from torch_geometric.data.feature_store import TensorAttr
from torch_geometric.data.graph_store import EdgeAttr, EdgeLayout

from sparsetrain import _args
from sparsetrain.errors import SettingError
from sparsetrain.partition.load import Partition, load_partition
from sparsetrain.partitioned.features import PartitionedFeatures
from sparsetrain.partitioned.seeds import global_batches_per_epoch, global_rank_batches, global_split


class PartitionGraphStore(GraphStore):
    """The topology of one part, for sparsetrain's sampler only: it reports the whole graph's size (global ids) and
    refuses ``csc()`` (the part's local CSC is not the graph, so another sampler would sample the wrong thing)."""

    def __init__(self, part: Partition) -> None:
        super().__init__()
        self.part = part

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        n = self.part.num_nodes
        return [EdgeAttr(edge_type=None, layout=EdgeLayout.CSC, is_sorted=True, size=(n, n))]

    def _get_edge_index(self, edge_attr: EdgeAttr):
        raise SettingError(f"{self.part.path}: a partitioned graph is sampled by sparsetrain.pyg.NeighborLoader "
                           "only; its part's CSC is not the graph")

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        return False

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return False


class PartitionFeatureStore(FeatureStore):
    """``x`` through :class:`PartitionedFeatures` (collective), ``y`` of the owned nodes (-1 for the others), by global
    id. The sampler notes the owner of each node of its last batch (:meth:`note_owners`), so the fetch of that batch's
    ``x`` asks each row's owner directly."""

    def __init__(self, part: Partition, features: PartitionedFeatures) -> None:
        super().__init__()
        self.part, self.features = part, features
        self._owned = part.owned_global().numpy()
        self._noted: tuple[torch.Tensor, torch.Tensor] | None = None

    def note_owners(self, nodes: torch.Tensor, owner: torch.Tensor) -> None:
        self._noted = (nodes, owner)

    def _owner_of(self, index: torch.Tensor) -> torch.Tensor | None:
        if self._noted is not None and torch.equal(self._noted[0], index):
            return self._noted[1]
        return None  # owned or halo ids only (PartitionedFeatures says so in one line otherwise)

    def _labels(self, index: torch.Tensor) -> torch.Tensor:
        ids = index.numpy()
        pos = np.searchsorted(self._owned, ids).clip(max=max(len(self._owned) - 1, 0))
        owned = (self._owned[pos] == ids) if len(self._owned) else np.zeros(len(ids), bool)
        y = torch.full((len(ids),), -1, dtype=self.part.dataset.labels.dtype)
        y[torch.from_numpy(owned)] = self.part.dataset.labels[torch.from_numpy(pos[owned])]
        return y

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor | None:
        if attr.group_name is not None or attr.attr_name not in ("x", "y"):
            return None
        if not attr.is_set("index") or attr.index is None or isinstance(attr.index, slice):
            raise SettingError(f"{attr.attr_name!r} of a partitioned graph is read by node ids only")
        index = torch.as_tensor(attr.index).view(-1).to(torch.int64)
        if attr.attr_name == "y":
            return self._labels(index)
        return self.features.gather(index, owner=self._owner_of(index))

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        if attr.attr_name == "x":
            return tuple(self.features.shape)
        return (self.part.num_nodes,) if attr.attr_name == "y" else None

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=None, attr_name=name) for name in ("x", "y")]

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        return False

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return False


def partitioned_stores(path: str | os.PathLike, rank: int | None = None, *, cache_rows: int = 0, group=None
                       ) -> tuple[PartitionFeatureStore, PartitionGraphStore]:
    """The ``(FeatureStore, GraphStore)`` pair of part ``rank`` (default: this process's rank) of a partitioned folder.
    Collective (the feature store fills its halo cache of ``cache_rows`` rows)."""
    cache_rows = _args.integer("partitioned_stores", "cache_rows", cache_rows, low=0, error=SettingError)
    part = load_partition(path, dist.get_rank(group) if rank is None else rank)
    return PartitionFeatureStore(part, PartitionedFeatures(part, group=group, cache_rows=cache_rows)), \
        PartitionGraphStore(part)


def is_partitioned(data) -> bool:
    """Whether ``data`` is a pair from :func:`partitioned_stores`."""
    return isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[1], PartitionGraphStore)


class PaddedBatches:
    """A ``batch_sampler`` of this rank's positions in its ``owned`` seeds (ascending global ids): its shares of the
    one-process epoch's batches, as :func:`~sparsetrain.partitioned.global_rank_batches` cuts them (``split_ids``, the
    whole split, shuffled by ``seed`` and the epoch, in batches of ``batch_size`` x world size), as many on every
    rank (an empty share samples too). Each pass is the next epoch, so the drop-in and ``sparsetrain train`` over the
    same parts draw the same epochs; ``drop_last`` drops the one-process epoch's last, short batch."""

    def __init__(self, part, split_ids: torch.Tensor, owned: torch.Tensor, batch_size: int, shuffle: bool, *,
                 seed: int, drop_last: bool = False) -> None:
        self.part, self.split_ids, self.owned = part, split_ids, owned
        self.batch_size, self.shuffle, self.seed, self.drop_last = batch_size, shuffle, seed, drop_last
        self.epoch = 0
        whole = batch_size * part.num_parts
        self.num_batches = (len(split_ids) // whole if drop_last
                            else global_batches_per_epoch(len(split_ids), batch_size, part.num_parts))

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self):
        shares = global_rank_batches(self.part, self.split_ids, self.owned, self.batch_size, seed=self.seed,
                                     epoch=self.epoch, shuffle=self.shuffle)
        self.epoch += 1
        for inp in shares[: self.num_batches]:
            yield torch.searchsorted(self.owned, inp.seeds).tolist()


def partitioned_loader_args(stores, input_nodes, kwargs: dict, seed: int | None) -> tuple[torch.Tensor, dict]:
    """``NeighborLoader``'s seeds and DataLoader arguments over :func:`partitioned_stores`: ``input_nodes`` names a
    split (its owned nodes are this rank's seeds), this rank's shares of the one-process epoch's batches (``batch_size``
    a rank: :class:`PaddedBatches`), shuffled (``shuffle``) from the sampler's ``seed``. Collective (one all-gather
    of the split's ids)."""
    part = stores[1].part
    if not isinstance(input_nodes, str) or input_nodes not in part.manifest["parts"][0]["splits"]:
        raise SettingError(f"input_nodes={input_nodes!r}: over a partitioned graph name a split (e.g. 'train'), so "
                           "every rank runs as many batches")
    if kwargs.get("num_workers", 0) or kwargs.get("batch_sampler") is not None:
        raise SettingError("num_workers and batch_sampler are not offered over a partitioned graph (sampling is "
                           "collective, in batch order); leave them unset")
    args = dict(kwargs)
    batch_size = _args.integer("NeighborLoader", "batch_size", args.pop("batch_size", 1), low=1, error=SettingError)
    shuffle = _args.boolean("NeighborLoader", "shuffle", args.pop("shuffle", False))
    drop_last = _args.boolean("NeighborLoader", "drop_last", args.pop("drop_last", False))
    seeds = part.split_global(input_nodes)
    if seed is None:
        raise SettingError("seed: not offered over a partitioned graph; sample directional, forward, untimed, "
                           "unweighted on the CPU, with the same integer seed on every rank")
    group = getattr(stores[0], "features", None)
    args["batch_sampler"] = PaddedBatches(part, global_split(part, input_nodes, getattr(group, "group", None)),
                                          seeds.to(torch.int64), batch_size, shuffle, seed=seed, drop_last=drop_last)
    return seeds, args
