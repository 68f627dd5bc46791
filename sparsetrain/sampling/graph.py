"""Graph topology in compressed sparse column (CSC) form, homogeneous or typed: one class, :class:`CSCGraph`.

Column ``v`` lists the in-neighbors of ``v``: ``indices[indptr[v]:indptr[v + 1]]``
are the sources of the edges ``u -> v``, sorted ascending. This is the layout
neighbor sampling reads (a dst node's in-edges are contiguous) and the one
``torch_geometric.utils.to_torch_csc_tensor`` produces.

A typed graph (node types, edge types ``(src_type, relation, dst_type)``) is the same arrays with a
:class:`TypeLayout` (GraphBolt's shape: type information is an optional field of the one graph). Its columns are
(edge type, dst node) pairs, edge-type-major in the order of ``edge_types``: edge type ``et`` owns columns
``[col_offset[et], col_offset[et] + num_nodes[et[2]])``; ``indptr`` indexes one concatenated ``indices`` array of
source-type-local ids, and ``weights`` / ``edge_perm`` follow the same order (``edge_perm[p]``: the edge's id within
its own edge type, PyG's per-type ``e_id``). Every graph has a :class:`TypeLayout`: a homogeneous graph is the
one-type case, node type ``"_N"`` and edge type ``("_N", "_E", "_N")`` (DGL's default names), and the code reading a
graph loops over its types alike. Only the user's view differs, decided in one place (``CSCGraph._view``): the
one-type graph's ``num_nodes`` is an int rather than a dict, and its ``repr`` names no edge types.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from numba import njit

from sparsetrain.errors import BackendError, DatasetError, InputError, UnknownEdgeTypeError

EdgeType = tuple[str, str, str]
"""``(src_type, relation, dst_type)``, PyG's and DGL's canonical edge type."""

NODE_TYPE: str = "_N"
EDGE_TYPE: EdgeType = ("_N", "_E", "_N")
"""The names of the one node type and edge type of a homogeneous graph (DGL's defaults)."""



def type_named(t: str | EdgeType, end: str = ": ", unnamed: str = "") -> str:
    """How an error message names node type or edge type ``t``, followed by ``end`` (``"edge type ('a', 'r', 'b'): "``,
    ``"node type 'paper': "``); ``unnamed`` for a homogeneous graph's one type, which has no name to give."""
    if t in (NODE_TYPE, EDGE_TYPE):
        return unnamed
    return f"edge type {t}{end}" if isinstance(t, tuple) else f"node type {t!r}{end}"


def has_types(node_types: Iterable[str], edge_types: Iterable[EdgeType]) -> bool:
    """The one rule for what is a typed graph: any node or edge type besides a homogeneous graph's one node type
    ``"_N"`` and one edge type ``("_N", "_E", "_N")`` (the graph, the dataset folder and the plan all ask it here)."""
    return list(node_types) != [NODE_TYPE] or [tuple(et) for et in edge_types] != [EDGE_TYPE]


DAMAGED = "the graph is damaged: check it with `sparsetrain info` (or sparsetrain.datasets.load(path, verify=True))"


class MappedFile:
    """The file behind a memory-mapped array, held open so that :meth:`check` can see it shrink.

    Reading a mapped page past the end of a file that was truncated after mapping raises
    SIGBUS; an ``fstat`` of the mapped file before a read turns that into a
    :class:`~sparsetrain.errors.DatasetError`. A truncation between the check and the read
    still faults: the mapping is registered with ``sparsetrain._sigbus`` where it is made
    (``datasets.format.open_array``), whose handler ends the process with one line naming the file.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def same_file(self, path: str | os.PathLike) -> bool:
        """True when ``path`` names the file held open here (it was not replaced in between)."""
        mine, theirs = os.fstat(self._fd), os.stat(path)
        return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)

    def check(self) -> None:
        """Raise :class:`~sparsetrain.errors.DatasetError` when the file is now shorter than when it was mapped."""
        size = os.fstat(self._fd).st_size
        if size < self.size:
            raise DatasetError(
                f"{self.path}: the file shrank to {size} bytes after it was mapped (it had {self.size}); it was "
                "truncated or rewritten in place while in use, restore it and open the dataset again with "
                "sparsetrain.datasets.load"
            )

    def __getstate__(self) -> dict:
        return {"path": self.path, "size": self.size}

    def __setstate__(self, state: dict) -> None:
        self.path, self.size = state["path"], state["size"]
        self._fd = os.open(self.path, os.O_RDONLY)

    def __del__(self) -> None:
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __repr__(self) -> str:
        return f"MappedFile({self.path})"


@dataclass(frozen=True)
class TypeLayout:
    """The type information of a typed :class:`CSCGraph`: nodes per node type and the edge types, in column order.

    ``col_offset[k]``: the first column of edge type ``edge_types[k]`` (its dst-type nodes follow in id order).
    """

    num_nodes: dict[str, int]
    edge_types: tuple[EdgeType, ...]
    col_offset: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for t, n in self.num_nodes.items():
            if not isinstance(t, str) or isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                raise InputError(f"num_nodes has {t!r}: {n!r}; give a non-negative int node count per node type "
                                 "name")
        for et in self.edge_types:
            if not (isinstance(et, tuple) and len(et) == 3 and all(isinstance(p, str) for p in et)):
                raise InputError(f"edge type {et!r} is not a (src_type, relation, dst_type) tuple of strings")
            for end in (et[0], et[2]):
                if end not in self.num_nodes:
                    raise InputError(f"edge type {et} names node type {end!r}, which num_nodes does not list; give "
                                     "its node count")
        if len(set(self.edge_types)) != len(self.edge_types):
            raise InputError(f"edge types {list(self.edge_types)} repeat a type; give each edge type once")
        object.__setattr__(self, "num_nodes", {t: int(n) for t, n in self.num_nodes.items()})
        columns = [self.num_nodes[et[2]] for et in self.edge_types]
        object.__setattr__(self, "col_offset", np.cumsum([0, *columns]).tolist())

    @property
    def num_columns(self) -> int:
        return self.col_offset[-1]

    def index(self, edge_type: EdgeType) -> int:
        """The position of ``edge_type`` in ``edge_types``; an :class:`InputError` naming the types if absent."""
        try:
            return self.edge_types.index(tuple(edge_type))
        except (ValueError, TypeError):
            raise InputError(f"edge type {edge_type!r} is not in the graph; its edge types are "
                             f"{list(self.edge_types)}") from None


@dataclass
class CSCGraph:
    """CSC topology: ``indptr`` int64 [N + 1], ``indices`` int32/int64 [E], optional ``weights`` [E].

    ``edge_perm``: optional int64 [E], the caller's id of the edge at each CSC position (e.g. its column in
    the ``edge_index`` the graph was built from); samplers then report edge ids in that order, else CSC positions.
    ``files``: for arrays memory-mapped from files, their :class:`MappedFile` by field name
    (``"indptr"``, ``"indices"``, ``"weights"``); readers call :meth:`check_files` before reading.
    ``types``: the graph's :class:`TypeLayout`; left out (``None``), the one-type layout over the columns (node type
    ``"_N"``, edge type ``("_N", "_E", "_N")``). A typed graph: build it with :meth:`typed`, :meth:`from_relations`
    or :meth:`from_edge_index_dict` (see the module docstring).
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor | None = None
    edge_perm: torch.Tensor | None = None
    files: dict[str, MappedFile] = field(default_factory=dict, repr=False, compare=False)
    types: TypeLayout | None = None

    def __post_init__(self) -> None:
        if self.indptr.dtype != torch.int64 or self.indptr.dim() != 1 or self.indptr.numel() < 1:
            raise InputError("CSCGraph.indptr must be a 1-D int64 tensor of length num_nodes + 1")
        if self.indices.dtype not in (torch.int32, torch.int64) or self.indices.dim() != 1:
            raise InputError("CSCGraph.indices must be a 1-D int32 or int64 tensor")
        if self.weights is not None and self.weights.shape != self.indices.shape:
            raise InputError("CSCGraph.weights must have one entry per edge (same shape as indices)")
        perm = self.edge_perm
        if perm is not None and (perm.dtype != torch.int64 or perm.shape != self.indices.shape):
            raise InputError("CSCGraph.edge_perm must be an int64 tensor with one entry per edge (same shape as "
                             "indices)")
        if self.types is None:
            self.types = TypeLayout({NODE_TYPE: self.indptr.numel() - 1}, (EDGE_TYPE,))
        elif self.indptr.numel() != self.types.num_columns + 1:
            columns = self.types.num_columns
            raise InputError(f"a typed CSCGraph's indptr has {self.indptr.numel()} entries; its edge types have "
                             f"{columns} dst columns in all (the dst-type node counts summed over edge types), so "
                             f"it needs {columns + 1}")

    # ---- the typed layout ----
    @classmethod
    def typed(cls, num_nodes: dict[str, int], edge_types: list[EdgeType], indptr: torch.Tensor, indices: torch.Tensor,
              weights: torch.Tensor | None = None, edge_perm: torch.Tensor | None = None,
              files: dict[str, MappedFile] | None = None) -> CSCGraph:
        """A typed graph over flat arrays in the layout of the module docstring (wrapped, not copied)."""
        layout = TypeLayout(dict(num_nodes), tuple(tuple(et) for et in edge_types))
        return cls(indptr, indices, weights, edge_perm, files=dict(files or {}), types=layout)

    @classmethod
    def from_relations(cls, num_nodes: dict[str, int], relations: Mapping[EdgeType, CSCGraph], *,
                       index_dtype: torch.dtype | None = None) -> CSCGraph:
        """A typed graph from one homogeneous-shaped CSC per edge type (columns: dst-type nodes; ``indices``: src-type
        ids).

        The arrays are concatenated (a copy) with each relation's ``weights`` and ``edge_perm``; a relation without
        ``edge_perm`` numbers its edges by CSC position. Weights must be given for every relation or for none.
        ``index_dtype``: the dtype of ``indices`` (default: int32 when every node id fits, else int64).
        """
        layout = TypeLayout(dict(num_nodes), tuple(tuple(et) for et in relations))
        parts = list(relations.values())
        for et, csc in relations.items():
            if not isinstance(csc, CSCGraph) or len(csc.types.edge_types) != 1:
                what = f"{len(csc.types.edge_types)} edge types" if isinstance(csc, CSCGraph) else type(csc).__name__
                raise InputError(f"edge type {et}: give one edge type's CSCGraph per edge type, not {what}")
            if csc.types.num_columns != layout.num_nodes[et[2]]:
                raise InputError(f"edge type {et}: its CSC has {csc.types.num_columns} columns but node type "
                                 f"{et[2]!r} has {layout.num_nodes[et[2]]} nodes")
            csc.check_files()
        weighted = [csc.weights is not None for csc in parts]
        if any(weighted) and not all(weighted):
            missing = [et for et, csc in relations.items() if csc.weights is None]
            raise InputError(f"edge types {missing} have no edge weights but others do; give weights for every edge "
                             "type or none")
        if index_dtype is None:
            index_dtype = torch.int32 if max(layout.num_nodes.values(), default=0) < 2**31 else torch.int64
        indptr = torch.zeros(layout.num_columns + 1, dtype=torch.int64)
        edges = 0
        for k, csc in enumerate(parts):
            lo, hi = layout.col_offset[k], layout.col_offset[k + 1]
            indptr[lo + 1 : hi + 1] = csc.indptr[1:].cpu() - csc.indptr[0].cpu() + edges
            edges += csc.num_edges
        indices = _concat([csc.indices for csc in parts], index_dtype)
        weights = _concat([csc.weights for csc in parts], parts[0].weights.dtype) if parts and all(weighted) else None
        perms = [csc.edge_perm if csc.edge_perm is not None else torch.arange(csc.num_edges) for csc in parts]
        edge_perm = _concat(perms, torch.int64) if any(csc.edge_perm is not None for csc in parts) else None
        return cls(indptr, indices.contiguous(), weights, edge_perm, types=layout)

    @classmethod
    def from_edge_index_dict(cls, edge_index_dict: Mapping[EdgeType, torch.Tensor], num_nodes: dict[str, int],
                             edge_weight_dict: Mapping[EdgeType, torch.Tensor] | None = None) -> CSCGraph:
        """A typed graph from PyG-style ``{edge_type: edge_index [2, E]}`` (row 0 src-type ids, row 1 dst-type ids).

        Per edge type, edges are sorted by destination, then source; ``edge_perm`` maps each CSC position back to
        the edge's column in its ``edge_index``. ``edge_weight_dict``: one weight per edge for every edge type, or None.
        """
        layout = TypeLayout(dict(num_nodes), tuple(tuple(et) for et in edge_index_dict))
        relations = {}
        for et, edge_index in edge_index_dict.items():
            if edge_index.dim() != 2 or edge_index.shape[0] != 2:
                raise InputError(f"edge type {et}: edge_index has shape {list(edge_index.shape)}; expected "
                                 "[2, num_edges]")
            src, dst = edge_index.detach().to("cpu", torch.int64)
            for ids, end in ((src, et[0]), (dst, et[2])):
                n = layout.num_nodes[end]
                if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
                    raise InputError(f"edge type {et}: edge_index has {end!r} ids outside [0, {n}); fix the ids or "
                                     "the node count")
            n_src, n_dst = layout.num_nodes[et[0]], layout.num_nodes[et[2]]
            order = torch.argsort(dst * max(n_src, 1) + src, stable=True)
            indptr = torch.zeros(n_dst + 1, dtype=torch.int64)
            torch.cumsum(torch.bincount(dst, minlength=n_dst), 0, out=indptr[1:])
            weights = None
            if edge_weight_dict is not None:
                weight = edge_weight_dict[et].detach().cpu().reshape(-1)
                if weight.numel() != src.numel():
                    raise InputError(f"edge type {et}: {weight.numel()} edge weights for {src.numel()} edges; give "
                                     "one weight per edge")
                weights = weight[order].contiguous()
            relations[tuple(et)] = cls(indptr, src[order], weights, edge_perm=order)
        return cls.from_relations(layout.num_nodes, relations)

    @property
    def is_typed(self) -> bool:
        """The user's view, decided here once: False for the one-type layout (node type ``"_N"``, edge type
        ``("_N", "_E", "_N")``), whose ``num_nodes`` is an int; True when ``num_nodes`` etc. are dicts per type."""
        return has_types(self.types.num_nodes, self.types.edge_types)

    def _view(self) -> tuple[int | dict[str, int], str]:
        """The user's view, in this one place: ``num_nodes`` (an int on the one-type graph, else the dict per node type)
        and what ``repr`` adds for the types (nothing on the one-type graph)."""
        counts = dict(self.types.num_nodes)
        if self.is_typed:
            return counts, f", edge_types={len(self.types.edge_types)}"
        return counts[NODE_TYPE], ""

    @property
    def type_layout(self) -> TypeLayout:
        """The graph's :class:`TypeLayout` (``types``; a homogeneous graph's is the one-type case)."""
        return self.types

    @property
    def node_types(self) -> list[str]:
        return list(self.types.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return list(self.types.edge_types)

    @property
    def num_edges_per_type(self) -> dict[EdgeType, int]:
        """Edges per edge type (a homogeneous graph: its one edge type ``("_N", "_E", "_N")``)."""
        ptr = self.indptr[torch.tensor(self.types.col_offset, device=self.device)].tolist()
        return {et: ptr[k + 1] - ptr[k] for k, et in enumerate(self.types.edge_types)}

    def relation(self, edge_type: EdgeType) -> CSCGraph:
        """One edge type's edges as a homogeneous-shaped CSCGraph (columns: dst-type nodes; ``indices``: src-type ids).

        ``indptr`` is rebased (a copy unless the edge type's edges come first); ``indices``, ``weights`` and
        ``edge_perm`` are views (no copy). A homogeneous graph's one relation ``("_N", "_E", "_N")`` holds its arrays.
        """
        k = self.types.index(edge_type)
        lo, hi = self.types.col_offset[k], self.types.col_offset[k + 1]
        ptr = self.indptr[lo : hi + 1]
        a, b = int(ptr[0]), int(ptr[-1])
        cut = lambda t: None if t is None else t[a:b]  # noqa: E731
        return CSCGraph(ptr - a if a else ptr, self.indices[a:b], cut(self.weights), cut(self.edge_perm),
                        files=self.files)

    def reverse(self, num_sources: int | None = None) -> CSCGraph:
        """The graph with every edge turned around (a copy): column ``u`` lists the out-neighbors of ``u``.

        Sampling it samples out-edges (PyG's ``sample_direction="backward"``). Edge ids stay the caller's (``edge_perm``
        of the result: each edge's id in this graph); weights follow their edges. A typed graph's edge type
        ``(src, rel, dst)`` becomes ``(dst, rel, src)``. ``num_sources``: the columns of the result (the source nodes),
        when they are not this graph's nodes (one relation of a typed graph).
        """
        self.check_files()
        sizes = dict(self.types.num_nodes)
        if num_sources is not None:
            self._one_relation("reverse")
            sizes[self.types.edge_types[0][0]] = int(num_sources)
        relations = {(et[2], et[1], et[0]): self.relation(et)._reversed(sizes[et[0]]) for et in self.types.edge_types}
        return CSCGraph.from_relations(sizes, relations, index_dtype=self.indices.dtype).to(self.device)

    def _reversed(self, num_src: int) -> CSCGraph:
        """One relation turned around: ``num_src`` columns (its source nodes), each listing its out-neighbors."""
        num_dst = self.indptr.numel() - 1
        ids = self.edge_perm if self.edge_perm is not None else torch.arange(self.num_edges, device=self.device)
        src = self.indices.to(torch.int64)
        dst = torch.repeat_interleave(torch.arange(num_dst, device=self.device), self.in_degrees())
        order = torch.argsort(src * max(num_dst, 1) + dst, stable=True)
        indptr = torch.zeros(num_src + 1, dtype=torch.int64, device=self.device)
        torch.cumsum(torch.bincount(src, minlength=num_src), 0, out=indptr[1:])
        weights = None if self.weights is None else self.weights[order].contiguous()
        return CSCGraph(indptr, dst[order].to(self.indices.dtype).contiguous(), weights, ids[order].contiguous())

    @property
    def edges(self) -> Mapping[EdgeType, CSCGraph]:
        """``{edge_type: relation(edge_type)}``, read-only and built on access (the dict-of-CSCs view of the graph)."""
        return _Relations(self)

    def check_files(self) -> None:
        """Raise :class:`~sparsetrain.errors.DatasetError` if a file an array is mapped from has shrunk (one ``fstat``
        each)."""
        for mapped in self.files.values():
            mapped.check()

    def source(self, name: str) -> str:
        """Where array ``name`` (``"indptr"``, ``"indices"``, ``"weights"``) comes from, for error messages."""
        mapped = self.files.get(name)
        return str(mapped.path) if mapped is not None else f"CSCGraph.{name}"

    @classmethod
    def from_numpy(cls, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray | None = None) -> CSCGraph:
        """Wrap NumPy arrays (memory-mapped ones included) without copying."""
        as_tensor = torch.from_numpy
        return cls(as_tensor(indptr), as_tensor(indices), None if weights is None else as_tensor(weights))

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, num_nodes: int | None = None,
                        edge_weight: torch.Tensor | None = None) -> CSCGraph:
        """Build from a PyG-style ``edge_index`` [2, E] (row 0 = source, row 1 = destination).

        Edges are sorted by destination, then source; duplicates are kept.
        ``indices`` is int32 when every node id fits, else int64. ``edge_perm``
        maps each CSC position back to the edge's column in ``edge_index``.
        """
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise InputError(f"edge_index has shape {list(edge_index.shape)}; expected [2, num_edges]")
        edge_index = edge_index.detach().to("cpu", torch.int64)
        if num_nodes is None:
            num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
            raise InputError(f"edge_index has node ids outside [0, {num_nodes}); pass the right num_nodes")
        src, dst = edge_index
        order = torch.argsort(dst * max(num_nodes, 1) + src, stable=True)
        counts = torch.bincount(dst, minlength=num_nodes)
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        index_dtype = torch.int32 if num_nodes < 2**31 else torch.int64
        weights = None
        if edge_weight is not None:
            if edge_weight.numel() != src.numel():
                raise InputError(f"edge_weight has {edge_weight.numel()} entries for {src.numel()} edges; give one "
                                 "weight per edge")
            weights = edge_weight.detach().cpu().reshape(-1)[order].contiguous()
        return cls(indptr, src[order].to(index_dtype).contiguous(), weights, order)

    @property
    def device(self) -> torch.device:
        """Where the topology lives (pinned host memory reports ``cpu``; see :meth:`is_pinned`)."""
        return self.indptr.device

    def is_pinned(self) -> bool:
        """True when ``indptr`` and ``indices`` are in page-locked host memory (GPU kernels read them zero-copy)."""
        return self.indptr.device.type == "cpu" and self.indptr.is_pinned() and self.indices.is_pinned()

    def numpy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(indptr, indices, weights)`` as NumPy views (no copy); host graphs only."""
        if self.device.type != "cpu":
            raise InputError(f"CSCGraph is on {self.device}; NumPy views need a host graph (call .to('cpu') first)")
        return self.indptr.numpy(), self.indices.numpy(), None if self.weights is None else self.weights.numpy()

    def in_memory(self) -> CSCGraph:
        """A copy in ordinary host memory (reads a memory-mapped dataset in full; random access then never waits on the
        disk)."""
        self.check_files()
        copy = lambda t: None if t is None else t.to("cpu").clone()  # noqa: E731
        return CSCGraph(copy(self.indptr), copy(self.indices), copy(self.weights), copy(self.edge_perm),
                        types=self.types)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> CSCGraph:
        """A copy of the topology on ``device`` (itself when already there)."""
        device = torch.device(device)
        if device == self.device or (device.type == self.device.type and device.index is None):
            return self
        self.check_files()
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return CSCGraph(move(self.indptr), move(self.indices), move(self.weights), move(self.edge_perm),
                        types=self.types)

    def pin_memory(self) -> CSCGraph:
        """A copy in page-locked host memory, which GPU sampling kernels read in place over PCIe."""
        if self.is_pinned():
            return self
        if not torch.cuda.is_available():
            raise BackendError("CSCGraph.pin_memory() needs CUDA (page-locked memory is a CUDA driver "
                               "feature); keep the graph in ordinary memory on this machine")
        self.check_files()
        pin = lambda t: None if t is None else t.cpu().pin_memory()  # noqa: E731
        return CSCGraph(pin(self.indptr), pin(self.indices), pin(self.weights), pin(self.edge_perm), types=self.types)

    def columns(self, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """In-degrees of nodes ``[lo, hi)`` and their in-neighbors (int64, concatenated), checked to lie inside the
        graph.

        A damaged ``indptr`` or ``indices`` (a range outside the edges, an id that is not a node) raises
        :class:`~sparsetrain.errors.InputError` naming the file and the entry, instead of being read
        through.
        """
        self._one_relation("columns")
        self.check_files()
        ptr = self.indptr[lo : hi + 1]
        counts = ptr[1:] - ptr[:-1]
        bad = (ptr[:-1] < 0) | (counts < 0) | (ptr[1:] > self.num_edges)
        if bool(bad.any()):
            v = lo + int(bad.nonzero()[0])
            raise InputError(f"{self.source('indptr')}: node {v}'s in-edges are entries {int(self.indptr[v])} to "
                             f"{int(self.indptr[v + 1])} of indices, which has {self.num_edges}; {DAMAGED}")
        start = int(ptr[0]) if hi > lo else 0
        neighbors = self.indices[start : start + int(counts.sum())].long()
        num_src = self._num_sources()
        bad = (neighbors < 0) | (neighbors >= num_src)
        if bool(bad.any()):
            p = int(bad.nonzero()[0])
            raise InputError(f"{self.source('indices')}: entry {start + p} is {int(neighbors[p])}, which must be in "
                             f"[0, {num_src}); {DAMAGED}")
        return counts, neighbors

    def to_edge_index(self) -> torch.Tensor:
        """All edges as an int64 ``[2, E]`` tensor (source row, destination row), in CSC order."""
        self._one_relation("to_edge_index")
        self.check_files()
        dst = torch.repeat_interleave(torch.arange(self.types.num_columns, device=self.device), self.in_degrees())
        return torch.stack([self.indices.to(torch.int64), dst])

    @property
    def num_nodes(self) -> int | dict[str, int]:
        """Node count: an int for a homogeneous graph, ``{node_type: count}`` for a typed one (GraphBolt's way)."""
        return self._view()[0]

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    def _one_relation(self, method: str) -> None:
        """Refuse ``method``, which reads one edge type's edges, on a graph of several edge types."""
        if len(self.types.edge_types) != 1:
            raise InputError(f"CSCGraph.{method}() reads one edge type's edges and the graph has "
                             f"{len(self.types.edge_types)}; call it per edge type: "
                             f"graph.relation(edge_type).{method}(...)")

    def _num_sources(self) -> int:
        """The source node count of a graph of one edge type."""
        return self.types.num_nodes[self.types.edge_types[0][0]]

    def in_degrees(self) -> torch.Tensor:
        """In-degree of every column, int64 (homogeneous graph: of every node; typed: per (edge type, dst node))."""
        return self.indptr[1:] - self.indptr[:-1]

    def out_degrees(self) -> torch.Tensor:
        """Out-degree of every node (how many in-neighbor lists hold it), int64 [N]: one pass over ``indices``."""
        self._one_relation("out_degrees")
        self.check_files()
        if self.device.type != "cpu":
            return torch.bincount(self.indices.to(torch.int64), minlength=self._num_sources())
        return torch.from_numpy(_count_occurrences(self.indices.numpy(), self._num_sources()))

    def __repr__(self) -> str:
        weighted = ", weighted" if self.weights is not None else ""
        num_nodes, kinds = self._view()
        return (f"CSCGraph(num_nodes={num_nodes}{kinds}, num_edges={self.num_edges}, "
                f"indices={self.indices.dtype}{weighted})")


class _Relations(Mapping):
    """``graph.edges``: each edge type's :meth:`CSCGraph.relation`, built when looked up."""

    def __init__(self, graph: CSCGraph) -> None:
        self._graph = graph

    def __getitem__(self, edge_type: EdgeType) -> CSCGraph:
        if not isinstance(edge_type, tuple) or tuple(edge_type) not in self._graph.edge_types:
            raise UnknownEdgeTypeError(edge_type)
        return self._graph.relation(edge_type)

    def __iter__(self) -> Iterator[EdgeType]:
        return iter(self._graph.edge_types)

    def __len__(self) -> int:
        return len(self._graph.edge_types)


def _concat(tensors: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """``tensors`` on the host as one ``dtype`` tensor (empty when there are none)."""
    return torch.cat([t.cpu().to(dtype) for t in tensors]) if tensors else torch.zeros(0, dtype=dtype)


@njit(cache=True, nogil=True)
def _count_occurrences(indices, num_nodes):
    counts = np.zeros(num_nodes, np.int64)
    for i in range(indices.size):
        counts[indices[i]] += 1
    return counts
