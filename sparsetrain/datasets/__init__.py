"""The on-disk dataset format, importers and synthetic graphs.

``load(path)`` opens a dataset folder as a ``GraphDataset`` (typed or not: ``ds.is_typed``); ``from_pyg``,
``from_files``,
``from_ogb``, ``synthesize`` and ``synthesize_typed`` write one (the CLI verbs ``preprocess`` and ``synth``).
"""

from sparsetrain._deprecation import moved_attribute
from sparsetrain.datasets.dataset import GraphDataset, load, load_clusters
from sparsetrain.datasets.files import from_files
from sparsetrain.datasets.ogb_folder import from_ogb
from sparsetrain.datasets.pyg import from_pyg
from sparsetrain.datasets.synth import synthesize
from sparsetrain.datasets.synth_typed import synthesize_typed

__all__ = ["GraphDataset", "from_files", "from_ogb", "from_pyg", "load", "load_clusters", "synthesize",
           "synthesize_typed"]

_MOVED = {
    "BuildOptions": "sparsetrain.datasets.build",
    "FORMAT_VERSION": "sparsetrain.datasets.format",
    "HeteroGraphDataset": "sparsetrain.datasets.dataset:GraphDataset",
    "synthesize_hetero": "sparsetrain.datasets.synth_typed:synthesize_typed",
    "verify_checksums": "sparsetrain.datasets.dataset",
}


def __getattr__(name: str):
    return moved_attribute(__name__, _MOVED, name)
