"""`load_partition(DIR, rank)`: one part of a partitioned folder, checked against the manifest, with its id maps."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sparsetrain.datasets import format as fmt
from sparsetrain.datasets.dataset import GraphDataset, load, verify_structure
from sparsetrain.errors import DatasetError
from sparsetrain.partition.manifest import PART_META, check_parts, read_manifest
from sparsetrain.partition.partitioner import as_int
from sparsetrain.partition.per_type import col_start_file, halo_owner_file, l2g_file
from sparsetrain.storage.mmap import MmapFeatures


@dataclass
class PartTypes:
    """A part's node and edge types in the flat id space its id maps use (node type after node type: ``flat =
    type_offset[t] + id within the type``); a homogeneous part is the one-type case (``_N``, ``(_N, _E, _N)``).

    Per node type: ``num_owned``, ``num_halo``; ``owned_start``: the flat local id of its first owned node (owned
    nodes of every type come first, type by type, then the halo, type by type); ``halo_start``: its first halo node's
    index among the part's halo. Per edge type: ``et_src``, ``et_dst`` (node type indices) and ``col_offset``: its
    first column in the part's CSC (columns: the destination type's local nodes)."""

    node_types: list[str]
    edge_types: list[tuple[str, str, str]]
    type_offset: np.ndarray
    num_owned: np.ndarray
    num_halo: np.ndarray
    et_src: np.ndarray
    et_dst: np.ndarray

    def __post_init__(self) -> None:
        self.owned_start = (np.cumsum(self.num_owned) - self.num_owned).astype(np.int64)
        self.halo_start = (np.cumsum(self.num_halo) - self.num_halo).astype(np.int64)
        local = self.num_owned + self.num_halo
        self.col_offset = np.concatenate([[0], np.cumsum(local[self.et_dst])]).astype(np.int64)

    def index(self, node_type: str | None) -> int:
        """The index of ``node_type`` (None: the part's one node type, when it has one)."""
        if node_type is None and len(self.node_types) == 1:
            return 0
        if node_type not in self.node_types:
            raise DatasetError(f"node type {node_type!r} is not one of the partitioned graph's {self.node_types}")
        return self.node_types.index(node_type)


@dataclass
class Partition:
    """One rank's part of a partitioned graph.

    ``dataset``: the part as a dataset over its local nodes (per node type, owned then halo); ``local_to_global``:
    int64 [num_local], flat ids (node type after node type, ``types.type_offset``); ``halo_owner``: int32 [num_halo],
    the part owning each halo node; ``col_start``: int64, per edge type its owned columns' positions (within the edge
    type) of their first in-edge in the whole graph, then zeros for its halo columns; ``features_by_type``: the owned
    rows per node type with features; ``manifest``: the folder's manifest (``manifest["parts"][p]`` has every part's
    counts, split sizes included).
    """

    path: Path
    rank: int
    num_parts: int
    dataset: GraphDataset
    local_to_global: torch.Tensor
    halo_owner: torch.Tensor
    col_start: torch.Tensor
    manifest: dict
    types: PartTypes
    features_by_type: dict[str, MmapFeatures] = field(default_factory=dict)

    @property
    def features(self) -> MmapFeatures | dict[str, MmapFeatures] | None:
        """The owned rows: one table for a one-type graph (None without features), a dict by node type for a typed
        one (the dataset's view)."""
        return self.dataset._view(self.features_by_type)

    @property
    def target_type(self) -> str | None:
        return self.dataset.target_type

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

    def owned_of_type(self, node_type: str | None = None) -> torch.Tensor:
        """The owned nodes of a node type, as ids within the type, ascending (local id order within the type)."""
        t = self.types.index(node_type)
        start = int(self.types.owned_start[t])
        return self.local_to_global[start : start + int(self.types.num_owned[t])] - int(self.types.type_offset[t])

    def split_global(self, name: str) -> torch.Tensor:
        """The owned nodes of split ``name`` as global ids (typed: ids within the target type), ascending."""
        t = self.types.index(self.target_type)
        return self.local_to_global[self.dataset.split[name] + int(self.types.owned_start[t])] - int(
            self.types.type_offset[t])

    def to_local(self, ids: torch.Tensor, node_type: str | None = None) -> torch.Tensor:
        """Local ids (within ``node_type``) of global ``ids`` (typed: ids within the type) owned by this part (one
        binary search each); an error for any it does not own."""
        owned = self.owned_of_type(node_type)
        pos = torch.searchsorted(owned, ids).clamp_(max=max(0, owned.numel() - 1))
        if ids.numel() and (owned.numel() == 0 or not bool((owned[pos] == ids).all())):
            bad = ids[owned[pos] != ids][0] if owned.numel() else ids[0]
            raise DatasetError(f"{self.path}: node {int(bad)} is not owned by part {self.rank}; pass the part's own "
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
        raise DatasetError(f"rank={rank!r}: give the rank as an integer from 0 to {P - 1}")
    rank = as_int(rank)
    if isinstance(verify, bool) is False:
        raise DatasetError(f"verify={verify!r}: give True or False")
    if not 0 <= rank < P:
        raise DatasetError(f"{folder}: has {P} parts, so rank {rank} has none; run {P} ranks (e.g. torchrun "
                           f"--nproc-per-node {P})")
    check_parts(folder, manifest, arrays="sha256" if verify else arrays or "sizes", which=[rank])
    entry = manifest["parts"][rank]
    ds = load(folder / entry["folder"])
    if verify:
        verify_structure(ds)
    return _read_part(folder, rank, P, ds, manifest)


def _read_part(folder: Path, rank: int, P: int, ds: GraphDataset, manifest: dict) -> Partition:
    """A part: its per-type id maps and per-edge-type column starts, read and checked, joined into the flat id
    space (:class:`PartTypes`)."""
    own = ds.meta[PART_META]
    node_types, edge_types = ds.node_types, ds.edge_types
    whole = manifest["dataset"]
    if whole.get("node_types") is None or list(whole["node_types"]) != node_types or [
            tuple(et) for et in whole.get("edge_types", [])] != edge_types:
        raise DatasetError(f"{ds.path}: its node or edge types differ from the manifest's; re-run `sparsetrain "
                           "partition`")
    types_meta = own.get("types") or {}
    if sorted(types_meta) != sorted(node_types):
        raise DatasetError(f"{ds.path / fmt.META_FILE}: field 'partition.types' does not list every node type; "
                           "re-run `sparsetrain partition`")

    def array(name: str, what: str) -> torch.Tensor:
        if name not in ds.meta["files"] or not (ds.path / name).is_file():
            raise DatasetError(f"{ds.path / name}: missing ({what}); the part is incomplete, restore it or re-run "
                               "`sparsetrain partition`")
        return torch.from_numpy(fmt.open_array(ds.path, name, ds.meta, mmap=False))

    counts = np.array([whole["node_types"][t] for t in node_types], np.int64)
    offset = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    index = {t: i for i, t in enumerate(node_types)}
    types = PartTypes(node_types, edge_types, offset,
                      np.array([types_meta[t]["num_owned"] for t in node_types], np.int64),
                      np.array([types_meta[t]["num_halo"] for t in node_types], np.int64),
                      np.array([index[et[0]] for et in edge_types], np.int64),
                      np.array([index[et[2]] for et in edge_types], np.int64))
    owned, halo, halo_owner = [], [], []
    for i, t in enumerate(node_types):
        l2g = array(l2g_file(t), f"node type {t!r}'s local_to_global")
        ho = array(halo_owner_file(t), f"node type {t!r}'s halo owners")
        no, nh = int(types.num_owned[i]), int(types.num_halo[i])
        if l2g.numel() != no + nh or ho.numel() != nh or ds.num_nodes_by_type[t] != no + nh:
            raise DatasetError(f"{ds.path / l2g_file(t)}: has {l2g.numel()} ids for {no + nh} local {t!r} nodes; "
                               "re-run `sparsetrain partition`")
        _check_range(ds.path / l2g_file(t), l2g, 0, int(counts[i]))
        _check_range(ds.path / halo_owner_file(t), ho, 0, P)
        owned.append(l2g[:no] + int(offset[i]))
        halo.append(l2g[no:] + int(offset[i]))
        halo_owner.append(ho)
    starts = []
    indices = ds.graph.indices
    edge_at = 0
    for k, et in enumerate(edge_types):
        d, s = int(types.et_dst[k]), int(types.et_src[k])
        cs = array(col_start_file(et), f"edge type {et}'s column starts")
        if cs.numel() != int(types.num_owned[d]):
            raise DatasetError(f"{ds.path / col_start_file(et)}: has {cs.numel()} entries for "
                               f"{int(types.num_owned[d])} owned {et[2]!r} nodes; re-run `sparsetrain partition`")
        _check_range(ds.path / col_start_file(et), cs, 0, _whole_edges(manifest, k) + 1)
        starts += [cs, torch.zeros(int(types.num_halo[d]), dtype=torch.int64)]
        n = ds.num_edges_by_type[et]
        _check_range(ds.path / fmt.INDICES, indices[edge_at : edge_at + n], 0,
                     int(types.num_owned[s] + types.num_halo[s]))
        edge_at += n
    features = {}
    for t, name in (own.get("owned_features") or {}).items():
        if not (ds.path / name).is_file():
            raise DatasetError(f"{ds.path / name}: missing (node type {t!r}'s owned features); restore it or re-run "
                               "`sparsetrain partition`")
        features[t] = MmapFeatures(ds.path / name)
        if features[t].shape[0] != int(types.num_owned[index[t]]):
            raise DatasetError(f"{ds.path / name}: has {features[t].shape[0]} rows for "
                               f"{int(types.num_owned[index[t]])} owned {t!r} nodes; re-run `sparsetrain partition`")
    return Partition(folder, rank, P, ds, torch.cat(owned + halo), torch.cat(halo_owner).to(torch.int32),
                     torch.cat(starts), manifest, types, features)


def _whole_edges(manifest: dict, k: int) -> int:
    """Edge type ``k``'s edge count in the whole graph (the parts' counts summed)."""
    return sum(int(p["edges_by_type"][k]) for p in manifest["parts"])


def _check_range(path: Path, values: torch.Tensor, low: int, high: int) -> None:
    """Every entry in ``[low, high)``: one vectorised min/max (the samplers and the exchange index by them
    unchecked, so an edited part would crash a rank or read another node's rows)."""
    if values.numel() and (int(values.min()) < low or int(values.max()) >= high):
        bad = int(values.min()) if int(values.min()) < low else int(values.max())
        raise DatasetError(f"{path}: holds {bad}, outside [{low}, {high}); the part was edited, re-run "
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
        raise DatasetError(f"{folder / manifest['owner']['file']}: sha256 differs from the manifest's; re-run "
                           "`sparsetrain partition`")
    return owner
