"""The checks of a run on a partitioned folder (``engine/partitioned.py``): a part a run can train on, the ranks
started with the same settings (one all-gather before any other collective, the differing flag named), and a batch's
feature rows finite (a NaN named by the part file it came from)."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import torch
import torch.distributed as dist

from sparsetrain.datasets.format import NODE
from sparsetrain.engine.distributed import DistContext
from sparsetrain.engine.plan import RunPlan
from sparsetrain.engine.settings import FLAGS, TrainSettings, flag_names
from sparsetrain.errors import DatasetError, SettingError
from sparsetrain.partition.load import Partition
from sparsetrain.partition.per_type import owned_features_file


def check_part_contents(part: Partition) -> None:
    """A part a run can train on: it has features and labels (a dataset imported without them cannot be trained on
    once partitioned either)."""
    target = part.target_type
    for what, value, fix in (("node features", part.features_by_type or None, "--features"),
                             ("labels", part.dataset.labels_by_type.get(target), "--labels")):
        if value is None:
            raise SettingError(f"{part.path}: the partitioned dataset has no {what}, which training needs; "
                               f"re-import it with {fix} (`sparsetrain preprocess`) and re-partition")


SAME_ON_EVERY_RANK_EXCEPT = {"data.path", "data.verify", "features.cache_gb", "run.device", "checkpoint.dir",
                             "report.log", "report.summary_json", "report.quiet"}
"""Settings a rank may choose for itself; every other one changes what the ranks exchange or when (batch size,
fanouts, model dims, epochs, steps, seed, precision, ...), so it must be the same on every rank."""


_FLAG_NAMES = {place: flag_names(flat)[0] for flat, place in FLAGS.items()}
"""(part, field) -> the ``train`` flag that sets it, as the CLI spells it."""


def rank_settings(settings: TrainSettings, run: RunPlan, part: Partition, steps: int) -> dict[str, str]:
    """What every rank must agree on, named as the message will name it: every setting as given (by its flag), then
    as the plan resolved it (defaults filled in: the epochs, the model's dims), then the partitioning and the steps an
    epoch."""
    values = {}
    for source, suffix in ((settings, ""), (replace(settings, model=run.model, optim=run.optim), " (as resolved)")):
        for section in fields(source):
            for f in fields(getattr(source, section.name)):
                if f"{section.name}.{f.name}" not in SAME_ON_EVERY_RANK_EXCEPT:
                    name = _FLAG_NAMES.get((section.name, f.name), f"{section.name}.{f.name}") + suffix
                    values[name] = repr(getattr(getattr(source, section.name), f.name))
    values |= {"the partitioning (partition_id)": part.manifest["partition_id"], "steps per epoch": str(steps)}
    return values


def check_same_settings(values: dict[str, str], ctx: DistContext) -> None:
    """Refuse in one line, on every rank, a run whose ranks were started with different settings (``values``, by
    name): a mismatch in the batch count or a model's shape would otherwise fail inside a collective (a signal death
    in gloo, or a hang until the timeout). One all-gather of the settings, before any other collective."""
    if not ctx.enabled:
        return
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, values)
    for rank, other in enumerate(gathered):
        for name, value in values.items():
            if other.get(name) != value:
                raise SettingError(f"rank {ctx.rank}: {name} is {value} here but {other.get(name)} on rank "
                                   f"{rank}; start every rank with the same flags and --data")


def check_part_rows(x: torch.Tensor, ids: torch.Tensor, owner: torch.Tensor, part: Partition,
                    node_type: str = NODE) -> None:
    """One min/max pass over a batch's feature rows of ``node_type``; a NaN or an infinity is one line naming the part
    file the first bad row came from (``owner``: each row's part) and the fix: re-import the dataset with finite values
    and re-partition (or restore the part, when it was edited after partitioning: ``partition-info`` says which)."""
    if not x.dtype.is_floating_point or x.numel() == 0:
        return
    if all(math.isfinite(v) for v in torch.stack(torch.aminmax(x)).tolist()):
        return
    bad = (~torch.isfinite(x.reshape(len(x), -1))).any(dim=1).nonzero().flatten()
    first = int(bad[0])
    source = part.path / f"part-{int(owner.reshape(-1)[first])}" / owned_features_file(node_type)
    shown = ", ".join(str(int(i)) for i in ids.reshape(-1)[bad].cpu().sort().values[:5])
    raise DatasetError(f"{source}: rows of nodes {shown}{' ...' if len(bad) > 5 else ''} hold NaN or inf ({len(bad)} "
                       f"of the {len(x)} rows this batch read); if `sparsetrain partition-info {part.path}` reports "
                       "an edited part, restore it or re-partition; else re-import the dataset with finite values "
                       "(`sparsetrain preprocess`) and re-run `sparsetrain partition`")
