"""PyG's contracts over sparsetrain: ``from sparsetrain.pyg import NeighborLoader`` in place of PyG's.

- :class:`NeighborSampler`: a ``torch_geometric.sampler.BaseSampler`` on the fused Numba sampler, for ``Data``,
  ``HeteroData`` and ``(FeatureStore, GraphStore)`` pairs alike (one code path; homogeneous data is the one-type case),
  with PyG's options (subgraph types, disjoint, temporal, backward, weights, replacement).
- :class:`NeighborLoader`: PyG's ``NeighborLoader`` (same signature and batches) with that sampler;
  it also takes a sparsetrain dataset (object or folder). :class:`LinkNeighborLoader`: PyG's, over
  ``NeighborSampler.sample_from_edges`` (binary and triplet negatives, typed edges too).
- :class:`DatasetFeatureStore`, :class:`DatasetGraphStore`: PyG's ``FeatureStore``/``GraphStore`` over a
  sparsetrain dataset, so PyG's own loaders accept ``(feature_store, graph_store)``.
"""

import importlib
import warnings

from sparsetrain.pyg.errors import PyGNotImplementedError, PyGOptionError
from sparsetrain.pyg.loader import LinkNeighborLoader, NeighborLoader
from sparsetrain.pyg.sampler import NeighborSampler
from sparsetrain.pyg.stores import DatasetFeatureStore, DatasetGraphStore

__all__ = ["DatasetFeatureStore", "DatasetGraphStore", "LinkNeighborLoader", "NeighborLoader", "NeighborSampler",
           "PyGNotImplementedError", "PyGOptionError"]


def __getattr__(name: str):
    """``sparsetrain.pyg.hetero`` and its functions resolve for one release, with a warning naming their
    replacement."""
    _deprecated = importlib.import_module("sparsetrain.pyg._deprecated")
    if name not in _deprecated.NEW_NAME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} is deprecated: use {_deprecated.NEW_NAME[name]} (the old name goes away in the "
                  "next release)", DeprecationWarning, stacklevel=2)
    return _deprecated if name == "hetero" else getattr(_deprecated, name)
