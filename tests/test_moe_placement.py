"""Load-aware expert placement and the sharded modes' single-process behaviour and errors."""

import pytest
import torch

from sparsetrain.collective import RowPlacement
from sparsetrain.errors import CheckpointError, SettingError
from sparsetrain.moe import FSSDP, ExpertParallel, MoE, shard_experts, sharded_parameter_names
from sparsetrain.moe.placement import LoadWindow, balanced_owners, hot_replicas, plan_placement


def brute_force_best_max_load(load, world):
    """Smallest possible max per-rank load with equal row counts (exhaustive, tiny inputs)."""
    import itertools

    n = len(load)
    base, extra = divmod(n, world)
    room = [base + (1 if r < extra else 0) for r in range(world)]
    best = None
    for assign in itertools.product(range(world), repeat=n):
        if [assign.count(r) for r in range(world)] != room:
            continue
        totals = [sum(load[e] for e in range(n) if assign[e] == r) for r in range(world)]
        best = max(totals) if best is None else min(best, max(totals))
    return best


@pytest.mark.parametrize("seed", range(4))
def test_balanced_owners_equal_rows_and_near_optimal_load(seed):
    g = torch.Generator().manual_seed(seed)
    load = (torch.rand(7, generator=g) ** 3 * 100).long()
    owner = balanced_owners(load, 3)
    assert sorted(torch.bincount(owner, minlength=3).tolist()) == [2, 2, 3]
    totals = torch.zeros(3, dtype=torch.int64).index_add_(0, owner, load)
    best = brute_force_best_max_load(load.tolist(), 3)
    assert int(totals.max()) <= best + int(load.max())  # greedy LPT bound: within one item of optimal
    assert torch.equal(owner, balanced_owners(load, 3))  # deterministic


def test_hot_replicas_respect_the_cap_and_skip_the_owner():
    load = torch.tensor([100, 1, 1, 1, 50, 1, 1, 1])
    owner = balanced_owners(load, 4)
    reps = hot_replicas(load, owner, 4, max_rows_per_rank=1, hot_factor=2.0)
    assert sorted(reps[0]) == sorted(r for r in range(4) if r != int(owner[0]))  # hottest first, everywhere
    # expert 4 is hot too, but the only rank with a free replica row is expert 0's owner
    assert reps.get(4, []) == ([int(owner[0])] if int(owner[4]) != int(owner[0]) else [])
    per_rank = [sum(r in ranks for ranks in reps.values()) for r in range(4)]
    assert max(per_rank) <= 1
    reps2 = hot_replicas(load, owner, 4, max_rows_per_rank=2, hot_factor=2.0)
    assert set(reps2) == {0, 4}
    assert int(owner[4]) not in reps2[4]
    assert hot_replicas(load, owner, 4, max_rows_per_rank=0) == {}
    assert hot_replicas(torch.ones(8, dtype=torch.int64), owner, 4, max_rows_per_rank=3) == {}  # nothing is hot


def test_plan_placement_is_a_valid_row_placement():
    load = torch.tensor([0, 900, 5, 5, 5, 5, 80, 0])
    p = plan_placement(load, 2, max_replica_rows=1, hot_factor=2.0)
    assert isinstance(p, RowPlacement) and p.num_rows == 8 and p.world_size == 2
    assert p.num_owned(0) == p.num_owned(1) == 4
    assert p.has_replicas and set(p.replicas) == {1}
    ids = torch.arange(8)
    for r in range(2):
        assert torch.equal(
            torch.sort(torch.cat([p.owned_ids(r), p.replica_ids(r)])).values, torch.sort(p.local_ids(r)).values
        )
    # the two heaviest experts land on different ranks
    assert int(p.owner(ids)[1]) != int(p.owner(ids)[6])


def test_load_window_keeps_the_last_steps():
    w = LoadWindow(3, window=2)
    for c in ([1, 0, 0], [0, 2, 0], [0, 0, 4]):
        w.add(torch.tensor(c))
    assert w.load().tolist() == [0, 2, 4] and w.steps_seen == 3


def test_sharded_layers_in_one_process_equal_the_plain_layer():
    torch.manual_seed(0)
    ref = MoE(8, 12, 6, top_k=2).double()
    x = torch.randn(10, 8, dtype=torch.float64)
    for make in (FSSDP, lambda: FSSDP(rematerialize=True), ExpertParallel):
        torch.manual_seed(0)
        moe = MoE(8, 12, 6, top_k=2, sharding=make()).double()
        torch.testing.assert_close(moe(x)[0], ref(x)[0], atol=0, rtol=0)
        assert sharded_parameter_names(moe) == ["experts.shard"]


def test_sharding_configuration_errors():
    with pytest.raises(SettingError, match="world size 4 but the process group has 1"):
        MoE(8, 12, 6, sharding=FSSDP(placement=RowPlacement.contiguous(6, 4)))
    with pytest.raises(SettingError, match="placement has 5 rows but the layer has 6 experts"):
        MoE(8, 12, 6, sharding=FSSDP(placement=RowPlacement.contiguous(5, 1)))
    with pytest.raises(SettingError, match="window"):
        FSSDP(window=0)
    with pytest.raises(SettingError, match="replica_memory_bytes"):
        FSSDP(replica_memory_bytes=-1)


def test_checkpoint_shape_mismatch_is_reported():
    torch.manual_seed(0)
    small = MoE(8, 12, 6, top_k=2)
    big = MoE(8, 16, 6, top_k=2, sharding=FSSDP())
    with pytest.raises(RuntimeError, match="do not match the layer"):
        big.load_state_dict(small.state_dict())


def test_optimizer_state_moves_between_modes_in_one_process():
    from sparsetrain.moe import load_optimizer_state_dict, optimizer_state_dict

    x = torch.randn(12, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def step(moe, opt):
        y, aux = moe(x)
        (y.square().sum() + aux.loss).backward()
        opt.step()
        opt.zero_grad()

    torch.manual_seed(0)
    ref = MoE(8, 12, 6, top_k=2, shared_experts=1).double()
    opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    step(ref, opt)
    saved_model = {k: v.clone() for k, v in ref.state_dict().items()}
    saved_opt = optimizer_state_dict(ref, opt)
    assert saved_opt["experts.w_in"]["exp_avg"].shape == (6, 8, 24)
    step(ref, opt)
    want = ref(x)[0]
    for make in (lambda: None, FSSDP, ExpertParallel):
        torch.manual_seed(3)
        moe = MoE(8, 12, 6, top_k=2, shared_experts=1, sharding=make()).double()
        moe.load_state_dict(saved_model)
        opt2 = torch.optim.Adam(moe.parameters(), lr=0.05)
        load_optimizer_state_dict(moe, opt2, saved_opt)
        # a round trip through this layout gives back the same tables
        again = optimizer_state_dict(moe, opt2)
        for name, st in saved_opt.items():
            for k, v in st.items():
                torch.testing.assert_close(again[name][k], v, atol=0, rtol=0)
        step(moe, opt2)
        torch.testing.assert_close(moe(x)[0], want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("make", [FSSDP, ExpertParallel])
def test_shard_experts_from_outside_is_the_constructors_sharding_and_keeps_trained_weights(make):
    torch.manual_seed(0)
    built = MoE(8, 12, 4, shared_experts=1, sharding=make())
    torch.manual_seed(0)
    model = torch.nn.Sequential(MoE(8, 12, 4, shared_experts=1), torch.nn.Linear(8, 8))
    assert shard_experts(model, make()) is model
    layer = model[0]
    assert [n for n, _ in built.named_parameters()] == [n for n, _ in layer.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(built.parameters(), layer.parameters()))
    assert sharded_parameter_names(model) == ["0.experts.shard"]
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(1))
    trained = MoE(8, 12, 4)
    with torch.no_grad():
        trained.experts.w_out.mul_(3.0)  # weights changed since the layer was built: sharding keeps them
    before = trained(x)[0]
    shard_experts(trained, make())
    assert torch.allclose(trained(x)[0], before, atol=1e-6)
    with pytest.raises(CheckpointError, match="already sharded"):
        shard_experts(trained, make())


def test_shard_experts_refuses_a_model_without_moe_layers():
    dense = torch.nn.Sequential(torch.nn.Linear(8, 8))
    with pytest.raises(SettingError, match=r"^shard_experts: no sparsetrain MoE layer in Sequential; .*replace_moe"):
        shard_experts(dense, FSSDP())


@pytest.mark.parametrize("make", [FSSDP, ExpertParallel])
def test_shard_experts_over_a_partly_sharded_model_changes_nothing(make):
    torch.manual_seed(0)
    model = torch.nn.Sequential(MoE(8, 12, 4), MoE(8, 12, 4, sharding=make()))
    plain = model[0].experts
    with pytest.raises(CheckpointError, match=r"layer '1' are already sharded .*nothing was changed"):
        shard_experts(model, ExpertParallel())
    assert model[0].experts is plain  # layer 0 was not converted before layer 1 refused


def test_shard_experts_builds_every_shard_before_changing_a_layer():
    class FailsOnSecond:
        """A sharding whose second build fails (as ExpertParallel does when a layer has fewer experts than ranks)."""

        def __init__(self):
            self.built = 0

        def build(self, shape, num_experts, seed):
            self.built += 1
            if self.built == 2:
                raise SettingError("cannot place this layer")
            return ExpertParallel().build(shape, num_experts, seed)

    torch.manual_seed(0)
    model = torch.nn.Sequential(MoE(8, 12, 4), MoE(8, 12, 2))
    before = [m.experts for m in model]
    with pytest.raises(SettingError, match="cannot place this layer"):
        shard_experts(model, FailsOnSecond())
    assert [m.experts for m in model] == before


@pytest.mark.parametrize("bad", [FSSDP, "fssdp", None])
def test_shard_experts_refuses_what_is_not_a_sharding_before_changing_anything(bad):
    model = torch.nn.Sequential(MoE(8, 12, 4))
    plain = model[0].experts
    with pytest.raises(SettingError, match=r"is not a sharding; pass an instance such as FSSDP\(\)"):
        shard_experts(model, bad)
    assert model[0].experts is plain
