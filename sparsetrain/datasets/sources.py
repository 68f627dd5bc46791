"""What importers hand the writer: re-iterable streams of node rows and edges, each named for error messages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Source:
    """A re-iterable stream of chunks with a name for error messages.

    ``where(row)`` turns a 0-based data row into the user's terms (a CSV line, an array row).
    """

    name: str
    chunks: Callable[[], Iterator]
    rows: int | None = None
    where: Callable[[int], str] = field(default=lambda row: f"row {row}")

    @classmethod
    def from_reader(cls, reader) -> Source:
        return cls(str(reader.path), reader, reader.num_rows(), reader.where)

    @classmethod
    def from_array(cls, name: str, array: np.ndarray, chunk_rows: int = 1 << 22) -> Source:
        return cls(name, lambda: (array[lo : lo + chunk_rows] for lo in range(0, len(array), chunk_rows)), len(array))


@dataclass
class EdgeSource(Source):
    """Edge chunks ``(src, dst, weight | None)``; ``weighted`` says whether weights come along.

    ``weight_name`` names the weights in errors when they are not a column of ``name`` (a separate array).
    ``release`` is called once the edges have been read for the last time (a generated source frees its scratch).
    """

    weighted: bool = False
    weight_name: str | None = None
    release: Callable[[], None] | None = None

    def reversed(self) -> EdgeSource:
        """The same edges from dst to src (the reverse edge type of a typed graph); rows stay in order."""
        return EdgeSource(self.name, lambda: ((dst, src, w) for src, dst, w in self.chunks()), self.rows, self.where,
                          weighted=self.weighted, weight_name=self.weight_name)


@dataclass
class EdgeFeatures:
    """One feature row per edge of an edge source, in memory: ``values[i]`` belongs to the source's row ``i``."""

    name: str
    values: np.ndarray


@dataclass
class TimeColumn:
    """Times in memory, one per node of a node type or per edge of an edge source (row ``i`` = its row ``i``):
    int64 or float64, finite (see :func:`~sparsetrain.datasets.readers.check_times`). ``where(row)`` names a row."""

    name: str
    values: np.ndarray
    where: Callable[[int], str] = field(default=lambda row: f"row {row}")

    @property
    def rows(self) -> int:
        return len(self.values)
