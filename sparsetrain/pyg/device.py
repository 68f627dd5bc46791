"""The loaders' ``device=``: where a ``Data``'s or ``HeteroData``'s tensors go so batches come out on that device.

cuGraph-PyG's shape for PyG users on a GPU: the graph is sampled there (:class:`~sparsetrain.pyg.PyGNeighborSampler`'s
``device``), every tensor the batch is cut from lives there when it fits, and node features that do not fit stay in
pinned host memory, read zero-copy by the GPU (:class:`~sparsetrain.storage.PinnedFeatures`: only the rows a batch
needs cross PCIe, with no CPU gather). A batch is then already on the device and PyG's ``batch.to(device)`` costs
nothing.

One rule (:func:`placement_plan`) decides where a loader works, wherever the data lives: ``device=`` if given, else the
GPU the data already lives on (PyG's idiom ``data.to("cuda")``), else the CPU. A ``Data`` on the GPU is then sampled
there and its batches cut there, exactly as a host ``Data`` with ``device="cuda"``; data already on the device stays
as it is (never copied back to pinned memory). The caller's ``Data`` is never moved: PyG's ``Data.to`` moves tensors
in place, so placement moves a shallow copy.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import torch
from torch_geometric.data import Data, HeteroData

from sparsetrain.errors import SettingError
from sparsetrain.sampling.graph import NODE_TYPE
from sparsetrain.storage import PinnedFeatures
from sparsetrain.storage.residency import fits_on_gpu

FEATURE_PATHS = ("host", "device", "pinned")


@dataclasses.dataclass(frozen=True)
class PlacementPlan:
    """Where a loader works: ``device`` samples and holds the batches (``None``: the CPU, nothing placed), and
    ``features`` is how node features reach a batch: ``"device"`` (every tensor of the data on the device, moved there
    unless it already is), ``"pinned"`` (``x`` in pinned host memory, read zero-copy; the rest on the device) or
    ``"host"``."""

    device: torch.device | None
    features: str


def data_device(data) -> torch.device:
    """The GPU a ``Data``'s or ``HeteroData``'s tensors live on (the first found), else the CPU (also for datasets and
    stores)."""
    if isinstance(data, (Data, HeteroData)):
        for store in data.stores:
            for value in store.values():
                if torch.is_tensor(value) and value.device.type == "cuda":
                    return value.device
    return torch.device("cpu")


def loader_device(data, device: torch.device | str | None) -> torch.device | None:
    """The device a loader (and its sampler) over ``data`` works on: ``device``, else the GPU the data is on, else
    ``None`` (the CPU, PyG's own behaviour)."""
    if device is not None:
        return torch.device(device)
    where = data_device(data)
    return where if where.type == "cuda" else None


def placement_plan(device: torch.device | str | None, where: torch.device, data_bytes: int,
                   free_bytes: Callable[[torch.device], int]) -> PlacementPlan:
    """The one placement rule, for data of ``data_bytes`` living on ``where`` (``free_bytes(device)``: the GPU's free
    memory, asked only when the data would have to move there)."""
    target = device if device is not None else (where if where.type == "cuda" else None)
    if target is None:
        return PlacementPlan(None, "host")
    target = torch.device(target)
    if target.type != "cuda":
        return PlacementPlan(target, "host")
    if _same_device(where, target) or fits_on_gpu(data_bytes, free_bytes(target)):  # the engine's plan's rule
        return PlacementPlan(target, "device")
    return PlacementPlan(target, "pinned")


def _same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` (the current GPU) matches any index: a ``Data`` reports ``cuda:0`` for what the user called ``cuda``."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


class Placement:
    """``data`` placed for ``device``: ``data`` (what the loader cuts batches from) and ``features`` (node type ->
    pinned store of ``x`` read zero-copy, empty when everything moved)."""

    def __init__(self, data, device: torch.device | str) -> None:
        if not isinstance(data, (Data, HeteroData)):
            raise SettingError(f"device= places a Data or HeteroData; data is a {type(data).__name__} (a dataset or "
                               "stores: leave device unset and pass features=CachedFeatures(..., device='cuda'))")
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise SettingError(f"device={device!r} but no CUDA device is visible; leave device unset to load on the "
                               "CPU")
        self.plan = placement_plan(device, data_device(data), _nbytes(data), lambda d: torch.cuda.mem_get_info(d)[0])
        self.device = self.plan.device
        self.features: dict[str, PinnedFeatures] = {}
        if self.plan.features != "pinned":
            self.data = copy.copy(data).to(self.device)  # a copy: PyG's Data.to moves the caller's tensors in place
            return
        rest = copy.copy(data)  # the same tensors; x leaves the copy, not the caller's data
        for store in rest.node_stores:
            if "x" in store:
                store.num_nodes = store.num_nodes  # (inferred from x until now)
                self.features[store._key or NODE_TYPE] = PinnedFeatures(store.x, device=self.device)
                del store.x
        self.data = rest.to(self.device)

    def sampled(self, out):
        """A sampler output with its ids on the device (where the data is; nothing to do when the sampler ran there)."""
        moved = {}
        for f in dataclasses.fields(out):
            value = getattr(out, f.name)
            if torch.is_tensor(value) and not _same_device(value.device, self.device):
                moved[f.name] = on_device(value, self.device)
            elif (isinstance(value, dict) and all(torch.is_tensor(v) for v in value.values())
                  and not all(_same_device(v.device, self.device) for v in value.values())):
                moved[f.name] = {k: on_device(v, self.device) for k, v in value.items()}
        return dataclasses.replace(out, **moved) if moved else out

    def finish(self, batch):
        """A batch cut from :attr:`data`: its zero-copy features added, everything on the device."""
        if isinstance(batch, HeteroData):
            for node_type, store in self.features.items():
                batch[node_type].x = store.gather(batch[node_type].n_id)
        elif self.features:
            batch.x = self.features[NODE_TYPE].gather(batch.n_id)
        return batch.apply(lambda value: on_device(value, self.device))


def on_device(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``value`` on ``device`` with no host wait: a host tensor bound for a GPU goes through pinned memory (an
    asynchronous copy from pageable memory waits for the GPU's queue: a host sync a batch, e.g. for ``input_id``)."""
    if not torch.is_tensor(value):  # a SparseTensor, a TensorFrame: moved as Data.to moves them
        return value.to(device=device, non_blocking=True)
    if _same_device(value.device, device):
        return value
    if value.device.type == "cpu" and device.type == "cuda":
        value = value.pin_memory()  # (torch's pinned block is reused only once the copy has run)
    return value.to(device=device, non_blocking=True)


def _nbytes(data) -> int:
    return sum(v.numel() * v.element_size() for store in data.stores for v in store.values() if torch.is_tensor(v))
