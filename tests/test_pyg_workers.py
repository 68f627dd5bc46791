"""``num_workers > 0`` in sparsetrain.pyg's loaders: sampling threads that give the batches of ``num_workers=0``.

The reference is the same loader with ``num_workers=0`` (itself checked against PyG in test_pyg_dropin.py); the
script test runs a PyG-style script without a ``__main__`` guard as ``python script.py``, as PyG's examples are.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numba
import pytest
import torch
from torch_geometric.data import Data, HeteroData

import sparsetrain.pyg as stp
from sparsetrain.pyg.workers import FORK_SAFE_LAYERS

REPO = Path(__file__).resolve().parents[1]
N = 600


def _data() -> Data:
    g = torch.Generator().manual_seed(0)
    return Data(x=torch.randn(N, 4, generator=g), y=torch.randint(0, 3, (N,), generator=g),
                edge_index=torch.randint(0, N, (2, 6000), generator=g), num_nodes=N)


def _hetero() -> HeteroData:
    g = torch.Generator().manual_seed(1)
    data = HeteroData()
    data["paper"].x, data["author"].x = torch.randn(300, 4, generator=g), torch.randn(200, 4, generator=g)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, 300, (2, 2000), generator=g)
    data["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 200, (1500,), generator=g),
                                                                torch.randint(0, 300, (1500,), generator=g)])
    data["paper", "rev_writes", "author"].edge_index = data["author", "writes", "paper"].edge_index.flip(0)
    return data


def _fields(batch) -> list[torch.Tensor]:
    if isinstance(batch, HeteroData):
        return [store[key] for store in batch.stores for key in ("n_id", "e_id", "x", "edge_index") if key in store]
    keys = ("n_id", "e_id", "x", "edge_index", "edge_label_index", "edge_label", "input_id")
    return [batch[k] for k in keys if k in batch]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(torch.equal(s, t) for s, t in zip(x, y))
                                    for x, y in zip(map(_fields, a), map(_fields, b)))


def _worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sparsetrain-pyg-worker")]


def _no_worker_threads_within(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _worker_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _worker_threads()


LOADERS = {
    "node": lambda w, **kw: stp.NeighborLoader(_data(), [5, 3], batch_size=64, shuffle=True, seed=3, num_workers=w,
                                               **kw),
    "node_filter_in_main": lambda w, **kw: stp.NeighborLoader(_data(), [5, 3], batch_size=64, seed=3, num_workers=w,
                                                              filter_per_worker=False, **kw),
    "link": lambda w, **kw: stp.LinkNeighborLoader(_data(), [4, 2], edge_label_index=_data().edge_index[:, :500],
                                                   neg_sampling="binary", batch_size=50, seed=3, num_workers=w, **kw),
    "hetero": lambda w, **kw: stp.NeighborLoader(_hetero(), [4, 2], input_nodes=("paper", torch.arange(300)),
                                                 batch_size=40, seed=3, num_workers=w, **kw),
}


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("persistent", [False, True])
def test_sampling_threads_give_the_batches_of_num_workers_0(kind, persistent):
    torch.manual_seed(0)  # the shuffle of both loaders
    main = LOADERS[kind](0)
    main_epochs = [list(main), list(main)]
    torch.manual_seed(0)
    threaded = LOADERS[kind](3, persistent_workers=persistent, prefetch_factor=1)
    assert threaded.sampling_threads and threaded.num_workers == 3
    epochs = [list(threaded), list(threaded)]
    assert len(main_epochs[0]) == len(threaded) > 3
    assert _same(main_epochs[0], epochs[0]) and _same(main_epochs[1], epochs[1])
    assert not _same(epochs[0], epochs[1])  # each epoch its own shuffle and random keys
    assert _no_worker_threads_within(5.0)


@pytest.mark.parametrize("kind", ["node", "link"])
def test_an_epoch_left_early_does_not_shift_the_next_epoch_s_batches(kind):
    def second_epoch(workers: int, abandon: bool, **kw) -> list[torch.Tensor]:
        torch.manual_seed(0)  # the shuffles
        loader = LOADERS[kind](workers, **kw)
        if abandon:  # three batches, then out of the loop (num_workers=2 has prefetched more by then)
            for i, _ in enumerate(loader):
                if i == 2:
                    break
        else:
            list(loader)
        return [batch.n_id for batch in loader]

    reference = second_epoch(0, abandon=False)
    assert len(reference) > 6
    for workers in (0, 2):
        for abandon in (True, False):
            got = second_epoch(workers, abandon)
            assert len(got) == len(reference) and all(map(torch.equal, got, reference)), (workers, abandon)
    kept = second_epoch(2, abandon=True, persistent_workers=True)  # the same threads' iterator, reset
    assert len(kept) == len(reference) and all(map(torch.equal, kept, reference))


def test_an_index_sampler_without_a_length_gives_the_batches_of_num_workers_0():
    class Unsized(torch.utils.data.Sampler):
        def __iter__(self):
            return iter(range(0, N, 3))

    def two_epochs(workers: int) -> list[torch.Tensor]:
        loader = stp.NeighborLoader(_data(), [5, 3], batch_size=32, sampler=Unsized(), seed=3, num_workers=workers)
        return [b.n_id for _ in range(2) for b in loader]

    main, threaded = two_epochs(0), two_epochs(2)
    assert len(main) == 14 and all(map(torch.equal, main, threaded))
    assert not torch.equal(main[0], main[7])  # epoch 2: the same seeds, the keys after epoch 1's


def test_a_failure_in_a_sampling_thread_is_raised_in_the_loop_and_the_threads_end():
    def transform(batch):
        if batch.input_id[0] >= 128:
            raise ValueError("bad batch")
        return batch

    loader = stp.NeighborLoader(_data(), [5], batch_size=64, seed=0, num_workers=2, transform=transform)
    seen = []
    with pytest.raises(ValueError, match="bad batch"):
        for batch in loader:
            seen.append(batch)
    assert len(seen) == 2 and _no_worker_threads_within(5.0)


def test_leaving_the_loop_early_ends_the_threads():
    loader = stp.NeighborLoader(_data(), [5, 3], batch_size=16, seed=0, num_workers=2)
    it = iter(loader)
    next(it)
    del it
    assert _no_worker_threads_within(5.0)


def test_timeout_bounds_the_wait_for_a_batch():
    def slow(batch):
        time.sleep(2.0)
        return batch

    loader = stp.NeighborLoader(_data(), [5], batch_size=300, seed=0, num_workers=1, transform=slow, timeout=0.2)
    with pytest.raises(RuntimeError, match="timed out after 0.2 seconds"):
        next(iter(loader))


def test_worker_init_fn_runs_once_per_thread():
    ids = []
    loader = stp.NeighborLoader(_data(), [5], batch_size=20, seed=0, num_workers=2, worker_init_fn=ids.append)
    assert len(list(loader)) == 30
    assert sorted(ids) == [0, 1]


@pytest.mark.skipif(numba.config.THREADING_LAYER in FORK_SAFE_LAYERS, reason="a fork-safe Numba layer was chosen")
def test_fork_is_refused_on_numba_s_openmp_layer():
    with pytest.raises(stp.SettingError, match="multiprocessing_context='fork'.*leave multiprocessing_context unset"):
        stp.NeighborLoader(_data(), [5], batch_size=20, num_workers=2, multiprocessing_context="fork")


UNGUARDED = """
import hashlib, time
import torch
from torch_geometric.data import Data
from sparsetrain.pyg import LinkNeighborLoader, NeighborLoader
from sparsetrain.engine import Loader
from sparsetrain.sampling import CSCGraph, NeighborSampler

g = torch.Generator().manual_seed(0)
data = Data(x=torch.randn(3000, 8, generator=g), y=torch.randint(0, 4, (3000,), generator=g),
            edge_index=torch.randint(0, 3000, (2, 30000), generator=g), num_nodes=3000)


def digest(loader, fields):
    h = hashlib.sha256()
    for batch in loader:
        for f in fields:
            h.update(getattr(batch, f).numpy().tobytes())
    return h.hexdigest()


for workers in (0, 2):
    start = time.perf_counter()
    node = NeighborLoader(data, num_neighbors=[10, 5], batch_size=256, shuffle=True, num_workers=workers, seed=1)
    link = LinkNeighborLoader(data, num_neighbors=[5], edge_label_index=data.edge_index[:, :2000], batch_size=256,
                              neg_sampling="binary", num_workers=workers, seed=1)
    torch.manual_seed(0)
    print("node", workers, digest(node, ["n_id", "e_id", "x"]))
    print("link", workers, digest(link, ["n_id", "e_id", "edge_label_index", "edge_label"]))

engine = Loader(NeighborSampler(CSCGraph.from_edge_index(data.edge_index, 3000), [10, 5], seed=1), data.x, data.y,
                torch.arange(3000), batch_size=256)
twice = [digest(engine, ["input_nodes", "x"]) for _ in range(2)]
print("engine", "repeatable" if twice[0] == twice[1] else "differs")
"""


def test_an_unguarded_script_with_workers_runs_as_python_script(tmp_path):
    script = tmp_path / "train.py"  # no `if __name__ == "__main__":`, as PyG's example scripts
    script.write_text(textwrap.dedent(UNGUARDED))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr[-3000:]
    for bad in ("bootstrapping", "leaked semaphore", "exited unexpectedly", "Terminating"):
        assert bad not in done.stderr, done.stderr[-3000:]
    lines = dict((tuple(line.split()[:2]), line.split()[-1]) for line in done.stdout.splitlines())
    assert lines["node", "0"] == lines["node", "2"] and lines["link", "0"] == lines["link", "2"], done.stdout
    assert ("engine", "repeatable") in lines, done.stdout
