"""DGL's loader contract over sparsetrain: a DGL script swaps its import and keeps its model, its blocks and its loop.

``from sparsetrain.dgl import DataLoader`` in place of ``dgl.dataloading``'s; DGL's own ``NeighborSampler`` object
stays (the loader reads its settings), or :class:`DGLNeighborSampler` takes the same arguments: iterating yields
``(input_nodes, output_nodes, blocks)`` with DGL blocks (homogeneous or typed). DGL itself is needed only to build the
blocks (``pip install torch==2.2.1 dgl==2.1.0 "torchdata<0.8"``); this package imports without it.
See ``docs/migrating_from_dgl.md``.
"""

from sparsetrain.dgl.loader import DataLoader
from sparsetrain.dgl.sampler import DGLNeighborSampler, MultiLayerFullNeighborSampler

__all__ = ["DataLoader", "DGLNeighborSampler", "MultiLayerFullNeighborSampler"]
