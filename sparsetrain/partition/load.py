"""`load_partition(DIR, rank)`: one part of a partitioned folder, checked against the manifest, with its id maps."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.dataset import GraphDataset, load, verify_structure
from sparsetrain.partition.errors import PartitionError
from sparsetrain.partition.manifest import PART_META, check_parts, read_manifest
from sparsetrain.partition.partitioner import COL_START, HALO_OWNER, L2G, as_int
from sparsetrain.storage.mmap import MmapFeatures


@dataclass
class Partition:
    """One rank's part of a partitioned graph.

    ``dataset``: the part as a dataset over its local nodes (owned ``[0, num_owned)``, then the halo);
    ``local_to_global``: int64 [num_local]; ``halo_owner``: int32 [num_halo], the part owning each halo node;
    ``col_start``: int64 [num_owned], the global CSC position of each owned node's first in-edge; ``features``: the
    owned nodes' rows (None without features); ``manifest``: the folder's manifest (``manifest["parts"][p]`` has
    every part's counts, split sizes included).
    """

    path: Path
    rank: int
    num_parts: int
    dataset: GraphDataset
    local_to_global: torch.Tensor
    halo_owner: torch.Tensor
    col_start: torch.Tensor
    features: MmapFeatures | None
    manifest: dict

    @property
    def num_owned(self) -> int:
        return self.dataset.meta[PART_META]["num_owned"]

    @property
    def num_nodes(self) -> int:
        """Nodes of the whole graph."""
        return self.manifest["dataset"]["num_nodes"]

    def owned_global(self) -> torch.Tensor:
        """The owned nodes' global ids, ascending (local id order)."""
        return self.local_to_global[: self.num_owned]

    def split_global(self, name: str) -> torch.Tensor:
        """The owned nodes of split ``name`` as global ids, ascending."""
        return self.local_to_global[self.dataset.split[name]]

    def to_local(self, ids: torch.Tensor) -> torch.Tensor:
        """Local ids of global ``ids`` owned by this part (one binary search each); an error for any it does not
        own."""
        owned = self.owned_global()
        pos = torch.searchsorted(owned, ids).clamp_(max=max(0, owned.numel() - 1))
        if ids.numel() and (owned.numel() == 0 or not bool((owned[pos] == ids).all())):
            bad = ids[owned[pos] != ids][0] if owned.numel() else ids[0]
            raise PartitionError(f"{self.path}: node {int(bad)} is not owned by part {self.rank}; pass the part's own "
                                 "nodes (Partition.owned_global())")
        return pos


def load_partition(path: str | os.PathLike, rank: int, verify: bool = False, arrays: str | None = None) -> Partition:
    """Part ``rank`` of the partitioned folder ``path``, after checking that every part the manifest lists is there,
    is the one it recorded (same partitioning, same dataset) and that no other part is there, and that the part's
    arrays and the owner map have the shapes and sizes recorded (``arrays``: how much more to check,
    :data:`~sparsetrain.partition.manifest.ARRAY_CHECKS`). ``verify=True`` checks their sha256 and the part's
    structure (a full read)."""
    folder = Path(path)
    manifest = read_manifest(folder)
    P = manifest["num_parts"]
    if as_int(rank) is None:
        raise PartitionError(f"rank={rank!r}: give the rank as an integer from 0 to {P - 1}")
    rank = as_int(rank)
    if isinstance(verify, bool) is False:
        raise PartitionError(f"verify={verify!r}: give True or False")
    if not 0 <= rank < P:
        raise PartitionError(f"{folder}: has {P} parts, so rank {rank} has none; run {P} ranks (e.g. torchrun "
                             f"--nproc-per-node {P})")
    check_parts(folder, manifest, arrays="sha256" if verify else arrays or "sizes", which=[rank])
    entry = manifest["parts"][rank]
    ds = load(folder / entry["folder"])
    if verify:
        verify_structure(ds)
    own = ds.meta[PART_META]

    def array(name: str) -> torch.Tensor:
        return torch.from_numpy(fmt.open_array(ds.path, name, ds.meta, mmap=False))

    l2g = array(L2G)
    if l2g.numel() != own["num_owned"] + own["num_halo"]:
        raise PartitionError(f"{ds.path / L2G}: has {l2g.numel()} ids for {own['num_owned'] + own['num_halo']} local "
                             "nodes; re-run `sparsetrain partition`")
    halo_owner, col_start = array(HALO_OWNER), array(COL_START)
    num_local = own["num_owned"] + own["num_halo"]
    for path, values, low, high in ((ds.path / L2G, l2g, 0, manifest["dataset"]["num_nodes"]),
                                    (ds.path / HALO_OWNER, halo_owner, 0, P),
                                    (ds.path / COL_START, col_start, 0, manifest["dataset"]["num_edges"] + 1),
                                    (ds.path / fmt.INDICES, ds.graph.indices, 0, num_local)):
        _check_range(path, values, low, high)
    features = None
    if own.get("owned_features"):
        features = MmapFeatures(ds.path / own["owned_features"])
    return Partition(folder, rank, P, ds, l2g, halo_owner, col_start, features, manifest)


def _check_range(path: Path, values: torch.Tensor, low: int, high: int) -> None:
    """Every entry in ``[low, high)``: one vectorised min/max (the samplers and the exchange index by them
    unchecked, so an edited part would crash a rank or read another node's rows)."""
    if values.numel() and (int(values.min()) < low or int(values.max()) >= high):
        bad = int(values.min()) if int(values.min()) < low else int(values.max())
        raise PartitionError(f"{path}: holds {bad}, outside [{low}, {high}); the part was edited, re-run "
                             "`sparsetrain partition`")


def part_sizes(manifest: dict, split: str) -> list[int]:
    """Per part, how many owned nodes split ``split`` has (from the manifest: no part is opened)."""
    return [int(p["splits"].get(split, 0)) for p in manifest["parts"]]


def owners(path: str | os.PathLike) -> np.ndarray:
    """The owner of every node (int16 [N]), from the folder's ``owner.npy``."""
    folder = Path(path)
    manifest = read_manifest(folder)
    owner = np.load(folder / manifest["owner"]["file"], allow_pickle=False)
    if fmt.sha256_file(folder / manifest["owner"]["file"]) != manifest["owner"]["sha256"]:
        raise PartitionError(f"{folder / manifest['owner']['file']}: sha256 differs from the manifest's; re-run "
                             "`sparsetrain partition`")
    return owner
