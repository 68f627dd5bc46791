"""The loaders' ``device=``: where a ``Data``'s or ``HeteroData``'s tensors go so batches come out on that device.

cuGraph-PyG's shape for PyG users on a GPU: the graph is sampled there (:class:`~sparsetrain.pyg.NeighborSampler`'s
``device``), every tensor the batch is cut from lives there when it fits, and node features that do not fit stay in
pinned host memory, read zero-copy by the GPU (:class:`~sparsetrain.storage.PinnedFeatures`: only the rows a batch
needs cross PCIe, with no CPU gather). A batch is then already on the device and PyG's ``batch.to(device)`` costs
nothing.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch_geometric.data import Data, HeteroData

from sparsetrain.pyg.errors import PyGOptionError
from sparsetrain.sampling.graph import NODE_TYPE
from sparsetrain.storage import PinnedFeatures

GPU_FRACTION = 0.4  # of the GPU's free memory the data may take to live there; past it, x stays in pinned host memory


class Placement:
    """``data`` placed for ``device``: ``data`` (what the loader cuts batches from) and ``features`` (node type ->
    pinned store of ``x`` read zero-copy, empty when everything moved)."""

    def __init__(self, data, device: torch.device | str) -> None:
        if not isinstance(data, (Data, HeteroData)):
            raise PyGOptionError(f"device= places a Data or HeteroData; data is a {type(data).__name__} (a dataset or "
                                 "stores: leave device unset and pass features=CachedFeatures(..., device='cuda'))")
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise PyGOptionError(f"device={device!r} but no CUDA device is visible; leave device unset to load on the "
                                 "CPU")
        self.features: dict[str, PinnedFeatures] = {}
        if self.device.type != "cuda" or _nbytes(data) <= GPU_FRACTION * torch.cuda.mem_get_info(self.device)[0]:
            self.data = data.to(self.device)
            return
        rest = copy.copy(data)  # the same tensors; x leaves the copy, not the caller's data
        for store in rest.node_stores:
            if "x" in store:
                store.num_nodes = store.num_nodes  # (inferred from x until now)
                self.features[store._key or NODE_TYPE] = PinnedFeatures(store.x, device=self.device)
                del store.x
        self.data = rest.to(self.device)

    def sampled(self, out):
        """A sampler output with its ids on the device (where the data is; a no-op when the sampler ran there)."""
        moved = {}
        for f in dataclasses.fields(out):
            value = getattr(out, f.name)
            if torch.is_tensor(value):
                moved[f.name] = value.to(self.device, non_blocking=True)
            elif isinstance(value, dict) and all(torch.is_tensor(v) for v in value.values()):
                moved[f.name] = {k: v.to(self.device, non_blocking=True) for k, v in value.items()}
        return dataclasses.replace(out, **moved) if moved else out

    def finish(self, batch):
        """A batch cut from :attr:`data`: its zero-copy features added, everything on the device."""
        if isinstance(batch, HeteroData):
            for node_type, store in self.features.items():
                batch[node_type].x = store.gather(batch[node_type].n_id)
        elif self.features:
            batch.x = self.features[NODE_TYPE].gather(batch.n_id)
        return batch.to(self.device, non_blocking=True)


def _nbytes(data) -> int:
    return sum(v.numel() * v.element_size() for store in data.stores for v in store.values() if torch.is_tensor(v))
