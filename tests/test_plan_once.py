"""The plan decides once: a partitioned folder is planned by the same ``plan()`` from its parts' description, the engine
and the PyG drop-in share one GPU-residency rule, and every path cuts and keys its batches by one scheme."""

import re
from dataclasses import replace

import pytest
import torch

import sparsetrain as st
from sparsetrain.engine import plan as plan_module
from sparsetrain.engine.dataset_meta import DatasetMeta, PartsMeta
from sparsetrain.engine.plan import HALO_CACHE_FRACTION, plan
from sparsetrain.engine.settings import FeatureSettings, TrainSettings
from sparsetrain.errors import SettingError
from sparsetrain.pyg.device import placement_plan
from sparsetrain.sampling import SeedBatches
from sparsetrain.sampling.batch_keys import batch_key, epoch_order, run_key
from sparsetrain.storage import residency

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def part_meta(tmp_path_factory):
    """A homogeneous dataset's description as a part of 3 (train sizes 100, 130 and 90; a halo of 40 rows)."""
    ds = st.datasets.synthesize(tmp_path_factory.mktemp("parts") / "g", 300, 2400, feature_dim=8, num_classes=3,
                                seed=0, quiet=True)
    return replace(DatasetMeta.of(ds), parts=PartsMeta(3, (100, 130, 90), {"_N": 40}))


def test_a_partitioned_run_gets_its_epochs_and_halo_cache_from_the_plan(part_meta):
    run = plan(TrainSettings(batch_size=32), part_meta, CPU, world_size=3)
    assert run.optim.epochs == 200  # the one-process epoch: ceil(320 / (32 x 3)) = 4 steps; 500 epochs, capped
    run = plan(TrainSettings(batch_size=1), part_meta, CPU, world_size=3)
    assert run.optim.epochs == 19  # ceil(320 / 3) = 107 steps an epoch (every rank its share of each), ceil(2000 / 107)
    assert run.halo_cache_rows == {"_N": int(40 * HALO_CACHE_FRACTION)} == {"_N": 10}
    row_bytes = part_meta.features["_N"].row_bytes
    run = plan(TrainSettings(cache_gb=1e-6), part_meta, CPU, world_size=3)
    assert run.halo_cache_rows == {"_N": int(1e-6 * 2**30 // row_bytes)}
    assert not run.full_eval and not run.graph_on_device and run.model.name == "sage"
    assert run.record["dataset"] == {"path": str(part_meta.path), "sha256": part_meta.meta_sha256}
    assert plan(TrainSettings(), replace(part_meta, parts=None), CPU).halo_cache_rows is None


@pytest.mark.parametrize(("settings", "says"), [
    (TrainSettings(eval="full"), "--eval full: not supported on a partitioned folder"),
    (TrainSettings(model="gt"), "--model gt: not supported on a partitioned folder"),
    (TrainSettings(features="memory"), "--features memory: not supported on a partitioned folder"),
    (TrainSettings(), "has 3 parts but 2 ranks run; run one rank per part (torchrun --nproc-per-node 3)"),
])
def test_what_parts_cannot_do_is_refused_by_the_plan(part_meta, settings, says):
    with pytest.raises(SettingError, match=re.escape(says)):
        plan(settings, part_meta, CPU, world_size=2)


@pytest.mark.parametrize(("nbytes", "free", "resident"), [(40, 100, True), (41, 100, False), (0, 0, True)])
def test_the_engine_and_the_drop_in_keep_the_same_data_on_the_gpu(monkeypatch, nbytes, free, resident):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 10 * free))
    cuda = torch.device("cuda")
    engine = plan_module._placement(nbytes, FeatureSettings(), cuda)
    drop_in = placement_plan("cuda", CPU, nbytes, lambda _: free).features
    assert (engine, drop_in) == (("device", "device") if resident else ("pinned", "pinned"))
    assert plan_module._graph_fits(nbytes, cuda) is resident
    monkeypatch.setattr(residency, "GPU_RESIDENT_FRACTION", 0.5)  # one rule: both move with it
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100, 1000))
    engine = plan_module._placement(41, FeatureSettings(), cuda)
    assert (engine, placement_plan("cuda", CPU, 41, lambda _: 100).features) == ("device", "device")


def test_one_key_scheme_for_every_path():
    # hand-computed: 3 ranks, 4 batches an epoch; keys (epoch * 4 + position) * 3 + rank
    assert [batch_key(2, p, 4, rank=1, world_size=3) for p in range(4)] == [25, 28, 31, 34]
    assert run_key(2 * 4 + 3, 1, 3) == batch_key(2, 3, 4, 1, 3)
    # one process: 0, 1, 2, ... in order, as before the scheme was shared (the single-process batches unchanged)
    assert [batch_key(e, p, 5) for e in range(2) for p in range(5)] == list(range(10))
    seeds = torch.arange(50, 90)
    batches = SeedBatches(seeds, 16, seed=7)
    shuffled = seeds[torch.randperm(40, generator=torch.Generator().manual_seed(7 * 1_000_003 + 1))]
    assert torch.equal(torch.cat([inp.seeds for inp in batches.inputs(1)]), shuffled)
    assert [inp.key for inp in batches.inputs(1)] == [3, 4, 5]
    per_rank = torch.randperm(40, generator=torch.Generator().manual_seed((7 * 1_000_003 + 1) * 3 + 2))
    assert torch.equal(epoch_order(40, 7, 1, rank=2, world_size=3), per_rank)
