"""FSSDP composed with the dense model's data parallelism (DDP, FSDP2) and DCP checkpoints across
world sizes (2 -> 1, 1 -> 2, 4 -> 2): float64 losses of the example models (an HF Mixtral through
``replace_moe_blocks``, and TinyLM) equal the single-process, unsharded run's, step by step,
uninterrupted or resumed."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from sparsetrain.errors import CheckpointError
from sparsetrain.moe import FSSDP, DCPState, MoE, dcp_state_dict, load_dcp, load_dcp_state_dict

# DTensor: torch.distributed.tensor, or ._tensor before torch 2.4
from sparsetrain.moe.sharded import DTensor, ShardedExperts
from tests.collective_harness import spawn, values

pytestmark = pytest.mark.distributed

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "moe_lm.py"
STEPS, SAVE_AT = 6, 3
ROW_BYTES = (32 * 128 + 64 * 32) * 8  # one expert of either example model in float64
REBALANCED = {
    "rematerialize": True,
    "replica_memory_bytes": 2 * ROW_BYTES,
    "rebalance_every": 3,
    "window": 3,
    "hot_factor": 1.0,
}


def _example():
    spec = importlib.util.spec_from_file_location("moe_lm_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _train(rank, world, arch, sharding, dp, steps, kwargs=None, resume=None, save=None):
    losses, model = _example().train(sharding, model=arch, dp=dp, steps=steps, dtype=torch.float64, fssdp_kwargs=kwargs,
                                     resume=resume, save=save)  # fmt: skip
    tables = [m for m in model.modules() if isinstance(m, ShardedExperts)]
    return losses, repr(tables[0].placement) if tables else None


@pytest.fixture(scope="module")
def single():
    """The single-process, unsharded runs every other run must reproduce."""
    return {
        arch: _example().train("none", model=arch, steps=STEPS, dtype=torch.float64)[0] for arch in ("mixtral", "tiny")
    }


def _same(losses, want, what):
    torch.testing.assert_close(
        torch.tensor(losses), torch.tensor(want), rtol=1e-9, atol=0, msg=lambda m: f"{what}: {m}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("dp", ["ddp", "fsdp2"])
def test_hf_mixtral_fssdp_with_dense_data_parallel_equals_single_process(dp, single):
    for rank, (losses, _) in enumerate(values(spawn(_train, 2, "mixtral", "fssdp", dp, STEPS))):
        _same(losses, single["mixtral"], f"Mixtral, FSSDP + {dp}, rank {rank}")


@pytest.mark.slow
def test_dcp_saved_at_2_ranks_resumes_in_one_process(tmp_path, single):
    ckpt = str(tmp_path / "ckpt")
    want = single["mixtral"]
    for losses, _ in values(spawn(_train, 2, "mixtral", "fssdp", "fsdp2", SAVE_AT, None, None, ckpt)):
        _same(losses, want[:SAVE_AT], "before the checkpoint")
    # unsharded layer (plain w_in/w_out read whole) and FSSDP at world size 1
    _same(_train(0, 1, "mixtral", "none", "sync", STEPS, resume=ckpt)[0], want[SAVE_AT:], "resumed unsharded")
    _same(
        _train(0, 1, "mixtral", "fssdp", "sync", STEPS, resume=ckpt)[0], want[SAVE_AT:], "resumed FSSDP at world size 1"
    )


@pytest.mark.slow
def test_dcp_saved_in_one_process_resumes_at_2_ranks(tmp_path, single):
    ckpt = str(tmp_path / "ckpt")
    want = single["tiny"]
    _same(_train(0, 1, "tiny", "none", "sync", SAVE_AT, save=ckpt)[0], want[:SAVE_AT], "before the checkpoint")
    for rank, (losses, _) in enumerate(values(spawn(_train, 2, "tiny", "fssdp", "ddp", STEPS, None, ckpt))):
        _same(losses, want[SAVE_AT:], f"resumed at 2 ranks under DDP, rank {rank}")


@pytest.mark.slow
def test_dcp_saved_at_4_ranks_rebalanced_resumes_at_2_ranks(tmp_path, single):
    """Saved from a rebalanced placement with replicas (not DTensor's chunk order), loaded into a contiguous one;
    the 4 ranks check the DTensors DCP sees first."""
    ckpt = str(tmp_path / "ckpt")
    for losses, placement in values(spawn(_save_at_4, 4, ckpt, str(tmp_path / "tables"), timeout_s=400)):
        _same(losses, single["mixtral"][:SAVE_AT], "before the checkpoint")
        assert "replicated_rows" in placement and "contiguous" not in placement, placement
    for rank, (losses, _) in enumerate(values(spawn(_train, 2, "mixtral", "fssdp", "fsdp2", STEPS, None, ckpt))):
        _same(losses, single["mixtral"][SAVE_AT:], f"resumed at 2 ranks under FSDP2, rank {rank}")


D, H, E = 4, 6, 6


def _dtensor_tables(rank, world, path):
    """The DTensors DCP sees hold exactly the full table, in DTensor's own Shard(0) layout (E=6 on 4 ranks:
    2, 2, 2, 0 rows; the FSSDP owners hold 2, 2, 1, 1), and a checkpoint of a mismatched layer fails clearly."""
    torch.manual_seed(3)
    ref = MoE(D, H, E, top_k=2)
    torch.manual_seed(3)
    moe = MoE(D, H, E, top_k=2, sharding=FSSDP())
    w_in, w_out = (dcp_state_dict(moe)["model"][f"experts.{k}"] for k in ("w_in", "w_out"))
    assert isinstance(w_in, DTensor) and w_in.to_local().shape[0] == [2, 2, 2, 0][rank]
    torch.testing.assert_close(w_in.full_tensor(), ref.experts.w_in.detach(), atol=0, rtol=0)
    torch.testing.assert_close(w_out.full_tensor(), ref.experts.w_out.detach(), atol=0, rtol=0)
    opt = torch.optim.Adam(moe.parameters(), lr=0.1)
    y, aux = moe(torch.randn(5, D, generator=torch.Generator().manual_seed(rank)))
    (y.square().sum() + aux.loss).backward()
    opt.step()
    state = dcp_state_dict(moe, opt)
    exp_avg = state["optim"]["state"]["experts.w_out"]["exp_avg"]
    assert isinstance(exp_avg, DTensor) and exp_avg.shape == (E, H, D)
    assert "experts.shard" not in state["optim"]["state"]
    assert ["experts.w_in", "experts.w_out"] == [
        p for p in state["optim"]["param_groups"][0]["params"] if "experts" in p
    ]
    dcp.save({"train": DCPState(moe, opt)}, checkpoint_id=path)
    wider = MoE(D, H + 1, E, top_k=2, sharding=FSSDP())
    # DCP's own check, in one line
    with pytest.raises(CheckpointError, match=r"Size mismatch .*experts\.w_in") as err:
        load_dcp({"train": DCPState(wider)}, checkpoint_id=path)
    assert "\n" not in str(err.value)


def _save_at_4(rank, world, ckpt, tables_ckpt):
    _dtensor_tables(rank, world, tables_ckpt)
    return _train(rank, world, "mixtral", "fssdp", "sync", SAVE_AT, REBALANCED, None, ckpt)


def test_load_dcp_state_dict_needs_model_entry():
    moe = MoE(D, H, E, top_k=2)
    with pytest.raises(CheckpointError, match="no 'model' entry"):
        load_dcp_state_dict(moe, None, {})
