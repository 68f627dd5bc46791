"""The on-disk dataset format, importers and synthetic graphs.

``load(path)`` opens a dataset folder; ``from_pyg``, ``from_files``, ``from_ogb``
and ``synthesize`` write one (the CLI verbs ``preprocess`` and ``synth``).
"""

from sparsetrain.datasets.build import BuildOptions
from sparsetrain.datasets.dataset import GraphDataset, load, load_clusters, verify_checksums
from sparsetrain.datasets.files import from_files, from_ogb
from sparsetrain.datasets.format import FORMAT_VERSION
from sparsetrain.datasets.pyg import from_pyg
from sparsetrain.datasets.synth import synthesize

__all__ = ["FORMAT_VERSION", "BuildOptions", "GraphDataset", "from_files", "from_ogb", "from_pyg", "load", "load_clusters", "synthesize", "verify_checksums"]
