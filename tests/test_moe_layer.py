"""The single-process MoE layer against a naive per-token, per-choice reference (float64)."""

import pytest
import torch

from sparsetrain.errors import InputError, SettingError
from sparsetrain.moe import MoE, grouped
from sparsetrain.moe.grouped import grouped_mm, native_available
from tests.moe_reference import reference_moe

D, H, E = 8, 12, 6


def build(seed=0, **kw):
    torch.manual_seed(seed)
    return MoE(D, H, kw.pop("num_experts", E), **kw).double()


def compare(moe, x, *, atol=1e-10, **ref_kw):
    """Layer vs reference: outputs, aux loss, counts and every gradient."""
    x = x.clone().requires_grad_(True)
    y, aux = moe(x)
    g = torch.randn_like(y)
    ((y * g).sum() + aux.loss).backward()
    params = {n: p for n, p in moe.named_parameters()}
    xr = x.detach().clone().requires_grad_(True)
    leaves = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    shared = (leaves["shared.w_in"], leaves["shared.w_out"]) if moe.shared is not None else None
    bias = moe.router.expert_bias
    yr, aux_r, lb, z, counts, dropped = reference_moe(
        xr, leaves["router.weight"], leaves["experts.w_in"], leaves["experts.w_out"], top_k=moe.top_k,
        score=moe.router.score, renormalize=moe.router.renormalize, bias=bias,
        capacity_factor=moe.capacity_factor, activation=moe.experts.shape.activation, shared=shared, **ref_kw,
    )
    ((yr * g).sum() + aux_r).backward()
    torch.testing.assert_close(y, yr, atol=atol, rtol=0)
    torch.testing.assert_close(aux.loss, aux_r, atol=atol, rtol=0)
    torch.testing.assert_close(aux.load_balancing_loss, lb, atol=atol, rtol=0)
    torch.testing.assert_close(aux.z_loss, z, atol=atol, rtol=0)
    assert aux.counts.tolist() == counts.tolist()
    assert int(aux.dropped) == dropped
    torch.testing.assert_close(x.grad, xr.grad, atol=atol, rtol=0)
    for n, p in params.items():
        torch.testing.assert_close(p.grad, leaves[n].grad, atol=atol, rtol=0, msg=lambda m, n=n: f"{n}: {m}")
    return aux


@pytest.mark.parametrize("top_k", [1, 2, 3, E])
@pytest.mark.parametrize("router", ["softmax", "sigmoid"])
def test_matches_reference_top_k_and_router(top_k, router):
    moe = build(top_k=top_k, router=router)
    compare(moe, torch.randn(3, 7, D, dtype=torch.float64))


@pytest.mark.parametrize("activation", ["swiglu", "gelu", "relu", "silu"])
def test_matches_reference_activations_shared_experts(activation):
    moe = build(top_k=2, activation=activation, shared_experts=2)
    compare(moe, torch.randn(19, D, dtype=torch.float64))


@pytest.mark.parametrize("renormalize", [True, False])
def test_renormalize_option(renormalize):
    moe = build(top_k=2, renormalize=renormalize)
    compare(moe, torch.randn(11, D, dtype=torch.float64))
    torch.manual_seed(1)
    y, _ = moe(torch.randn(5, D, dtype=torch.float64))
    assert y.shape == (5, D)


def steer(moe, favoured, avoided=()):
    """Router weights such that positive inputs always score ``favoured`` experts highest, ``avoided`` lowest."""
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight.add_(torch.randn_like(moe.router.weight) * 1e-3)
        for rank, e in enumerate(favoured):
            moe.router.weight[e] += 5.0 - rank
        for e in avoided:
            moe.router.weight[e] -= 5.0


def test_experts_with_no_tokens_get_exact_zero_gradients():
    moe = build(top_k=2)
    steer(moe, [1, 4], avoided=[0, 2, 3, 5])
    x = torch.rand(13, D, dtype=torch.float64) + 0.1
    aux = compare(moe, x)
    assert aux.counts.tolist() == [0, 13, 0, 0, 13, 0]
    for e in (0, 2, 3, 5):
        assert torch.count_nonzero(moe.experts.w_in.grad[e]) == 0
        assert torch.count_nonzero(moe.experts.w_out.grad[e]) == 0
    assert torch.count_nonzero(moe.experts.w_in.grad[1]) > 0


def test_all_tokens_to_one_expert():
    moe = build(top_k=1)
    steer(moe, [3])
    aux = compare(moe, torch.rand(4, 5, D, dtype=torch.float64) + 0.1)
    assert aux.counts.tolist() == [0, 0, 0, 20, 0, 0]
    # f = one-hot, so the balancing loss is E * mean probability of expert 3
    assert aux.load_balancing_loss.item() > 1.0


@pytest.mark.parametrize("capacity_factor", [0.5, 1.0, 1.25])
def test_capacity_drops_follow_the_documented_policy(capacity_factor):
    moe = build(top_k=2, capacity_factor=capacity_factor)
    steer(moe, [2, 0])  # every token wants experts 2 then 0: heavy overflow
    x = torch.rand(17, D, dtype=torch.float64)
    with torch.no_grad():
        moe.router.weight.add_(torch.randn_like(moe.router.weight) * 2.0)  # some spread
    aux = compare(moe, x)
    assert int(aux.dropped) > 0 or capacity_factor >= 1.25


def test_capacity_large_enough_drops_nothing_and_equals_dropless():
    torch.manual_seed(3)
    x = torch.randn(10, D, dtype=torch.float64)
    a, b = build(top_k=2), build(top_k=2, capacity_factor=float(E))
    ya, _ = a(x)
    yb, auxb = b(x)
    assert int(auxb.dropped) == 0
    torch.testing.assert_close(ya, yb, atol=0, rtol=0)


def test_expert_bias_changes_selection_not_weights_and_updates_outside_autograd():
    moe = build(top_k=1, router="sigmoid", expert_bias=True, bias_update_rate=0.5)
    with torch.no_grad():
        moe.router.expert_bias.copy_(torch.tensor([0, 0, 0, 0, 0, 100.0]))
    x = torch.randn(9, D, dtype=torch.float64)
    aux = compare(moe, x)
    assert aux.counts.tolist() == [0, 0, 0, 0, 0, 9]
    # sigmoid + top-1 + renormalize: weight 1, so y is expert 5's output alone, unscaled by the bias
    moe.train()
    moe.pending_counts.zero_()
    moe(x)
    before = moe.router.expert_bias.clone()
    moe.update_expert_bias()
    mean = 9 / E
    expected = before + 0.5 * torch.sign(torch.full((E,), mean) - torch.tensor([0, 0, 0, 0, 0, 9.0]))
    torch.testing.assert_close(moe.router.expert_bias, expected)
    assert not moe.router.expert_bias.requires_grad
    assert int(moe.pending_counts.sum()) == 0
    with pytest.raises(SettingError, match="expert_bias=True"):
        build(top_k=1).update_expert_bias()


def test_bias_reference_with_softmax_and_top2():
    moe = build(top_k=2, expert_bias=True)
    with torch.no_grad():
        moe.router.expert_bias.copy_(torch.linspace(-0.3, 0.3, E))
    compare(moe, torch.randn(15, D, dtype=torch.float64))


def test_empty_input():
    moe = build(top_k=2)
    x = torch.zeros(0, D, dtype=torch.float64, requires_grad=True)
    y, aux = moe(x)
    (y.sum() + aux.loss).backward()
    assert y.shape == (0, D) and aux.counts.sum() == 0
    assert torch.count_nonzero(moe.experts.w_in.grad) == 0


def test_construction_and_input_errors():
    with pytest.raises(SettingError, match="top_k=7; give an integer from 1 to 6"):
        MoE(D, H, 6, top_k=7)
    with pytest.raises(SettingError, match="top_k=0"):
        MoE(D, H, 6, top_k=0)
    with pytest.raises(SettingError, match="router='tanh'"):
        MoE(D, H, 6, router="tanh")
    with pytest.raises(SettingError, match="activation='gelu2'"):
        MoE(D, H, 6, activation="gelu2")
    with pytest.raises(SettingError, match="capacity_factor"):
        MoE(D, H, 6, capacity_factor=0)
    with pytest.raises(InputError, match="last dimension 5 .* d_model=8"):
        MoE(D, H, 6)(torch.randn(3, 5))
    with pytest.raises(ValueError):  # the errors are ValueErrors too
        MoE(D, H, 2, top_k=3)


def _grouped_loop(x, w, counts):
    out, start = [], 0
    for g, c in enumerate(counts.tolist()):
        out.append(x[start : start + c] @ w[g])
        start += c
    return torch.cat(out)


@pytest.mark.parametrize("backend", ["bucketed", "native", "loop"])
@pytest.mark.parametrize("counts", [[0, 7, 1, 0, 33, 2], [64, 0, 0, 0, 0, 0], [5, 5, 5, 5, 5, 5], [0, 0, 0, 0, 0, 0]])
def test_grouped_mm_backends_match_a_loop(backend, counts):
    dtype = torch.float32 if backend == "native" else torch.float64
    if backend == "native" and not native_available("cpu", dtype):
        pytest.skip("torch._grouped_mm is not available on this torch build")
    counts = torch.tensor(counts)
    n = int(counts.sum())
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, dtype=dtype, generator=gen, requires_grad=True)
    w = torch.randn(len(counts), 16, 8, dtype=dtype, generator=gen, requires_grad=True)
    g = torch.randn(n, 8, dtype=dtype, generator=gen)
    grouped.set_backend(backend)
    try:
        y = grouped_mm(x, w, counts)
        (y * g).sum().backward()
    finally:
        grouped.set_backend(None)
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    yr = _grouped_loop(xr, wr, counts)
    (yr * g).sum().backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(y, yr, atol=tol, rtol=tol)
    torch.testing.assert_close(x.grad, xr.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(w.grad, wr.grad, atol=tol, rtol=tol)
    for e in (counts == 0).nonzero().flatten().tolist():
        assert torch.count_nonzero(w.grad[e]) == 0


def test_float32_layer_is_the_same_function_on_every_backend():
    torch.manual_seed(0)
    moe = MoE(16, 16, 4, top_k=2)
    x = torch.randn(30, 16)
    outs = []
    backends = ["bucketed", "loop", None] + (["native"] if native_available("cpu", torch.float32) else [])
    for backend in backends:
        grouped.set_backend(backend)
        try:
            outs.append(moe(x)[0])
        finally:
            grouped.set_backend(None)
    for y in outs[1:]:
        torch.testing.assert_close(y, outs[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["loop", "bucketed"])
@pytest.mark.parametrize("capacity_factor", [None, 0.75])
def test_forced_backend_matches_reference_with_and_without_drops(backend, capacity_factor):
    """``MoE(backend=...)`` runs that backend; permute/combine (gathers both ways) give the reference's gradients."""
    moe = build(top_k=3, capacity_factor=capacity_factor, backend=backend, shared_experts=1)
    seen = []
    original = grouped.grouped_mm

    def spy(x, w, counts, backend=None):
        seen.append(backend)
        return original(x, w, counts, backend)

    import sparsetrain.moe.experts as experts_mod

    experts_mod.grouped_mm, restore = spy, experts_mod.grouped_mm
    try:
        aux = compare(moe, torch.randn(2, 9, D, dtype=torch.float64))
    finally:
        experts_mod.grouped_mm = restore
    assert seen and set(seen) == {backend}
    assert (int(aux.dropped) > 0) == (capacity_factor is not None)


def test_swiglu_backward_equals_autograd_of_the_chunked_form():
    from sparsetrain.moe.experts import activate

    h = torch.randn(11, 2 * 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: activate(t, "swiglu"), (h,))
    gate, up = h.detach().chunk(2, dim=-1)
    torch.testing.assert_close(activate(h, "swiglu"), torch.sigmoid(gate) * gate * up, atol=1e-15, rtol=0)


def test_unknown_backend_is_refused():
    with pytest.raises(SettingError, match="backend"):
        MoE(D, H, E, backend="cutlass")


def test_same_seed_same_layer_and_state_dict_roundtrip():
    a, b = build(seed=7, top_k=2, shared_experts=1), build(seed=7, top_k=2, shared_experts=1)
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(p, q), n
    c = build(seed=8, top_k=2, shared_experts=1)
    c.load_state_dict(a.state_dict())
    x = torch.randn(6, D, dtype=torch.float64)
    torch.testing.assert_close(c(x)[0], a(x)[0], atol=0, rtol=0)
    assert set(a.state_dict()) == {"router.weight", "shared.w_in", "shared.w_out", "experts.w_in", "experts.w_out"}


@pytest.mark.gpu
def test_cuda_float32_layer_matches_cpu_float64():
    import copy

    torch.manual_seed(0)
    moe = MoE(64, 128, 8, top_k=2, shared_experts=1)
    x = torch.randn(512, 64)
    ref = copy.deepcopy(moe).double()
    xr = x.double().requires_grad_(True)
    yr, _ = ref(xr)
    yr.sum().backward()
    xc = x.cuda().requires_grad_(True)
    yc, _ = moe.cuda()(xc)
    yc.sum().backward()
    torch.testing.assert_close(yc.double().cpu(), yr, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(xc.grad.double().cpu(), xr.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(moe.experts.w_in.grad.double().cpu(), ref.experts.w_in.grad, atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_native_grouped_mm_matches_bucketed(dtype):
    if not native_available("cuda", dtype):
        pytest.skip(f"torch._grouped_mm does not run on this GPU for {dtype}")
    counts = torch.tensor([0, 100, 3, 0, 61, 4], device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(int(counts.sum()), 64, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(6, 64, 32, device="cuda", dtype=dtype, generator=gen)
    g = torch.randn(x.shape[0], 32, device="cuda", dtype=dtype, generator=gen)
    grads = []
    for backend in ("native", "bucketed"):
        xi, wi = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        grouped.set_backend(backend)
        try:
            y = grouped_mm(xi, wi, counts)
            (y.float() * g.float()).sum().backward()
        finally:
            grouped.set_backend(None)
        grads.append((y.float(), xi.grad.float(), wi.grad.float()))
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=tol * 10, rtol=tol)


def naive_group_limited(pick, n_group, topk_group, top_k):
    """Per token: group score = sum of its 2 best scores, keep the best ``topk_group`` groups, then top-k inside."""
    per = pick.shape[1] // n_group
    chosen = []
    for row in pick.tolist():
        score = [sum(sorted(row[g * per : (g + 1) * per], reverse=True)[:2]) for g in range(n_group)]
        groups = sorted(range(n_group), key=lambda g: -score[g])[:topk_group]
        allowed = [e for g in groups for e in range(g * per, (g + 1) * per)]
        chosen.append(sorted(sorted(allowed, key=lambda e: -row[e])[:top_k]))
    return chosen


@pytest.mark.parametrize("renormalize", [True, False])
def test_group_limited_routing_scaling_and_bias_match_a_naive_reference(renormalize):
    from sparsetrain.moe.router import Router

    torch.manual_seed(0)
    router = Router(D, 12, 3, score="sigmoid", renormalize=renormalize, expert_bias=True, n_group=4, topk_group=2,
                    routed_scaling_factor=2.5).double()  # fmt: skip
    with torch.no_grad():
        router.expert_bias.copy_(torch.randn(12) * 0.2)
    x = torch.randn(40, D, dtype=torch.float64)
    r = router(x)
    scores = torch.sigmoid(x @ router.weight.t())
    pick = scores + router.expert_bias.double()
    assert r.experts.sort(dim=-1).values.tolist() == naive_group_limited(pick, 4, 2, 3)
    w = scores.gather(1, r.experts)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    torch.testing.assert_close(r.weights, 2.5 * w, atol=1e-12, rtol=0)
    # without the group limit the choice differs for some token (the limit does something here)
    free = Router(D, 12, 3, score="sigmoid", expert_bias=True).double()
    free.load_state_dict(router.state_dict())
    assert not torch.equal(free(x).experts.sort(dim=-1).values, r.experts.sort(dim=-1).values)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(n_group=5), "n_group=5 must be >= 1 and divide num_experts=6"),
        (dict(n_group=3, topk_group=4), "topk_group=4 must be between 1 and n_group=3"),
        (dict(n_group=3, topk_group=1, top_k=3), "top_k=3 exceeds the 2 experts"),
        (dict(n_group=6), ">= 2 experts per group"),
        (dict(routed_scaling_factor=0.0), "routed_scaling_factor=0.0; give a finite number > 0"),
        (dict(shared_hidden=8), "set shared_experts >= 1"),
        (dict(shared_gate=True), "set shared_experts >= 1"),
    ],
)
def test_routing_options_are_checked_at_construction(kw, match):
    with pytest.raises(SettingError, match=match):
        MoE(D, H, E, kw.pop("top_k", 2), **kw)


def test_shared_expert_with_its_own_width_and_gate():
    torch.manual_seed(0)
    moe = MoE(D, H, E, 2, shared_experts=1, shared_hidden=5, shared_gate=True).double()
    assert moe.shared.w_in.shape == (D, 10) and moe.shared.w_out.shape == (5, D)
    x = torch.randn(7, D, dtype=torch.float64)
    y, _ = moe(x)
    s = moe.shared
    gate, up = (x @ s.w_in).chunk(2, dim=-1)
    shared = torch.sigmoid(x @ s.gate_weight.t()) * ((torch.nn.functional.silu(gate) * up) @ s.w_out)
    moe.shared = None
    routed, _ = moe(x)
    torch.testing.assert_close(y, routed + shared, atol=1e-12, rtol=0)
