"""The distributed layer's helpers: the differentiable all_to_all (against torch's own autograd
all-to-all), group timeouts (default, environment override, enforced on a library-made group),
the communication device and the rank/world helper."""

from __future__ import annotations

import datetime
import os
import time
import warnings

import pytest
import torch
import torch.distributed as dist

from sparsetrain.collective import all_to_all, comm_device, default_timeout, group_info, new_group
from sparsetrain.errors import InputError
from tests.collective_harness import spawn, values

# SPLITS[src][dst]: rows rank src sends to rank dst (zeros included)
SPLITS = [[2, 0, 3], [1, 4, 0], [0, 2, 2]]


def _rows(rank: int, n: int) -> torch.Tensor:
    return torch.randn(n, 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(rank))


def _a2a_against_torch(rank: int, world: int) -> dict:
    send = SPLITS[rank]
    recv = [SPLITS[src][rank] for src in range(world)]
    weight = torch.randn(sum(recv), 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(100 + rank))
    x = _rows(rank, sum(send)).requires_grad_()
    y = all_to_all(x, send, recv)
    (y * weight).sum().backward()

    import torch.distributed.nn.functional as tdf

    x_ref = _rows(rank, sum(send)).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated on torch 2.13, still the reference
        y_ref = tdf.all_to_all_single(torch.empty_like(y), x_ref, recv, send)
        (y_ref * weight).sum().backward()
    # independent of both: the rows rank src sent here, cut from src's (seeded) input by offset
    expected = torch.cat(
        [_rows(src, sum(SPLITS[src]))[sum(SPLITS[src][:rank]) : sum(SPLITS[src][: rank + 1])] for src in range(world)]
    )
    return {
        "rows": torch.equal(y, expected) and torch.equal(y, y_ref),
        "grad": torch.equal(x.grad, x_ref.grad),
        "device": comm_device(None, torch.device("cpu")) == torch.device("cpu"),
        "info": (group_info().rank, group_info().world_size, group_info().distributed) == (rank, world, True),
    }


@pytest.mark.distributed
def test_all_to_all_matches_torch_autograd_all_to_all_under_gloo():
    for rank, checks in enumerate(values(spawn(_a2a_against_torch, 3, timeout_s=180))):
        assert all(checks.values()), f"rank {rank}: {checks}"


def test_all_to_all_without_a_process_group_returns_its_input_and_checks_splits():
    x = torch.arange(6.0).reshape(3, 2)
    assert all_to_all(x, [3], [3]) is x
    assert group_info() == group_info(None) and (
        group_info().rank,
        group_info().world_size,
        group_info().distributed,
    ) == (0, 1, False)
    with pytest.raises(InputError, match="one split per rank"):
        all_to_all(x, [1, 2], [3])
    with pytest.raises(InputError, match="add up to 2 rows but x has 3"):
        all_to_all(x, [2], [2])


def test_default_timeout_is_30_s_and_the_environment_overrides_it(monkeypatch):
    monkeypatch.delenv("SPARSETRAIN_DIST_TIMEOUT", raising=False)
    assert default_timeout() == datetime.timedelta(seconds=30)
    monkeypatch.setenv("SPARSETRAIN_DIST_TIMEOUT", "7.5")
    assert default_timeout() == datetime.timedelta(seconds=7.5)
    for bad in ("soon", "0", "-3", "inf", "nan"):
        monkeypatch.setenv("SPARSETRAIN_DIST_TIMEOUT", bad)
        with pytest.raises(InputError, match="SPARSETRAIN_DIST_TIMEOUT"):
            default_timeout()


def _absent_peer_on_a_new_group(rank: int, world: int) -> float:
    os.environ["SPARSETRAIN_DIST_TIMEOUT"] = "2"
    group = new_group()  # the world's own group was made with 30 s by the harness
    if rank == 1:
        time.sleep(4.5)  # alive, never joins (past rank 0's 2 s timeout, with room for a slow start)
        return 0.0
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(3), group=group)
    except RuntimeError:
        return time.monotonic() - start
    return -1.0


@pytest.mark.distributed
def test_a_library_group_times_out_after_the_configured_seconds():
    waited = values(spawn(_absent_peer_on_a_new_group, 2, timeout_s=120, teardown=False))[0]
    assert 1.5 <= waited < 6, f"rank 0 waited {waited:.1f} s on a group with a 2 s timeout (torch's default is 30 min)"
