"""Which flag applies to which method, folder kind or mode: one table per verb, one check that reads it.

A flag that the chosen method, the input folder's kind or the mode ignores is refused in one line naming the flag,
what makes it not apply and what to do, never accepted and dropped: ``partition --seed`` with a method that draws no
random numbers, ``--passes`` / ``--imbalance`` with ``--method hash``, partitioning a temporal dataset (the parts
carry no times), ``train --cache-policy`` in front of a partitioned run's static halo cache, ``--temporal --step
static`` (temporal levels are not bounded by the padded shapes), ``undirected`` / ``reorder`` / a link split on a typed
import and ``add_reverse`` / ``target_type`` on a graph of one node and one edge type (:data:`IMPORT_APPLIES`). A
table's rows read plain attributes of the context they are given (:class:`PartitionContext`, :class:`TrainContext`,
:class:`ImportContext`), so this module imports neither the partitioner, the engine nor the importers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sparsetrain.errors import SettingError


@dataclass(frozen=True)
class Rule:
    """``refused(ctx)``: the flag was given where it does not apply; ``message(ctx)``: the one line saying so."""

    refused: Callable[[Any], bool]
    message: Callable[[Any], str]


def refuse_inapplicable(rules: Iterable[Rule], ctx: Any, error: type[Exception] = SettingError) -> None:
    """Raise ``error`` with the first rule of ``rules`` that refuses ``ctx``."""
    for rule in rules:
        if rule.refused(ctx):
            raise error(rule.message(ctx))


# ---------------------------------------------------------------- partition


@dataclass(frozen=True)
class PartitionContext:
    """What the partition table reads: the options as given (None: not given) and whether the dataset has times."""

    method: str
    seed: int | None
    passes: int | None
    imbalance: float | None
    data: str
    temporal: bool


PARTITION_RULES = (
    Rule(lambda c: c.seed is not None and c.method != "hash",
         lambda c: f"--seed {c.seed}: does not apply to --method {c.method}, which draws no random numbers (only "
                   "--method hash does); drop --seed"),
    Rule(lambda c: c.passes is not None and c.method == "hash",
         lambda c: f"--passes {c.passes}: does not apply to --method hash, which places every node in one pass; "
                   "drop --passes or use --method ldg"),
    Rule(lambda c: c.imbalance is not None and c.method == "hash",
         lambda c: f"--imbalance {c.imbalance:g}: does not apply to --method hash, which balances by chance, not "
                   "under a cap; drop --imbalance or use --method ldg"),
    Rule(lambda c: c.temporal,
         lambda c: f"{c.data}: has node or edge times, which the parts do not carry (a partitioned run samples "
                   "without them); partition a copy imported without times"),
)


# ---------------------------------------------------------------- train


@dataclass(frozen=True)
class TrainContext:
    """What the train table reads: the settings (a ``TrainSettings``) and whether ``--data`` is a partitioned
    folder."""

    settings: Any
    partitioned: bool


NOT_PARTITIONED_MODELS = ("gt",)
"""Models a partitioned run does not train: the graph transformer attends within clusters of the whole graph."""


def _on_parts(c: TrainContext) -> str:
    return f"not supported on a partitioned folder ({c.settings.data.path})"


TRAIN_RULES = (
    Rule(lambda c: c.settings.sampling.temporal and c.settings.run.step == "static",
         lambda c: "--step static: its padded shapes bound each level by the node count, which temporal levels "
                   "(neighbors drawn per seed time) can exceed; drop --step static or --temporal"),
    Rule(lambda c: c.settings.features.cache_policy is not None and c.settings.features.cache_gb == 0
         and not c.partitioned,
         lambda c: f"--cache-policy {c.settings.features.cache_policy}: there is no cache without --cache-gb; add "
                   "--cache-gb or drop --cache-policy"),
    Rule(lambda c: c.partitioned and c.settings.features.cache_policy not in (None, "static"),
         lambda c: f"--cache-policy {c.settings.features.cache_policy}: {_on_parts(c)}; a part's halo cache is "
                   "static (the halo rows with most in-edges, filled once, sized by --cache-gb): drop --cache-policy"),
    Rule(lambda c: c.partitioned and c.settings.data.task != "node",
         lambda c: f"--task {c.settings.data.task}: {_on_parts(c)}; node classification only"),
    Rule(lambda c: c.partitioned and c.settings.sampling.temporal,
         lambda c: f"--temporal: {_on_parts(c)}; temporal sampling is not distributed yet"),
    Rule(lambda c: c.partitioned and c.settings.sampling.fuse_last_hop,
         lambda c: f"--fuse-last-hop: {_on_parts(c)}; the owners draw a part's last hop; drop it"),
    Rule(lambda c: c.partitioned and c.settings.features.placement != "auto",
         lambda c: f"--features {c.settings.features.placement}: {_on_parts(c)}; a part's features are its own rows "
                   "plus a cache of halo rows; drop --features"),
    Rule(lambda c: c.partitioned and c.settings.model.name in NOT_PARTITIONED_MODELS,
         lambda c: f"--model {c.settings.model.name}: {_on_parts(c)}; choose a block GNN (sage, gcn, gat; typed: "
                   "rgcn, rgat)"),
    Rule(lambda c: c.partitioned and c.settings.run.eval == "full",
         lambda c: f"--eval full: {_on_parts(c)}; a partitioned run evaluates on sampled batches; pass --eval sampled "
                   "or auto"),
)


# ---------------------------------------------------------------- import


ONE_TYPE = "one-type"
"""The kind of a graph of one node type and one edge type (named ``_N`` and ``("_N", "_E", "_N")``)."""
TYPED = "typed"
"""The kind of a graph whose node and edge types the user names (any number of them)."""
KIND_WORDS = {ONE_TYPE: "a graph of one node and one edge type", TYPED: "a typed graph"}


@dataclass(frozen=True)
class ImportContext:
    """What the import table reads: the graph's kind (``ONE_TYPE`` or ``TYPED``) and the options given, each as the
    user wrote it (``{option: "undirected (--undirected)"}``); an option not given is absent."""

    kind: str
    given: dict[str, str]


_KEPT_AS_GIVEN = "a typed dataset keeps its edges as given (use add_reverse / --add-reverse for reverse edge types)"

IMPORT_APPLIES = {
    "undirected": ((ONE_TYPE,), _KEPT_AS_GIVEN),
    "drop_self_loops": ((ONE_TYPE,), _KEPT_AS_GIVEN),
    "drop_duplicates": ((ONE_TYPE,), _KEPT_AS_GIVEN),
    "reorder": ((ONE_TYPE,), "a typed dataset keeps its node order; drop --reorder"),
    "link_split": ((ONE_TYPE,), "link splits are drawn from the edges of one edge type; drop --link-split"),
    "edge_splits": ((ONE_TYPE,), "import the typed graph without them"),
    "edge_weights": ((ONE_TYPE,), "a typed dataset stores no edge weights; drop the column"),
    "add_reverse": ((TYPED,), "a graph of one edge type adds reverse edges with undirected=True (--undirected)"),
    "target_type": ((TYPED,), "a graph of one node type has no other to choose; drop --target-type"),
    "reserved_names": ((ONE_TYPE,), "it names a homogeneous graph's one type; rename that type (letters, digits, '_' "
                                    "and '-', starting with a letter or digit)"),
}
"""Which kinds of graph each import option applies to, and what to do instead where it does not."""

IMPORT_RULES = tuple(
    Rule(lambda c, option=option, kinds=kinds: option in c.given and c.kind not in kinds,
         lambda c, option=option, kinds=kinds, instead=instead:
         f"{c.given[option]} is for {' or '.join(KIND_WORDS[k] for k in kinds)}, not {KIND_WORDS[c.kind]}; {instead}")
    for option, (kinds, instead) in IMPORT_APPLIES.items()
)
"""One row per :data:`IMPORT_APPLIES` entry: the option is refused on a graph of a kind it does not apply to."""
