"""``--overwrite`` killed at every step of its commit: the path always holds the old or the new dataset.

A forked writer replaces dataset A (200 nodes) with dataset B (300 nodes) and SIGKILLs itself just
before its k-th filesystem call inside ``commit`` (rename, replace, unlink, rmdir, fsync, the atomic
swap), for every k. With the atomic swap the path must load (checksums verified) right after the
kill; without it (a filesystem that cannot swap) the next writer for the path must restore the old
dataset. Either way the next writer leaves nothing beside the path.
"""

import os
import shutil
import signal

import numpy as np
import pytest

import sparsetrain as st
from sparsetrain.datasets import format as fmt
from sparsetrain.datasets import writer as writer_mod

CALLS = ("rename", "replace", "unlink", "rmdir", "fsync")
A_NODES, B_NODES = 200, 300


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    for name, nodes, seed in (("a", A_NODES, 0), ("b", B_NODES, 1)):
        st.datasets.synthesize(root / name, nodes, 4 * nodes, feature_dim=4, num_classes=3, seed=seed, quiet=True)
    return root / "a", root / "b"


def _replace_killed_at(step: int, src, out, swap: bool) -> int | None:
    """Fork a writer that replaces ``out`` with a copy of ``src`` and kills itself (SIGKILL) right before its
    ``step``-th filesystem call in ``commit``; the number of calls commit made when it was not killed, else None."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer: no torch, only numpy and file calls
        try:
            os.close(read_end)
            meta = fmt.read_meta(src)
            writer = writer_mod.DatasetWriter(out, overwrite=True)
            for name in meta["files"]:
                writer.save_array(name, np.load(src / name, allow_pickle=False))
            calls = 0

            def counted(fn):
                def call(*args, **kwargs):
                    nonlocal calls
                    calls += 1
                    if calls == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*args, **kwargs)
                return call

            for name in CALLS:
                setattr(os, name, counted(getattr(os, name)))
            writer_mod._exchange = counted(writer_mod._exchange if swap else lambda a, b: False)
            writer.commit(
                {k: v for k, v in meta.items() if k not in ("format", "format_version", "created_by", "files")}
            )
            os.write(write_end, str(calls).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end) as f:
        reported = f.read()
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return None
    assert os.WEXITSTATUS(status) == 0 and reported, "the writer failed without being killed"
    return int(reported)


def _nodes(path) -> int:
    return st.datasets.load(path, verify=True).num_nodes


@pytest.mark.parametrize("swap", [True, False], ids=["atomic-swap", "two-renames"])
def test_overwrite_killed_at_every_commit_step_leaves_a_loadable_dataset(sources, tmp_path, swap):
    if swap and not writer_mod._exchange(tmp_path, tmp_path):
        pytest.skip("this filesystem cannot swap two folders atomically")
    a, b = sources
    out = tmp_path / "data"
    shutil.copytree(a, out)
    total = _replace_killed_at(10**9, b, out, swap)
    assert total is not None and total > 5 and _nodes(out) == B_NODES
    seen = set()
    for step in range(1, total + 1):
        shutil.rmtree(out)
        shutil.copytree(a, out)
        assert _replace_killed_at(step, b, out, swap) is None
        if swap:  # never a moment without a dataset at the path
            now = _nodes(out)
        with writer_mod.DatasetWriter(out, overwrite=True):  # the next run: recovers, then (here) stops before writing
            pass
        after = _nodes(out)
        assert after in (A_NODES, B_NODES), step
        if swap:
            assert after == now, step
        seen.add(after)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data"], (
            f"leftovers after the next run (kill at step {step})"
        )
    assert seen == {A_NODES, B_NODES}  # the kills straddled the moment the new dataset took the path


def test_a_dataset_moved_aside_by_a_killed_run_is_restored_not_deleted(sources, tmp_path):
    """The state a kill between the two renames leaves: nothing at the path, the old aside, the new in a temp folder."""
    a, b = sources
    out = tmp_path / "data"
    dead = _dead_pid()
    shutil.copytree(a, tmp_path / f".data.old-{dead}-0000")
    shutil.copytree(b, tmp_path / f".data.tmp-{dead}-0000")
    writer_mod.recover_interrupted(out)
    assert _nodes(out) == A_NODES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_leftovers_of_a_live_writer_are_left_alone(sources, tmp_path):
    a, _ = sources
    shutil.copytree(a, tmp_path / f".data.old-{os.getpid()}-0000")
    writer_mod.recover_interrupted(tmp_path / "data")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".data.old-{os.getpid()}-0000"]


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_overwriting_a_symlinked_dataset_replaces_the_link_and_keeps_its_target(sources, tmp_path):
    a, b = sources
    target = tmp_path / "elsewhere"
    shutil.copytree(a, target)
    (tmp_path / "data").symlink_to(target)
    with writer_mod.DatasetWriter(tmp_path / "data", overwrite=True) as writer:
        meta = fmt.read_meta(b)
        for name in meta["files"]:
            writer.save_array(name, np.load(b / name, allow_pickle=False))
        writer.commit({k: v for k, v in meta.items() if k not in ("format", "format_version", "created_by", "files")})
    assert _nodes(tmp_path / "data") == B_NODES and not (tmp_path / "data").is_symlink()
    assert _nodes(target) == A_NODES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "elsewhere"]


@pytest.mark.parametrize("name", ["d*", "d[1]", "a**b", "d?"])
def test_an_out_named_like_a_pattern_recovers_only_its_own_leftovers(sources, tmp_path, name):
    """Leftovers were found by glob: `--out 'a**b'` was a ValueError traceback and `--out 'd*'` took the folder
    another dataset's killed run had moved aside (`.d1.old-...`) as its own."""
    a, b = sources
    dead = _dead_pid()
    shutil.copytree(a, tmp_path / f".d1.old-{dead}-0000")  # another output's, left by a killed run
    shutil.copytree(b, tmp_path / f".{name}.old-{dead}-0000")  # this output's
    writer_mod.recover_interrupted(tmp_path / name)
    assert _nodes(tmp_path / name) == B_NODES
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, f".d1.old-{dead}-0000"])
    st.datasets.synthesize(tmp_path / name, 30, 120, feature_dim=2, num_classes=2, seed=0, quiet=True, overwrite=True)
    assert st.datasets.load(tmp_path / name).num_nodes == 30
