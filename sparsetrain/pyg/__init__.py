"""PyG's contracts over sparsetrain: ``from sparsetrain.pyg import NeighborLoader`` in place of PyG's.

- :class:`PyGNeighborSampler`: a ``torch_geometric.sampler.BaseSampler`` on the fused Numba sampler, for ``Data``,
  ``HeteroData`` and ``(FeatureStore, GraphStore)`` pairs alike (one code path; homogeneous data is the one-type case),
  with PyG's options (subgraph types, disjoint, temporal, backward, weights, replacement).
- :class:`NeighborLoader`: PyG's ``NeighborLoader`` (same signature and batches) with that sampler;
  it also takes a sparsetrain dataset (object or folder). :class:`LinkNeighborLoader`: PyG's, over
  ``PyGNeighborSampler.sample_from_edges`` (binary and triplet negatives, typed edges too).
- :class:`DatasetFeatureStore`, :class:`DatasetGraphStore`: PyG's ``FeatureStore``/``GraphStore`` over a
  sparsetrain dataset, so PyG's own loaders accept ``(feature_store, graph_store)``.
- :func:`partitioned_stores`: the pair over one part of a partitioned folder; under torch.distributed
  ``NeighborLoader(partitioned_stores(DIR), ..., input_nodes="train", seed=s)`` samples the partitioned graph.
"""

from sparsetrain.errors import NotSupportedError, SettingError
from sparsetrain.pyg.loader import LinkNeighborLoader, NeighborLoader
from sparsetrain.pyg.partitioned import partitioned_stores
from sparsetrain.pyg.sampler import PyGNeighborSampler
from sparsetrain.pyg.stores import DatasetFeatureStore, DatasetGraphStore

__all__ = ["DatasetFeatureStore", "DatasetGraphStore", "LinkNeighborLoader", "NeighborLoader", "PyGNeighborSampler",
           "NotSupportedError", "SettingError", "partitioned_stores"]

