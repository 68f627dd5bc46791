"""PyG's contracts over sparsetrain: ``from sparsetrain.pyg import NeighborLoader`` in place of PyG's.

- :class:`NeighborSampler`: a ``torch_geometric.sampler.BaseSampler`` on the fused Numba sampler.
- :class:`NeighborLoader`: PyG's ``NeighborLoader`` (same signature and batches) with that sampler;
  it also takes a sparsetrain dataset (object or folder). :class:`LinkNeighborLoader`: PyG's, over
  ``NeighborSampler.sample_from_edges`` (binary and triplet negatives).
- :class:`DatasetFeatureStore`, :class:`DatasetGraphStore`: PyG's ``FeatureStore``/``GraphStore`` over a
  sparsetrain dataset, so PyG's own loaders accept ``(feature_store, graph_store)``.
Heterogeneous graphs (``HeteroData``) are sampled by :mod:`sparsetrain.pyg.hetero` on the typed sampler.
"""

from sparsetrain.pyg.errors import PyGOptionError
from sparsetrain.pyg.loader import LinkNeighborLoader, NeighborLoader
from sparsetrain.pyg.sampler import NeighborSampler
from sparsetrain.pyg.stores import DatasetFeatureStore, DatasetGraphStore

__all__ = ["DatasetFeatureStore", "DatasetGraphStore", "LinkNeighborLoader", "NeighborLoader", "NeighborSampler", "PyGOptionError"]
