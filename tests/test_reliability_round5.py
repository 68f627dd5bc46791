"""Reliability, round five (issue 48): each class closed at its root, replayed here over several cases each.

1. one output-path rule (``datasets/outputs.py``) for every output flag of every verb: nothing into a dataset, a
   partitioned folder or a part; ``partition`` never replaces another run's result without ``--overwrite`` (a
   no-replace rename), and ``--overwrite`` onto a symlinked ``--out`` leaves nothing beside it;
2. a partitioned folder's arrays checked against the checksums recorded when it was written (``partition-info``,
   ``load_partition``, ``train`` / ``--verify``), and ``partition`` checking its source as ``train`` does;
3. the partitioned run: one line for a featureless part, for ranks started with different settings (the setting
   named), for a rank that never starts; the distributed shuffle seed bounded for every allowed ``--seed``; the
   drop-in over parts checking ``batch_size``/``drop_last``/``seed`` and honouring ``drop_last``;
4. one table of flags that do not apply (``datasets/applicable.py``);
5. MoE's constructor arguments checked for type and range, the parameter named (``_args.py``);
6. a NaN in a part's features names the part file; ``--cache-gb`` above the table is capped; ``info`` checks the split
   labels ``train`` checks.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsetrain.datasets import load, synthesize
from sparsetrain.datasets.writer import move_into_place
from sparsetrain.engine import partitioned, partitioned_checks
from sparsetrain.engine.dataset_meta import DatasetMeta
from sparsetrain.engine.distributed import DistContext
from sparsetrain.engine.plan import plan
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.errors import DatasetError, OutputExistsError, SettingError
from sparsetrain.moe import MoE
from sparsetrain.partition import PartitionOptions, load_partition, partition_dataset
from sparsetrain.partition.load import part_sizes
from sparsetrain.partitioned.seeds import rank_batches
from tests.collective_harness import free_port

ONE_LINE = "sparsetrain writes nothing into a data folder"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A 300-node dataset ``d`` with features, labels and splits; ``p``: it in 2 LDG parts; ``p1``: in 1 part."""
    root = tmp_path_factory.mktemp("r5")
    synthesize(root / "d", 300, 3000, feature_dim=4, num_classes=3, seed=1, quiet=True)
    partition_dataset(root / "d", root / "p", PartitionOptions(2, quiet=True))
    partition_dataset(root / "d", root / "p1", PartitionOptions(1, quiet=True))
    return root


def _digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (names relative to it) -> its sha256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(code, err: str) -> str:
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    return err


# ---------------------------------------------------------------- 1. outputs


@pytest.mark.parametrize("flag", ["--summary-json", "--metrics-log", "--checkpoint-dir"])
@pytest.mark.parametrize("target", ["p1/manifest.json", "p1/owner.npy", "p1", "p1/part-0", "p1/part-0/labels.npy",
                                    "p1/new/x", "p/manifest.json", "d/meta.json", "d"])
def test_train_outputs_inside_any_data_folder_are_refused_and_the_folder_kept(root, cli, flag, target):
    before = {name: _digest(root / name) for name in ("d", "p", "p1")}
    code, _, err = cli("train", "--data", root / "p1", "--epochs", "1", "--quiet", flag, root / target)
    err = _one_line(code, err)
    assert f"{flag} {root / target}: is" in err and ("data folder" in err or "this command reads" in err), err
    assert {name: _digest(root / name) for name in ("d", "p", "p1")} == before


@pytest.mark.parametrize("argv, where", [
    (["synth", "--out", "p/x", "--nodes", 30, "--edges", 100, "--classes", 3], "partitioned folder"),
    (["synth", "--out", "p/part-0", "--overwrite", "--nodes", 30, "--edges", 100, "--classes", 3], "partitioned"),
    (["synth", "--out", "d/x", "--nodes", 30, "--edges", 100, "--classes", 3], "dataset folder"),
    (["partition", "d", "--parts", 2, "--out", "p/sub"], "partitioned folder"),
    (["partition", "d", "--parts", 2, "--out", "d/sub"], "dataset folder"),
    (["partition", "p1/part-0", "--parts", 2, "--out", "p1/x"], "partitioned folder"),
    (["partition", "d", "--parts", 2, "--out", "p1/part-0", "--overwrite"], "partitioned folder"),
])
def test_dataset_and_partition_outputs_inside_data_folders_are_refused(root, cli, argv, where):
    before = {name: _digest(root / name) for name in ("d", "p", "p1")}
    args = [root / a if isinstance(a, str) and a.split("/")[0] in ("d", "p", "p1") else a for a in argv]
    code, _, err = cli(*args, "--quiet")
    assert where in _one_line(code, err)
    assert {name: _digest(root / name) for name in ("d", "p", "p1")} == before


def test_two_partition_runs_into_one_out_one_wins_and_the_other_deletes_nothing(root, tmp_path):
    out = tmp_path / "parts"
    cmd = [sys.executable, "-m", "sparsetrain", "partition", str(root / "d"), "--parts", "2", "--out", str(out),
           "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 1], results
    err = next(e for code, e in results if code == 1)
    assert len(err.strip().splitlines()) == 1 and ("already exists" in err or "appeared while" in err), err
    assert load_partition(out, 1).num_parts == 2  # the winner's folder, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]  # no temp or moved-aside folder left


def test_a_folder_that_appears_meanwhile_is_never_replaced_without_overwrite(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "theirs").write_text("x")
    (tmp_path / "tmp").mkdir()
    with pytest.raises(OutputExistsError, match="already exists"):
        move_into_place(tmp_path / "tmp", tmp_path / "out", overwrite=False)
    (tmp_path / "out2").mkdir()  # an empty folder appeared: a plain rename would silently take its place
    with pytest.raises(OutputExistsError):
        move_into_place(tmp_path / "tmp", tmp_path / "out2", overwrite=False)
    assert (tmp_path / "out" / "theirs").read_text() == "x" and (tmp_path / "tmp").is_dir()


def test_overwrite_onto_a_symlinked_out_leaves_nothing_beside_it(root, tmp_path):
    partition_dataset(root / "d", tmp_path / "target", PartitionOptions(2, quiet=True))
    (tmp_path / "link").symlink_to(tmp_path / "target")
    manifest = partition_dataset(root / "d", tmp_path / "link", PartitionOptions(3, overwrite=True, quiet=True))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["link", "target"], names  # no .link.old-<pid> link, no temp folder
    assert not (tmp_path / "link").is_symlink() and load_partition(tmp_path / "link", 2).num_parts == 3
    assert manifest["num_parts"] == 3 and load_partition(tmp_path / "target", 1).num_parts == 2


# ---------------------------------------------------------------- 2. checksums of a partitioned folder's arrays


def _zero(a):
    a[:] = 0
    return a


@pytest.mark.parametrize("file, change, message", [
    ("part-1/node._N.owned_features.npy", _zero, "sha256 does not match meta.json"),
    ("part-0/labels.npy", lambda a: np.where(a >= 0, (a + 1) % 3, a), "sha256 does not match meta.json"),
    ("owner.npy", lambda a: 1 - a, "owner.npy: sha256 does not match manifest.json"),
    ("part-0/edge._N____E____N.col_start.npy", lambda a: a[::-1].copy(), "sha256 does not match meta.json"),
    ("part-1/node._N.halo_owner.npy", lambda a: a[:-1], "where meta.json records"),
    ("part-0/node._N.local_to_global.npy", lambda a: a.astype(np.int32), "where meta.json records"),
])
def test_an_edited_array_of_a_partitioned_folder_is_refused(root, tmp_path, cli, file, change, message):
    folder = tmp_path / "p"
    shutil.copytree(root / "p", folder)
    np.save(folder / file, change(np.load(folder / file)))
    code, _, err = cli("partition-info", folder)
    assert f"{folder / file}: " in _one_line(code, err) and message in err and "re-run `sparsetrain partition`" in err
    part = 1 if file.startswith("part-1") else 0
    with pytest.raises(DatasetError, match=message):
        load_partition(folder, part, verify=True)
    shape_changed = message.startswith("where")
    if shape_changed:  # sizes and shapes are checked on every load, sha256 with verify=True only (a full read)
        with pytest.raises(DatasetError, match=message):
            load_partition(folder, part)
    elif file != "owner.npy":
        assert load_partition(folder, part).rank == part


@pytest.mark.parametrize("verify", [[], ["--verify"]])
@pytest.mark.parametrize("file, change", [("part-0/node._N.owned_features.npy", _zero),
                                          ("part-0/labels.npy", lambda a: np.where(a >= 0, (a + 1) % 3, a))])
def test_train_refuses_an_edited_part(root, tmp_path, cli, verify, file, change):
    folder = tmp_path / "p1"
    shutil.copytree(root / "p1", folder)
    np.save(folder / file, change(np.load(folder / file)))
    code, _, err = cli("train", "--data", folder, "--epochs", "1", "--quiet", *verify)
    assert f"{folder / file}: sha256 does not match" in _one_line(code, err)


def test_partition_refuses_a_dataset_edited_after_import(root, tmp_path, cli):
    data = tmp_path / "d"
    shutil.copytree(root / "d", data)
    labels = np.load(data / "labels.npy")
    np.save(data / "labels.npy", np.where(labels >= 0, (labels + 1) % 3, labels))
    code, _, err = cli("partition", data, "--parts", 2, "--out", tmp_path / "p", "--quiet")
    assert "labels.npy: sha256 does not match meta.json" in _one_line(code, err) and "before partitioning" in err
    assert not (tmp_path / "p").exists()


# ---------------------------------------------------------------- 3. the partitioned run


def test_a_part_without_features_is_one_line(tmp_path, cli):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "e.npy", rng.integers(0, 200, (2, 2000)))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, 200))
    assert cli("preprocess", "--edges", tmp_path / "e.npy", "--labels", tmp_path / "y.npy", "--split", "0.6,0.2,0.2",
               "--out", tmp_path / "d", "--quiet")[0] == 0
    partition_dataset(tmp_path / "d", tmp_path / "p", PartitionOptions(1, quiet=True))
    code, _, err = cli("train", "--data", tmp_path / "p", "--epochs", "1", "--quiet")
    assert "has no node features, which training needs" in _one_line(code, err)


@pytest.mark.parametrize("seed", [2**43 - 1, -(2**43), 5])
def test_the_distributed_shuffle_seed_is_bounded_for_every_allowed_seed(root, seed):
    for rank in range(2):
        part = load_partition(root / "p", rank)
        got = torch.cat([inp.seeds for inp in rank_batches(part, "train", 16, seed=seed, epoch=3)])
        ids = part.split_global("train")  # reference: the seed folded modulo 2**64 by hand, as torch folds one
        generator = torch.Generator().manual_seed(((seed * 1_000_003 + 3) * 2 + rank) % 2**64)
        assert torch.equal(got, ids[torch.randperm(len(ids), generator=generator)])


@pytest.mark.parametrize("other, named", [(["--batch-size", "16"], "--batch-size is 32 here but 16"),
                                          (["--fanout", "5,5"], "--fanout is"),
                                          (["--hidden", "32"], "--hidden is"),
                                          (["--epochs", "2"], "--epochs is"),
                                          (["--max-steps", "3"], "--max-steps is"),
                                          (["--seed", "1"], "--seed is")])
def test_ranks_started_with_different_settings_are_refused_naming_the_setting(root, monkeypatch, other, named):
    """The all-gather is replaced by the two ranks' values (the same code runs on both ranks of a real run: the slow
    test below)."""
    from sparsetrain.cli import build_parser
    from sparsetrain.engine.cli import settings_of

    def values(argv):
        settings = settings_of(build_parser().parse_args(["train", "--data", str(root / "p"), *argv]))
        part = load_partition(root / "p", 0)
        run = plan(settings, partitioned.part_meta(part), torch.device("cpu"), 2)
        return partitioned_checks.rank_settings(settings, run, part, 5)

    mine, theirs = values(["--batch-size", "32"]), values(["--batch-size", "32", *other])
    monkeypatch.setattr(partitioned_checks.dist, "all_gather_object", lambda out, value: out.__setitem__(slice(None),
                                                                                                [value, theirs]))
    ctx = DistContext(0, 2, 0, torch.device("cpu"))
    with pytest.raises(partitioned_checks.SettingError, match="start every rank with the same flags") as info:
        partitioned_checks.check_same_settings(mine, ctx)
    assert named in str(info.value) and "on rank 1" in str(info.value)
    partitioned_checks.check_same_settings(mine, DistContext(0, 1, 0, torch.device("cpu")))  # one rank: no peers


def _ranks(root, argvs, tmp_path, timeout=10):
    port, procs = free_port(), []
    for rank, argv in enumerate(argvs):
        if argv is None:
            continue
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(len(argvs)),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SPARSETRAIN_DIST_TIMEOUT=str(timeout),
                   PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        cmd = [sys.executable, "-m", "sparsetrain", "train", "--data", str(root / "p"), "--epochs", "1", "--quiet",
               *argv]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return [(p.wait(timeout=180), p.stderr.read()) for p in procs]


@pytest.mark.slow  # ~25 s on 2 shared cores: two ranks started
@pytest.mark.distributed
def test_two_ranks_with_different_batch_sizes_fail_in_one_line(root, tmp_path):
    results = _ranks(root, [["--batch-size", "16"], ["--batch-size", "32"]], tmp_path)
    for rank, (code, err) in enumerate(results):
        assert code == 1 and len(err.strip().splitlines()) == 1, err[-2000:]
        assert f"rank {rank}: --batch-size is" in err


@pytest.mark.distributed
def test_a_rank_that_never_starts_is_one_line(root, tmp_path):
    start = time.time()
    [(code, err)] = _ranks(root, [[], None], tmp_path, timeout=3)
    assert code == 1 and len(err.strip().splitlines()) == 1, err[-2000:]
    assert "rank 0 of 2: could not join the process group" in err and time.time() - start < 60


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size=0"), ({"batch_size": -1}, "batch_size=-1"), ({"batch_size": 2.5}, "batch_size=2.5"),
    ({"batch_size": True}, "batch_size=True"), ({"batch_size": "4"}, "batch_size='4'"),
    ({"drop_last": "yes"}, "drop_last='yes'"), ({"shuffle": 1}, "shuffle=1"),
])
def test_the_drop_in_over_parts_checks_its_loader_arguments(root, kwargs, message):
    from sparsetrain.pyg.partitioned import PartitionGraphStore, partitioned_loader_args

    stores = (None, PartitionGraphStore(load_partition(root / "p", 0)))
    with pytest.raises((ValueError, TypeError), match=message):
        partitioned_loader_args(stores, "train", kwargs, seed=0)


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_drop_in_over_parts_honours_drop_last(root, drop_last):
    """The ranks' shares of the one-process epoch's batches (batch_size a rank, 7 x 2 together): drop_last drops the
    short last one-process batch, and the shares of each step add up to the one-process batch."""
    from sparsetrain.pyg.partitioned import PartitionGraphStore, partitioned_loader_args

    total = sum(part_sizes(json.loads((root / "p" / "manifest.json").read_text()), "train"))
    shares = []
    for rank in range(2):
        part = load_partition(root / "p", rank)
        seeds, args = partitioned_loader_args((None, PartitionGraphStore(part)), "train",
                                              {"batch_size": 7, "drop_last": drop_last}, seed=0)
        assert "drop_last" not in args
        shares.append([len(b) for b in args["batch_sampler"]])
    expect = total // 14 if drop_last else -(-total // 14)
    assert len(shares[0]) == len(shares[1]) == expect
    steps = [a + b for a, b in zip(*shares)]
    assert all(n == 14 for n in steps[:-1]) and sum(steps) == (total // 14 * 14 if drop_last else total)


@pytest.mark.parametrize("seed", [1.9, "1", True, 2**64])
def test_the_drop_in_sampler_seed_is_an_integer(root, seed):
    from sparsetrain.pyg.partitioned import PartitionGraphStore
    from sparsetrain.pyg.sampler import PyGNeighborSampler

    with pytest.raises((ValueError, TypeError), match=f"seed={seed!r}"):
        PyGNeighborSampler((None, PartitionGraphStore(load_partition(root / "p", 0))), [2], seed=seed)


# ---------------------------------------------------------------- 4. flags that do not apply


@pytest.mark.parametrize("argv, message", [
    (["partition", "d", "--parts", 2, "--seed", 3], "--seed 3: does not apply to --method ldg"),
    (["partition", "d", "--parts", 2, "--method", "hash", "--passes", 3], "--passes 3: does not apply to --method"),
    (["partition", "d", "--parts", 2, "--method", "hash", "--imbalance", 0.1], "--imbalance 0.1: does not apply"),
    (["train", "--data", "p1", "--cache-policy", "lru"], "--cache-policy lru: not supported on a partitioned folder"),
    (["train", "--data", "p1", "--cache-gb", 1, "--cache-policy", "clock"], "--cache-policy clock: not supported"),
    (["train", "--data", "d", "--cache-policy", "lru"], "--cache-policy lru: there is no cache without --cache-gb"),
    (["train", "--data", "d", "--temporal", "--step", "static"], "--step static: its padded shapes"),
    (["train", "--data", "p1", "--temporal"], "--temporal: not supported on a partitioned folder"),
])
def test_flags_that_do_not_apply_are_refused_in_one_line(root, tmp_path, cli, argv, message):
    args = [root / a if a in ("d", "p1") else a for a in argv]
    if argv[0] == "partition":
        args += ["--out", tmp_path / "out"]
    code, _, err = cli(*args, "--epochs", "1", "--quiet") if argv[0] == "train" else cli(*args, "--quiet")
    assert message in _one_line(code, err)
    assert not (tmp_path / "out").exists()


def test_a_temporal_dataset_is_not_partitioned_without_its_times(tmp_path, cli):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "e.npy", rng.integers(0, 100, (2, 500)))
    np.save(tmp_path / "t.npy", np.arange(100))
    assert cli("preprocess", "--edges", tmp_path / "e.npy", "--node-time", tmp_path / "t.npy", "--out",
               tmp_path / "d", "--quiet")[0] == 0
    code, _, err = cli("partition", tmp_path / "d", "--parts", 2, "--out", tmp_path / "p", "--quiet")
    assert "has node or edge times, which the parts do not carry" in _one_line(code, err)


def test_the_manifest_records_only_the_options_the_method_used(root, tmp_path):
    ldg = partition_dataset(root / "d", tmp_path / "l", PartitionOptions(2, quiet=True))
    hashed = partition_dataset(root / "d", tmp_path / "h", PartitionOptions(2, method="hash", seed=4, quiet=True))
    assert (ldg["seed"], ldg["imbalance"]) == (None, 0.05) and (hashed["seed"], hashed["imbalance"]) == (4, None)
    assert PartitionOptions(2, method="hash").seed == 0 and PartitionOptions(2).passes == 10


# ---------------------------------------------------------------- 5. MoE arguments


@pytest.mark.parametrize("kwargs, message", [
    ({"aux_loss_weight": math.nan}, "aux_loss_weight=nan"), ({"bias_update_rate": math.nan}, "bias_update_rate=nan"),
    ({"renormalize": "no"}, "renormalize='no'"), ({"z_loss_weight": "0.5"}, "z_loss_weight='0.5'"),
    ({"capacity_factor": math.inf}, "capacity_factor=inf"), ({"top_k": 2.0}, "top_k=2.0"),
    ({"d_model": 8.0}, "d_model=8.0"), ({"num_experts": True}, "num_experts=True"),
    ({"shared_gate": 1, "shared_experts": 1}, "shared_gate=1"), ({"expert_bias": "yes"}, "expert_bias='yes'"),
    ({"routed_scaling_factor": math.inf}, "routed_scaling_factor=inf"), ({"n_group": 2.0}, "n_group=2.0"),
    ({"aux_loss_weight": -1}, "aux_loss_weight=-1"), ({"shared_hidden": 0, "shared_experts": 1}, "shared_hidden=0"),
    ({"topk_group": 1.5}, "topk_group=1.5"), ({"router": None}, "router=None"),
])
def test_moe_arguments_are_checked_when_built_naming_the_parameter(kwargs, message):
    with pytest.raises(SettingError, match="MoE: " + message.replace("(", r"\(").replace(".", r"\.")):
        MoE(**({"d_model": 8, "d_hidden": 16, "num_experts": 4} | kwargs))


@pytest.mark.parametrize("kwargs, message", [
    ({"window": 2.5}, "window=2.5"), ({"hot_factor": math.nan}, "hot_factor=nan"),
    ({"rematerialize": "no"}, "rematerialize='no'"), ({"rebalance_every": 0}, "rebalance_every=0")])
def test_fssdp_arguments_are_checked_when_built(kwargs, message):
    from sparsetrain.moe import FSSDP

    with pytest.raises(SettingError, match=f"FSSDP: {message}"):
        FSSDP(**kwargs)


def test_moe_takes_numpy_integers_and_plain_values():
    layer = MoE(np.int64(8), 16, np.int32(4), top_k=np.int64(2), capacity_factor=2, renormalize=np.bool_(True),
                aux_loss_weight=0)
    assert layer.top_k == 2 and type(layer.top_k) is int and layer.router.renormalize is True
    y, aux = layer(torch.randn(3, 8))
    assert y.shape == (3, 8) and float(aux.loss) == pytest.approx(1e-3 * float(aux.z_loss))


# ---------------------------------------------------------------- 6. borderline and earlier rounds


def test_a_nan_in_a_part_s_features_names_the_part_file(root):
    part = load_partition(root / "p", 0)
    x = torch.zeros(4, 4)
    x[2, 1] = math.nan
    ids, owner = torch.tensor([5, 9, 11, 40]), torch.tensor([0, 0, 1, 0])
    with pytest.raises(DatasetError) as info:
        partitioned_checks.check_part_rows(x, ids, owner, part)
    message = str(info.value)
    assert message.startswith(f"{root / 'p' / 'part-1' / 'node._N.owned_features.npy'}: rows of nodes 11 hold NaN")
    assert "re-run `sparsetrain partition`" in message and "nan_to_num" not in message
    partitioned_checks.check_part_rows(torch.zeros(4, 4), ids, owner, part)  # finite rows pass


def test_a_cache_larger_than_the_table_is_capped_at_the_table(root, cli, tmp_path):
    ds = load(root / "d")
    run = plan(TrainSettings(data=root / "d", cache_gb=1000.0), DatasetMeta.of(ds), torch.device("cpu"))
    assert run.features.cache_gb * 2**30 == pytest.approx(np.load(root / "d" / "features.npy").nbytes)
    code, _, err = cli("train", "--data", root / "d", "--cache-gb", 1000, "--max-steps", 2, "--epochs", 1, "--quiet")
    assert code == 0, err


def test_info_checks_the_split_labels_train_checks(tmp_path, cli):
    ds = synthesize(tmp_path / "t", typed=True, scale=0.0005, quiet=True)
    entry = ds.meta["labels"][ds.target_type]
    labels = np.load(tmp_path / "t" / entry["file"])
    labels[int(ds.split["train"][0])] = -1
    np.save(tmp_path / "t" / entry["file"], labels)
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())  # re-signed: the checksums cannot tell
    meta["files"][entry["file"]]["sha256"] = hashlib.sha256((tmp_path / "t" / entry["file"]).read_bytes()).hexdigest()
    (tmp_path / "t" / "meta.json").write_text(json.dumps(meta))
    code, _, err = cli("info", tmp_path / "t")
    assert "train node(s) have a label outside" in _one_line(code, err) and entry["file"] in err
    code, _, train_err = cli("train", "--data", tmp_path / "t", "--epochs", 1, "--quiet")
    assert code == 1 and "train node(s) have a label outside" in train_err


def test_info_on_a_partitioned_folder_points_to_partition_info(root, cli):
    code, _, err = cli("info", root / "p")
    assert "is a partitioned folder, not a dataset; check it with `sparsetrain partition-info" in _one_line(code, err)
    assert cli("info", root / "p" / "part-0")[0] == 0
