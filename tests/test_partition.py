"""`sparsetrain partition`: every part against the whole dataset read with NumPy (owned nodes, in-edges in the
global column order, id maps, features, labels, splits, halo), edge cut and balance against an independent count,
LDG against the hash baseline, chunking that changes nothing, atomic writes and tampered folders refused in one line."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from sparsetrain.cli import main
from sparsetrain.datasets import load, synthesize
from sparsetrain.engine.default_data import builtin_dataset
from sparsetrain.errors import DatasetError, OutputExistsError
from sparsetrain.partition import PartitionOptions, load_partition, partition_dataset
from sparsetrain.partition.load import owners


@pytest.fixture(scope="module")
def cora() -> Path:
    return builtin_dataset("cora", quiet=True).path


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("synth") / "g"
    synthesize(path, 500, 6000, feature_dim=6, num_classes=4, seed=2, quiet=True)
    return path


@pytest.fixture(scope="module")
def cora3(cora, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("parts") / "cora3"
    partition_dataset(cora, folder, PartitionOptions(3, quiet=True))
    return folder


def _cut(ds, owner: np.ndarray) -> int:
    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return int(np.count_nonzero(owner[indices] != owner[dst]))


def test_parts_hold_the_graph(cora, cora3):
    ds = load(cora)
    indptr, indices = ds.graph.indptr.numpy(), ds.graph.indices.numpy()
    features, labels = ds.features.numpy(), ds.labels.numpy()
    owner = owners(cora3)
    covered = np.zeros(ds.num_nodes, np.int64)
    for p in range(3):
        part = load_partition(cora3, p, verify=True)
        owned = np.flatnonzero(owner == p)
        covered[owned] += 1
        l2g = part.local_to_global.numpy()
        n_own = part.num_owned
        assert np.array_equal(l2g[:n_own], owned)
        pptr, pidx = part.dataset.graph.indptr.numpy(), part.dataset.graph.indices.numpy()
        sources = [indices[indptr[v] : indptr[v + 1]] for v in owned]
        assert all(np.array_equal(l2g[pidx[pptr[i] : pptr[i + 1]]], s) for i, s in enumerate(sources))
        assert np.all(np.diff(pptr)[n_own:] == 0)  # halo columns are empty
        halo = np.setdiff1d(np.concatenate(sources), owned)
        assert np.array_equal(l2g[n_own:], halo)
        assert np.array_equal(part.halo_owner.numpy(), owner[halo])
        # per column: an owned one's first in-edge in the whole CSC, a halo one's (empty) 0
        assert np.array_equal(part.col_start.numpy(), np.r_[indptr[owned], np.zeros(len(halo), np.int64)])
        assert np.array_equal(part.features.numpy(), features[owned])
        assert np.array_equal(part.dataset.labels.numpy(), np.concatenate([labels[owned], np.full(len(halo), -1)]))
        for name, ids in ds.split.items():
            assert np.array_equal(part.split_global(name).numpy(), ids.numpy()[owner[ids.numpy()] == p])
    assert np.all(covered == 1)


def test_quality_against_numpy_and_ldg_beats_hash(cora, cora3, tmp_path):
    ds = load(cora)
    manifest = json.loads((cora3 / "manifest.json").read_text())
    q = manifest["quality"]
    owner = owners(cora3)
    assert q["edge_cut"] == _cut(ds, owner)
    sizes = np.bincount(owner, minlength=3)
    assert q["node_balance"] == pytest.approx(sizes.max() * 3 / ds.num_nodes)
    assert q["node_balance"] <= 1.05 + 3 / ds.num_nodes
    hashed = partition_dataset(cora, tmp_path / "h", PartitionOptions(3, method="hash", quiet=True))
    assert hashed["quality"]["edge_cut"] == _cut(ds, owners(tmp_path / "h"))
    assert q["edge_cut"] < 0.6 * hashed["quality"]["edge_cut"]
    one_pass = partition_dataset(cora, tmp_path / "one", PartitionOptions(3, passes=1, quiet=True))
    assert one_pass["quality"]["edge_cut"] == _cut(ds, owners(tmp_path / "one"))
    assert q["edge_cut"] < 0.85 * one_pass["quality"]["edge_cut"]  # restreaming improves on one pass


def test_chunking_changes_nothing(synth, tmp_path):
    big = partition_dataset(synth, tmp_path / "big", PartitionOptions(4, quiet=True))
    small = partition_dataset(synth, tmp_path / "small", PartitionOptions(4, quiet=True, chunk_edges=50))
    assert big["partition_id"] == small["partition_id"]
    for p in range(4):
        a, b = (json.loads((tmp_path / f / f"part-{p}" / "meta.json").read_text()) for f in ("big", "small"))
        assert a["files"] == b["files"]  # same arrays, byte for byte (sha256)


def _cli(capsys, *args) -> tuple[int, str]:
    code = main(list(map(str, args)))
    return code, capsys.readouterr().err.strip()


def test_tampered_folders_are_refused_in_one_line(cora, synth, cora3, tmp_path, capsys):
    folder = tmp_path / "c"
    shutil.copytree(cora3, folder)
    assert _cli(capsys, "partition-info", folder) == (0, "")
    other = tmp_path / "other"  # another partitioning of the same dataset
    partition_dataset(cora, other, PartitionOptions(3, method="hash", quiet=True))
    foreign = tmp_path / "foreign"  # a partitioning of another dataset
    partition_dataset(synth, foreign, PartitionOptions(3, quiet=True))
    cases = {
        "missing": (lambda f: shutil.rmtree(f / "part-1"), "part-1: missing"),
        "extra": (lambda f: shutil.copytree(f / "part-0", f / "part-3"), "part-3: is not a part of this partitioning"),
        "other partitioning": (lambda f: (shutil.rmtree(f / "part-2"), shutil.copytree(other / "part-2", f / "part-2")),
                               "part-2: is part 2 of partitioning"),
        "other dataset": (lambda f: (shutil.rmtree(f / "part-0"), shutil.copytree(foreign / "part-0", f / "part-0")),
                          "part-0: is a part of another dataset"),
        "edited manifest": (lambda f: (f / "manifest.json").write_text(
            (f / "manifest.json").read_text().replace('"num_parts": 3', '"num_parts": 2')), "checksum does not match"),
    }
    for name, (damage, message) in cases.items():
        shutil.rmtree(folder)
        shutil.copytree(cora3, folder)
        damage(folder)
        code, err = _cli(capsys, "partition-info", folder)
        assert code == 1 and message in err and err.count("\n") == 0, name
        with pytest.raises(DatasetError, match=message.split(": ")[-1]):
            load_partition(folder, 0)


def test_writes_are_atomic_and_refuse_to_overwrite(cora, cora3, tmp_path, capsys):
    code, err = _cli(capsys, "partition", load(cora).path, "--parts", 3, "--out", cora3, "--quiet")
    assert code == 1 and "already exists" in err
    out = tmp_path / "p"
    assert _cli(capsys, "partition", cora, "--parts", 2, "--out", out, "--quiet")[0] == 0
    assert _cli(capsys, "partition", cora, "--parts", 3, "--out", out, "--quiet", "--overwrite")[0] == 0
    assert json.loads((out / "manifest.json").read_text())["num_parts"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # no temp folder left behind
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "owner.npy", "part-0", "part-1", "part-2"]
    with pytest.raises(DatasetError, match="rank 3 has none"):
        load_partition(out, 3)


def test_typed_datasets_are_partitioned_by_the_cli(tmp_path, capsys):
    """(The parts against the whole graph: tests/test_partitioned_typed.py.)"""
    typed = tmp_path / "typed"
    synthesize(typed, typed=True, scale=0.0005, feature_dim=4, num_classes=3, quiet=True)
    code, _ = _cli(capsys, "partition", typed, "--parts", 2, "--out", tmp_path / "p", "--quiet")
    assert code == 0
    code = main(["partition-info", str(tmp_path / "p")])
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert list(manifest["dataset"]["node_types"]) == ["paper", "author", "institution", "field_of_study"]
    assert sum(p["types"]["author"]["num_owned"] for p in manifest["parts"]) == manifest["dataset"]["node_types"][
        "author"]
    assert code == 0 and "node balance by type: paper" in out and "author:" in out


def test_more_parts_than_some_can_fill(tmp_path):
    """Parts with no nodes or no edges are folders like the others."""
    synthesize(tmp_path / "tiny", 50, 200, feature_dim=2, num_classes=2, seed=1, quiet=True)
    manifest = partition_dataset(tmp_path / "tiny", tmp_path / "p", PartitionOptions(60, quiet=True))
    assert sum(p["num_owned"] for p in manifest["parts"]) == 50
    assert min(p["num_owned"] for p in manifest["parts"]) == 0
    for rank in range(60):
        part = load_partition(tmp_path / "p", rank, verify=True)
        assert part.features.shape == (part.num_owned, 2)


def test_a_killed_run_leaves_nothing_behind(cora, tmp_path):
    """A dead writer's temp folder is removed by the next run; a folder it had moved aside comes back."""
    dead = 2**22 + 12345  # above the default pid_max: no such process
    (tmp_path / f".p.tmp-{dead}-abcd").mkdir()
    partition_dataset(cora, tmp_path / "q", PartitionOptions(2, quiet=True))
    (tmp_path / "q").rename(tmp_path / f".p.old-{dead}-abcd")  # killed between its two renames
    with pytest.raises(OutputExistsError, match="pass --overwrite"):  # the folder moved aside is back at p
        partition_dataset(cora, tmp_path / "p", PartitionOptions(3, quiet=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    assert load_partition(tmp_path / "p", 1).num_parts == 2


@pytest.mark.parametrize("damage, message", [
    (lambda d: _edit(d / "indices.npy", lambda a: a.__setitem__(5, 10**6)),
     "entry 5 is node 1000000, which must be in [0, 50)"),
    (lambda d: _edit(d / "indices.npy", lambda a: a.__setitem__(7, -3)), "entry 7 is node -3"),
    (lambda d: _edit(d / "indptr.npy", lambda a: a.__setitem__(10, a[10] + 10**5)),
     "column pointers must not decrease"),
], ids=["id above", "negative id", "offsets"])
def test_a_dataset_edited_in_place_is_refused_in_one_line_not_a_crash(tmp_path, capsys, damage, message):
    """The kernels index by the CSC unchecked: an id out of range was a segfault (exit 139) and a left temp folder."""
    synthesize(tmp_path / "g", 50, 200, feature_dim=2, num_classes=2, seed=1, quiet=True)
    damage(tmp_path / "g")
    code, err = _cli(capsys, "partition", tmp_path / "g", "--parts", 2, "--out", tmp_path / "p", "--quiet")
    assert code == 1 and "sha256 does not match meta.json" in err and "\n" not in err  # the source is checked first
    _resign_files(tmp_path / "g")  # as if meta.json were rewritten to match: the structure check still refuses it
    code, err = _cli(capsys, "partition", tmp_path / "g", "--parts", 2, "--out", tmp_path / "p", "--quiet")
    assert code == 1 and message in err and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]


def _resign_files(folder: Path) -> None:
    """Rewrite meta.json's sha256 of every file to match the file as it is now."""
    meta = json.loads((folder / "meta.json").read_text())
    for name, entry in meta["files"].items():
        entry["sha256"] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "meta.json").write_text(json.dumps(meta))


def _edit(path: Path, change) -> None:
    array = np.load(path)
    change(array)
    np.save(path, array)


def test_out_inside_or_holding_the_dataset_is_refused(cora3, tmp_path, capsys):
    synthesize(tmp_path / "g", 50, 200, feature_dim=2, num_classes=2, seed=1, quiet=True)
    before = sorted(p.name for p in (tmp_path / "g").iterdir())
    for out, where in ((tmp_path / "g", "is in the dataset"), (tmp_path / "g" / "sub", "is in the dataset")):
        code, err = _cli(capsys, "partition", tmp_path / "g", "--parts", 2, "--out", out, "--quiet")
        assert code == 1 and where in err, out
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == before
    copy = tmp_path / "c3"
    shutil.copytree(cora3, copy)  # a part is a dataset: partitioning it over its own folder would delete it
    code, err = _cli(capsys, "partition", copy / "part-0", "--parts", 2, "--out", copy, "--overwrite", "--quiet")
    assert code == 1 and "holds the part" in err and (copy / "part-0" / "meta.json").is_file()


def test_options_take_numpy_integers_and_refuse_other_types_in_one_line(cora3):
    opts = PartitionOptions(np.int64(2), passes=np.int32(3), imbalance=np.float32(0.5))
    assert (opts.parts, opts.passes, opts.imbalance, opts.seed) == (2, 3, 0.5, None) and type(opts.parts) is int
    assert PartitionOptions(2, method="hash", seed=np.uint8(4)).seed == 4
    for kwargs, message in (({"parts": 2.0}, "--parts 2.0"), ({"parts": True}, "--parts True"),
                            ({"imbalance": "0.1"}, "--imbalance '0.1'"),
                            ({"imbalance": float("nan")}, "--imbalance nan"),
                            ({"seed": 2**64}, "--seed 18446744073709551616"), ({"seed": "1"}, "--seed '1'"),
                            ({"chunk_edges": 0}, "chunk_edges=0"), ({"quiet": "no"}, "quiet='no'")):
        with pytest.raises(DatasetError, match=re.escape(message)):
            PartitionOptions(**({"parts": 2} | kwargs))
    assert load_partition(cora3, np.int64(1)).rank == 1
    for rank in (True, 1.0, "1"):
        with pytest.raises(DatasetError, match="give the rank as an integer"):
            load_partition(cora3, rank)


def _resign(folder: Path, edit) -> None:
    """Edit the manifest and write its checksum anew, as a script would: the checksum alone cannot refuse it."""
    from sparsetrain.partition.manifest import digest

    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("checksum")
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest | {"checksum": digest(manifest)}))


def test_a_folder_of_the_old_layout_is_refused_in_one_line(cora3, tmp_path, capsys):
    """Format 1 wrote a one-type graph's parts without types (``local_to_global.npy``, ...): such a folder is refused
    by its manifest's version, never read as the layout of 2 (every graph's parts by type: ``node._N.*``)."""
    folder = tmp_path / "c"
    shutil.copytree(cora3, folder)
    assert sorted(p.name for p in (folder / "part-0").glob("*.npy") if "." in p.stem) == [
        "edge._N____E____N.col_start.npy", "node._N.halo_owner.npy", "node._N.local_to_global.npy",
        "node._N.owned_features.npy"]
    _resign(folder, lambda m: m.update(format_version=1))
    message = "field 'format_version' is 1 but this sparsetrain reads 2; re-run `sparsetrain partition`"
    code, err = _cli(capsys, "partition-info", folder)
    assert code == 1 and message in err and "\n" not in err
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_partition(folder, 0)


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "part-0" / "meta.json").write_text("{not json"), "part-0/meta.json: not a part's meta.json"),
    (lambda f: (f / "part-0" / "meta.json").write_text("[1, 2]"), "part-0/meta.json: not a part's meta.json"),
    (lambda f: (f / "owner.npy").unlink(), "owner.npy: missing"),
    (lambda f: _resign(f, lambda m: m.update(parts=5)), "field 'parts' is 5, not a list"),
    (lambda f: _resign(f, lambda m: m["parts"][0].pop("meta_sha256")), "field 'parts[0].meta_sha256' is None"),
    (lambda f: _resign(f, lambda m: m["parts"][0].update(folder="../x")), "part 0's folder is '../x', not 'part-0'"),
    (lambda f: _resign(f, lambda m: m.update(num_parts="x")), "field 'num_parts' is 'x', not an integer"),
    (lambda f: _resign(f, lambda m: m.update(num_parts=4)), "field 'num_parts' is 4 but 3 parts are listed"),
    (lambda f: _resign(f, lambda m: m.pop("quality")), "field 'quality' is None, not an object"),
    (lambda f: _resign(f, lambda m: m["parts"].__setitem__(1, [])), "part 1's entry is [], not an object"),
], ids=["meta not json", "meta a list", "owner missing", "parts an int", "part field missing", "folder path",
        "num_parts a string", "num_parts too many", "quality missing", "part entry a list"])
def test_a_damaged_or_resigned_folder_is_one_line_not_a_traceback(cora3, tmp_path, capsys, damage, message):
    folder = tmp_path / "c"
    shutil.copytree(cora3, folder)
    damage(folder)
    code, err = _cli(capsys, "partition-info", folder)
    assert code == 1 and message in err and "\n" not in err
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_partition(folder, 0)


@pytest.mark.parametrize("name, change, message", [
    ("node._N.halo_owner.npy", lambda a: np.full_like(a, 99), "node._N.halo_owner.npy: holds 99, outside [0, 3)"),
    ("node._N.local_to_global.npy", lambda a: a + 10**6, "node._N.local_to_global.npy: holds"),
    ("indices.npy", lambda a: a + 10**5, "indices.npy: holds"),
    ("edge._N____E____N.col_start.npy", lambda a: a - 10**6, "edge._N____E____N.col_start.npy: holds"),
])
def test_a_part_edited_in_place_is_refused_when_loaded(cora3, tmp_path, name, change, message):
    """load_partition read ids it indexes by unchecked: a halo owner of part 99 of 3 loaded as it was."""
    folder = tmp_path / "c"
    shutil.copytree(cora3, folder)
    _edit(folder / "part-1" / name, lambda a: a.__setitem__(slice(None), change(a)))
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_partition(folder, 1)
    assert load_partition(folder, 0).rank == 0  # the other parts still load
