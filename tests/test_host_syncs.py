"""The eager step waits on the host at most once (issue 45 item 1): the block CSRs are built from what the sampler
knows, the finite check and the loss are read late, and what is left is the GPU sampler's one read of its record a
batch. Counted over a real ``train()`` on a CPU, with the device code paths taken and a device that lags the host
(:mod:`tests.host_syncs`), and on a GPU with ``torch.cuda.set_sync_debug_mode``."""

import warnings

import pytest
import torch

import sparsetrain.engine.run as run_module
import sparsetrain.nn.models as models
from sparsetrain.engine.late_loss import LossRing
from sparsetrain.engine.loader import Loader
from sparsetrain.engine.run import train
from sparsetrain.engine.settings import TrainSettings
from sparsetrain.engine.stages.fetch import LateFinite
from sparsetrain.engine.trainer import Trainer
from sparsetrain.sampling import NeighborSampler
from sparsetrain.sampling.minibatch import BlockSize
from tests.host_syncs import HostSyncs
from tests.test_late_loss import Device

STEPS = 12
# the late-read rings read host memory their copies reached; the sampler runs on the host here (on a GPU it makes one
# read a batch, its record, counted by its own counts); a store in host memory reads its ids on the host (on a GPU
# it checks them on the device); the CPU's hash dropout draws its seed from the host generator (a GPU runs F.dropout)
EXEMPT = ("sparsetrain/sampling/", "sparsetrain/_late_reads.py", "sparsetrain/storage/base.py",
          "sparsetrain/storage/tensor.py", "sparsetrain/nn/dropout.py",
          "torch/optim/")  # (Adam's step counts live on the host unless captured)


@pytest.fixture(scope="module")
def cora_dir(cora_data, tmp_path_factory):
    import sparsetrain as st

    return str(st.datasets.from_pyg(cora_data, tmp_path_factory.mktemp("cora") / "cora", quiet=True).path)


def _counted_train(monkeypatch, tmp_path, cora_dir, lag, **settings):
    """``train()`` on Cora for ``STEPS`` steps, the loader in line, the late reads behind a device ``lag`` steps
    behind; per step, the would-be host waits of the step and of loading its batch (evaluation left out)."""
    monkeypatch.setattr(run_module, "Loader", lambda *a, **kw: Loader(*a, prefetch=0, **kw))
    fit, per_step = Trainer.fit, []

    def counted_fit(trainer):
        trainer.loss_ring = LossRing(Device(lag))
        fetch = trainer.loader.fetch_stage
        fetch.finite = LateFinite(Device(lag), late=True)
        syncs = HostSyncs(exempt=EXEMPT)
        if trainer.evaluate is not None:
            evaluate = trainer.evaluate
            trainer.evaluate = lambda model: _paused(syncs, evaluate, model)
        save = trainer._save
        trainer._save = lambda: _paused(syncs, save)  # (a checkpoint reads the weights once: not a step's)
        queue = trainer._queue

        def queued(loss, targets):
            before = syncs.count
            queue(loss, targets)
            per_step.append(syncs.count + trainer.loss_ring.step_waits + fetch.finite.waits)
            assert syncs.count == before, dict(syncs.where)  # (queuing reads nothing)

        trainer._queue = queued
        with syncs:
            summary = fit(trainer)
        trainer.syncs = syncs
        _last.syncs = syncs
        return summary

    monkeypatch.setattr(Trainer, "fit", counted_fit)
    summary = train(TrainSettings(data=cora_dir, fanouts=[5, 5], batch_size=64, max_steps=STEPS, quiet=True,
                                  checkpoint_dir=str(tmp_path / "ck"), **settings))
    steps = [b - a for a, b in zip([0, *per_step], per_step)]
    return summary, steps


class _last:
    syncs = None


def _paused(syncs, work, *args):
    with syncs.paused():
        return work(*args)


@pytest.mark.parametrize("lag", [1, 3])
def test_the_eager_step_path_makes_no_host_wait_but_the_samplers(monkeypatch, tmp_path, cora_dir, lag):
    monkeypatch.setattr(models, "_reads_for_free", lambda device: False)  # the GPU's code path, on the CPU
    summary, steps = _counted_train(monkeypatch, tmp_path, cora_dir, lag)
    assert summary["steps"] == STEPS and len(steps) == STEPS
    # model, loss, backward, optimizer, fetch and its check: nothing read back
    assert steps == [0] * STEPS, dict(_last.syncs.where)
    # the GPU sampler's one read of its record a batch is its own count (test_sampling_cuda): <= 1 a step in all


def test_the_host_code_path_is_what_the_count_sees(monkeypatch, tmp_path, cora_dir):
    """The counter is not blind: the CPU's own block CSR (reads the counts' maximum: free in host memory, a wait on
    a GPU) and an immediate finite check show up, per block and per batch."""
    monkeypatch.setattr(run_module, "Loader", lambda *a, **kw: Loader(*a, prefetch=0, **kw))
    _, steps = _counted_train(monkeypatch, tmp_path, cora_dir, lag=1)
    assert all(s >= 2 for s in steps)  # a bincount per block


def test_sampled_blocks_are_marked_sorted_and_their_csr_equals_a_sorted_build():
    g = torch.Generator().manual_seed(0)
    from sparsetrain.sampling import CSCGraph

    graph = CSCGraph.from_edge_index(torch.randint(0, 200, (2, 2000), generator=g), 200)
    for kw in ({}, {"hop_nodes": "new"}, {"disjoint": True}, {"replace": True}):
        mb = NeighborSampler(graph, [5, 3], seed=0, **kw).sample(torch.arange(0, 40, 3))
        for edge_index, size in mb.to_pyg():
            assert isinstance(size, BlockSize) and tuple(size) == (size[0], size[1])
            dst = edge_index[1]
            assert bool((dst[1:] >= dst[:-1]).all())  # what the mark promises
            expected = models.block_adj_t(edge_index, size[0], size[1])  # (the host's build, the order checked)
            for free in (True, False):  # the host's build and the device's (searchsorted) give the same CSR
                models._reads_for_free, keep = (lambda device, f=free: f), models._reads_for_free
                try:
                    got = models.block_adj_t(edge_index, *size, dst_sorted=True)
                    unsorted = models.block_adj_t(edge_index[:, torch.randperm(dst.numel(), generator=g)], *size)
                finally:
                    models._reads_for_free = keep
                assert torch.equal(got.crow_indices(), expected.crow_indices())
                assert torch.equal(got.col_indices(), expected.col_indices())
                assert torch.equal(unsorted.to_dense(), expected.to_dense())
    flat = NeighborSampler(graph, [5, 3], seed=0, subgraph_type="induced").sample(torch.arange(5))
    assert not any(isinstance(size, BlockSize) for _, size in flat.to_pyg())  # (not promised there)


@pytest.mark.gpu
def test_the_eager_step_on_a_gpu_waits_at_most_once(monkeypatch, tmp_path, cora_dir):
    """The device's own count: ``set_sync_debug_mode("warn")`` warns at each synchronizing call, in any thread (the
    loader's too); per step, after the first epoch (kernels compiled, buffers made), evaluation and checkpoints left
    out: at most one a step on average (the GPU sampler's read of its record)."""
    import threading

    steps, paused, lock = [], [0], threading.Lock()
    seen = {"count": 0, "where": []}
    show = warnings.showwarning

    def counted(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message) and not paused[0]:
            with lock:
                seen["count"] += 1
                seen["where"].append(f"{filename}:{lineno}")
        elif "synchroniz" not in str(message):
            show(message, category, filename, lineno, file, line)

    fit = Trainer.fit

    def counted_fit(trainer):
        for name in ("_save", "evaluate"):
            work = getattr(trainer, name)
            if work is not None:
                setattr(trainer, name, lambda *a, work=work: _paused_flag(paused, work, *a))
        queue = trainer._queue

        def queued(loss, targets):
            queue(loss, targets)
            steps.append(seen["count"])

        trainer._queue = queued
        return fit(trainer)

    monkeypatch.setattr(Trainer, "fit", counted_fit)
    monkeypatch.setattr(warnings, "showwarning", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = counted
        torch.cuda.set_sync_debug_mode("warn")
        try:
            summary = train(TrainSettings(data=cora_dir, fanouts=[5, 5], batch_size=16, max_steps=27, quiet=True,
                                          device="cuda", eval="sampled", checkpoint_dir=str(tmp_path / "ck")))
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert summary["steps"] == 27
    later = [b - a for a, b in zip(steps[8:], steps[9:])]  # the steps after the first epoch (9 steps)
    assert sum(later) <= len(later), (later, seen["where"][-20:])


def _paused_flag(paused, work, *args):
    paused[0] += 1
    try:
        return work(*args)
    finally:
        paused[0] -= 1
