"""The import swap a PyG user makes, in one place: sparsetrain's loaders and sampler, or PyG's own with
``SPARSETRAIN_CONTRACT_PEER=pyg`` (to see which of PyG's tests pass with PyG itself in this environment).

Only what sparsetrain replaces is swapped; PyG's test helpers, data classes and ``BidirectionalNeighborSampler``
stay PyG's."""

import os

if os.environ.get("SPARSETRAIN_CONTRACT_PEER") == "pyg":
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
    from torch_geometric.sampler.neighbor_sampler import NeighborSampler
else:
    from sparsetrain.pyg import LinkNeighborLoader, NeighborLoader
    from sparsetrain.pyg import PyGNeighborSampler as NeighborSampler

__all__ = ["LinkNeighborLoader", "NeighborLoader", "NeighborSampler"]
