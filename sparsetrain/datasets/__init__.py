"""The on-disk dataset format, importers and synthetic graphs.

``load(path)`` opens a dataset folder as a ``GraphDataset`` (one shape: fields by node and edge type, a homogeneous
graph the one-type case); ``from_pyg`` (``Data`` or ``HeteroData``), ``from_files`` (one edge list or a dict by edge
type), ``from_ogb`` (any OGB folder), ``from_igb`` (an IGBH folder as IGB ships it) and ``synthesize``
(``typed=True``: ogbn-mag-shaped; ``preset="igbh-<size>"``: IGBH-shaped) write one (the CLI verbs
``preprocess`` and ``synth``).
"""

from sparsetrain.datasets.dataset import GraphDataset, load, load_clusters
from sparsetrain.datasets.files import from_files
from sparsetrain.datasets.igb import from_igb
from sparsetrain.datasets.ogb_folder import from_ogb
from sparsetrain.datasets.pyg import from_pyg
from sparsetrain.datasets.synth import synthesize

__all__ = ["GraphDataset", "from_files", "from_igb", "from_ogb", "from_pyg", "load", "load_clusters", "synthesize"]
