"""Edge splits for link prediction: positive edges per split, fixed negatives for val/test, held-out edges off the
graph.

A random split (:func:`random_edge_split`) takes the cleaned graph, draws the val and test
positives (on a symmetric graph each undirected edge once, as ``u < v``), removes them
(and their reverses) from the message-passing graph, and draws ``neg_per_pos`` strict
negatives ``(u, w)`` per val/test positive ``(u, v)`` (never an edge of the full graph), so
every run evaluates on the same candidates. Negatives are stored grouped by positive:
positive ``i``'s are rows ``i * K .. (i + 1) * K`` of ``neg``, which gives MRR its
per-positive candidate lists; AUC and Hits@K read them as one pool.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from sparsetrain.datasets.csc import RawCSC
from sparsetrain.datasets.format import LINK_SPLIT_NAMES
from sparsetrain.errors import DatasetError, InputError
from sparsetrain.sampling.graph import CSCGraph
from sparsetrain.sampling.negatives import NegativeSampler

DEFAULT_NEG_PER_POS = 100


@dataclass
class EdgeSplit:
    """One split's edges: ``pos`` [2, E] int64 (src, dst); ``neg`` [2, M] int64 or None.

    ``neg_per_pos``: when set, ``neg`` holds that many negatives per positive, grouped by positive
    (``M = E * neg_per_pos``); None for a shared pool of negatives (OGB's ``edge_neg``).
    """

    pos: torch.Tensor
    neg: torch.Tensor | None = None
    neg_per_pos: int | None = None

    def __repr__(self) -> str:
        neg = "None" if self.neg is None else f"{self.neg.shape[1]}"
        return f"EdgeSplit(pos={self.pos.shape[1]}, neg={neg}, neg_per_pos={self.neg_per_pos})"


def check_fractions(fractions) -> tuple[float, float, float]:
    """Three non-negative fractions (train, val, test) summing to at most 1."""
    try:
        parts = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        parts = ()
    if len(parts) != 3 or not all(np.isfinite(f) and f >= 0 for f in parts) or sum(parts) > 1 + 1e-9 or parts[0] <= 0:
        raise DatasetError(f"link split {fractions!r}: give three fractions (train, val, test), train > 0, summing to "
                           "at most 1, e.g. 0.85,0.05,0.10")
    return parts


def check_negatives(neg_per_pos) -> int:
    """The fixed negatives per val/test positive: at least 1 (with none, AUC and MRR have nothing to rank against)."""
    if isinstance(neg_per_pos, bool) or not isinstance(neg_per_pos, int) or neg_per_pos < 1:
        raise DatasetError(f"link negatives {neg_per_pos!r}: give the number of fixed negatives per validation/test "
                           f"edge, at least 1 (default {DEFAULT_NEG_PER_POS}; --link-negatives)")
    return neg_per_pos


def check_edge_split(split: EdgeSplit, num_nodes: int, where: str) -> None:
    """Shapes, dtypes and node ids in range; ``where`` names the file or field for the message."""
    for kind, edges in (("positive", split.pos), ("negative", split.neg)):
        if edges is None:
            continue
        if edges.dim() != 2 or edges.shape[0] != 2 or edges.dtype.is_floating_point or edges.dtype == torch.bool:
            raise DatasetError(f"{where}: {kind} edges have {edges.dtype}{list(edges.shape)}; expected integer node "
                               "ids of shape [2, E]")
        if edges.numel():
            bad = (edges < 0) | (edges >= num_nodes)
            if bool(bad.any()):
                col = int(bad.any(0).nonzero()[0])
                raise DatasetError(f"{where}: {kind} edge {col} is ({int(edges[0, col])}, {int(edges[1, col])}), a "
                                   f"node id outside [0, {num_nodes}); fix that row or pass the right --num-nodes")
    if (split.neg_per_pos is not None and split.neg is not None
            and split.neg.shape[1] != split.pos.shape[1] * split.neg_per_pos):
        raise DatasetError(f"{where}: {split.neg.shape[1]} negatives for {split.pos.shape[1]} positives with "
                           f"{split.neg_per_pos} per positive; give the same number of negatives for every positive")


def _column_ids(csc: RawCSC) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every edge, in CSC order."""
    dst = np.repeat(np.arange(csc.num_nodes, dtype=np.int64), csc.degrees())
    return np.asarray(csc.indices[: csc.num_edges], dtype=np.int64), dst


def random_edge_split(csc: RawCSC, fractions, *, symmetric: bool, neg_per_pos: int = DEFAULT_NEG_PER_POS, seed: int = 0
                      ) -> tuple[RawCSC, dict[str, EdgeSplit]]:
    """The message-passing graph without the val/test edges, and the three splits (see the module docstring).

    ``symmetric``: every edge's reverse is in the graph (as the import found), so a held-out edge takes its reverse
    along.

    Train positives are drawn from the edges left in the graph (all of them when the fractions sum to 1).
    """
    train_f, val_f, test_f = check_fractions(fractions)
    check_negatives(neg_per_pos)
    n = csc.num_nodes
    src, dst = _column_ids(csc)
    keys = np.unique((src * n + dst)[src < dst] if symmetric else (src * n + dst)[src != dst])
    total = len(keys)
    n_val, n_test = int(round(val_f * total)), int(round(test_f * total))
    rest = total - n_val - n_test
    n_train = rest if train_f + val_f + test_f > 1 - 1e-9 else min(int(round(train_f * total)), rest)
    if total == 0 or n_train < 1 or n_val < 1 or n_test < 1:
        asked = ",".join(f"{f:g}" for f in (train_f, val_f, test_f))
        raise DatasetError(f"link split {asked} of the graph's {total} candidate edges (self loops excluded) gives "
                           f"{n_train} train, {n_val} validation and {n_test} test edges; each needs at least one: "
                           "give larger validation/test fractions or a larger graph")
    keys = keys[np.random.default_rng(seed).permutation(total)]
    parts = {"val": keys[:n_val], "test": keys[n_val : n_val + n_test],
             "train": keys[n_val + n_test : n_val + n_test + n_train]}

    held = np.concatenate([parts["val"], parts["test"]])
    if symmetric:
        held = np.concatenate([held, (held % n) * n + held // n])
    keep = ~np.isin(src * n + dst, held)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst[keep], minlength=n), out=indptr[1:])
    weights = None if csc.weights is None else np.asarray(csc.weights[: csc.num_edges])[keep]
    graph = RawCSC(indptr, np.asarray(csc.indices[: csc.num_edges])[keep], weights)

    # read-only maps the sampler only reads: torch's not-writable warning does not apply
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        full_graph = CSCGraph.from_numpy(np.asarray(csc.indptr), np.asarray(csc.indices))
    full = NegativeSampler(full_graph, strict=True, seed=seed)
    splits = {}
    for key, name in enumerate(LINK_SPLIT_NAMES):
        chosen = np.sort(parts[name])
        pos = torch.from_numpy(np.stack([chosen // n, chosen % n]))
        if name == "train":
            splits[name] = EdgeSplit(pos)
            continue
        try:
            neg_dst = full.destinations(pos[0], neg_per_pos, key=key)
        except InputError as exc:  # its fix names the Python keyword; the import has none to offer
            raise DatasetError(f"{name} negatives: {str(exc).split(';')[0]}; every val/test negative must be a "
                               "non-edge, so link prediction needs a sparser graph (or leave that node out)") from None
        neg = torch.stack([pos[0].repeat_interleave(neg_per_pos), neg_dst])
        splits[name] = EdgeSplit(pos, neg, neg_per_pos)
    return graph, splits
