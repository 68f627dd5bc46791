"""Graph topology and neighbor sampling."""

from sparsetrain.sampling.graph import CSCGraph

__all__ = ["CSCGraph"]
