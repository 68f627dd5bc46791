"""HF MoE blocks swapped for sparsetrain's MoE: the whole model keeps HF's function, gradients, training
losses, aux loss and checkpoint format (tiny configs, random weights, nothing downloaded)."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

transformers = pytest.importorskip("transformers")

from sparsetrain.errors import CheckpointError, SettingError  # noqa: E402
from sparsetrain.moe import FSSDP  # noqa: E402
from sparsetrain.moe.hf import HFMoEBlock, export_hf_state_dict, replace_moe_blocks  # noqa: E402

BASE = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, eos_token_id=None, pad_token_id=None, bos_token_id=None)  # fmt: skip


def mixtral(**kw):
    return transformers.MixtralForCausalLM, transformers.MixtralConfig(
        **BASE, intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, **kw
    )


def qwen2_moe(**kw):
    cfg = transformers.Qwen2MoeConfig(**BASE, intermediate_size=40, moe_intermediate_size=24,
                                      shared_expert_intermediate_size=40, num_experts=6, num_experts_per_tok=2,
                                      norm_topk_prob=False, **kw)  # fmt: skip
    return transformers.Qwen2MoeForCausalLM, cfg


def qwen3_moe(**kw):
    cfg = transformers.Qwen3MoeConfig(**BASE, intermediate_size=40, moe_intermediate_size=24, num_experts=6,
                                      num_experts_per_tok=3, head_dim=8, norm_topk_prob=True, **kw)  # fmt: skip
    return transformers.Qwen3MoeForCausalLM, cfg


def olmoe(**kw):
    return transformers.OlmoeForCausalLM, transformers.OlmoeConfig(
        **BASE, intermediate_size=24, num_experts=6, num_experts_per_tok=2, **kw
    )


def deepseek_v3(**kw):
    cfg = transformers.DeepseekV3Config(**{**BASE, "num_key_value_heads": 4, "num_hidden_layers": 3},
                                        intermediate_size=40, moe_intermediate_size=16, n_routed_experts=8,
                                        num_experts_per_tok=3, n_shared_experts=2, n_group=4, topk_group=2,
                                        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=16,
                                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, routed_scaling_factor=2.5,
                                        norm_topk_prob=True, **kw)  # fmt: skip
    return transformers.DeepseekV3ForCausalLM, cfg


FAMILIES = {
    "mixtral": mixtral,
    "qwen2_moe": qwen2_moe,
    "qwen3_moe": qwen3_moe,
    "olmoe": olmoe,
    "deepseek_v3": deepseek_v3,
}
HAS_HF_AUX = {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}  # DeepSeek-V3's HF model computes no aux loss


def build(family: str, seed: int = 0, decisive: bool = True, **kw):
    """An HF model; ``decisive``: router weights of unit scale and a random correction bias (else HF's init)."""
    cls, cfg = FAMILIES[family](**kw)
    torch.manual_seed(seed)
    model = cls(cfg)
    if not decisive:
        return model
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "top_k") and hasattr(m, "weight") and m.weight.dim() == 2:  # the routers
                m.weight.normal_(0.0, 1.0)
            if hasattr(m, "e_score_correction_bias"):
                m.e_score_correction_bias.normal_(0.0, 0.1)
    return model


def pair(family: str, **kw):
    hf = build(family, **kw)
    return hf, replace_moe_blocks(copy.deepcopy(hf))


def tokens(seed: int, batch: int = 3, seq: int = 12) -> torch.Tensor:
    return torch.randint(0, BASE["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


def ours_in_hf_names(model, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors named like ``model``'s parameters, renamed and re-laid-out as HF's (written here, independently of
    hf.py)."""
    out = {}
    for name, t in tensors.items():
        if ".moe." not in name:
            out[name] = t
            continue
        block, rest = name.split(".moe.")
        shared = "shared_expert" if "qwen2" in type(model).__name__.lower() else "shared_experts"
        if rest == "router.weight":
            out[f"{block}.gate.weight"] = t
        elif rest == "router.expert_bias":
            out[f"{block}.gate.e_score_correction_bias"] = t
        elif rest == "experts.w_in":
            out[f"{block}.experts.gate_up_proj"] = t.transpose(1, 2)
        elif rest == "experts.w_out":
            out[f"{block}.experts.down_proj"] = t.transpose(1, 2)
        elif rest == "shared.w_in":
            half = t.shape[1] // 2
            out[f"{block}.{shared}.gate_proj.weight"] = t[:, :half].t()
            out[f"{block}.{shared}.up_proj.weight"] = t[:, half:].t()
        elif rest == "shared.w_out":
            out[f"{block}.{shared}.down_proj.weight"] = t.t()
        elif rest == "shared.gate_weight":
            out[f"{block}.shared_expert_gate.weight"] = t
        else:
            raise AssertionError(f"unmapped parameter {name}")
    return out


def expert_choices(model):
    """Hooks recording every router's chosen experts (as sorted sets per token), in call order."""
    seen = []

    def hf_hook(module, args, out):
        seen.append(out[2].sort(dim=-1).values)

    def ours_hook(module, args, out):
        seen.append(out.experts.sort(dim=-1).values)

    for m in model.modules():
        if isinstance(m, HFMoEBlock):
            m.moe.router.register_forward_hook(ours_hook)
        elif type(m).__name__.endswith(("TopKRouter", "TopkRouter")):
            m.register_forward_hook(hf_hook)
    return seen


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_gradients_and_expert_choice_equal_hf(family):
    hf, ours = pair(family)
    assert any(isinstance(m, HFMoEBlock) for m in ours.modules())
    hf_choice, our_choice = expert_choices(hf), expert_choices(ours)
    ids = tokens(1)
    a = hf(ids, labels=ids)
    b = ours(ids, labels=ids)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=0)
    assert len(hf_choice) == len(our_choice) > 0
    for x, y in zip(hf_choice, our_choice):
        assert torch.equal(x, y)
    a.loss.backward()
    b.loss.backward()
    grads_hf = {n: p.grad for n, p in hf.named_parameters() if p.grad is not None}
    grads_ours = ours_in_hf_names(ours, {n: p.grad for n, p in ours.named_parameters() if p.grad is not None})
    assert set(grads_ours) == set(grads_hf)
    for n, g in grads_hf.items():
        torch.testing.assert_close(grads_ours[n], g, atol=1e-5, rtol=0, msg=lambda m, n=n: f"{n}: {m}")


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "deepseek_v3"])
def test_hf_initialization_near_ties_route_identically(family):
    hf = build(family, decisive=False)  # HF's own init: router std 0.02, so top-k gaps are tiny
    ours = replace_moe_blocks(copy.deepcopy(hf))
    hf_choice, our_choice = expert_choices(hf), expert_choices(ours)
    ids = tokens(8, batch=4, seq=16)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, hf(ids).logits, atol=1e-5, rtol=0)
    assert len(hf_choice) == len(our_choice) > 0
    assert all(torch.equal(x, y) for x, y in zip(hf_choice, our_choice))


@pytest.mark.parametrize(
    "family", [f if f == "mixtral" else pytest.param(f, marks=pytest.mark.slow) for f in sorted(FAMILIES)]
)
def test_twenty_adamw_steps_give_hf_losses(family):
    hf, ours = pair(family, seed=1)
    hf.train()
    ours.train()
    losses = []
    for model in (hf, ours):
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        run = []
        for step in range(20):
            ids = tokens(100 + step % 2)  # two batches, so the loss must fall
            out = model(ids, labels=ids, output_router_logits=family in HAS_HF_AUX)
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            run.append(out.loss.item())
        losses.append(run)
    assert losses[0][-1] < losses[0][0]
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_output_router_logits_and_aux_loss_equal_hf(family):
    hf, ours = pair(family)
    ids = tokens(2)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # HF's aux loss skips padding
    a = hf(ids, attention_mask=mask, labels=ids, output_router_logits=True)
    b = ours(ids, attention_mask=mask, labels=ids, output_router_logits=True)
    assert len(b.router_logits) == len(a.router_logits) == sum(isinstance(m, HFMoEBlock) for m in ours.modules())
    for x, y in zip(a.router_logits, b.router_logits):
        torch.testing.assert_close(y.float(), x.float(), atol=1e-5, rtol=0)
    if family in HAS_HF_AUX:
        torch.testing.assert_close(b.aux_loss, a.aux_loss, atol=1e-6, rtol=0)
        torch.testing.assert_close(b.loss, a.loss, atol=1e-5, rtol=0)
    # the recorders only fire when asked
    assert getattr(ours(ids), "router_logits", None) is None


@functools.cache
def trained(family: str):
    """An HF model and its swapped copy moved away from the HF weights by two AdamW steps (shared; don't modify)."""
    hf, ours = pair(family)
    opt = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    for step in range(2):
        ids = tokens(200 + step)
        ours(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    return hf, ours


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_plain_save_pretrained_loads_into_the_hf_model(family, tmp_path):
    hf, ours = trained(family)
    ours.save_pretrained(tmp_path, max_shard_size="20KB")  # several safetensors shards and an index
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(loaded) is type(hf) and not any(isinstance(m, HFMoEBlock) for m in loaded.modules())
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    ids = tokens(3)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, ours(ids).logits, atol=1e-5, rtol=0)
    # the loaded weights are the trained ones, in HF's layout (mapped back independently of hf.py)
    want = ours_in_hf_names(ours, ours.state_dict(keep_vars=True))  # sparsetrain's names: the live tensors
    for n, t in loaded.state_dict().items():
        torch.testing.assert_close(t, want[n].detach(), atol=0, rtol=0, msg=lambda m, n=n: f"{n}: {m}")
    # and back again: replacing the loaded model gives the same function
    again = replace_moe_blocks(loaded)
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, ours(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_state_dict_is_hf_layout_and_loads_either_layout(family):
    hf, ours = trained(family)
    state = ours.state_dict()
    assert set(state) == set(hf.state_dict())
    assert export_hf_state_dict(ours).keys() == state.keys()
    live = ours.state_dict(keep_vars=True)  # keep_vars asks for the live parameters: those have sparsetrain's names
    assert {n for n, _ in ours.named_parameters()} <= set(live)
    want = ours_in_hf_names(ours, {n: t.detach() for n, t in live.items()})
    for n, t in state.items():
        assert t.is_contiguous(), n  # safetensors writes it as is
        torch.testing.assert_close(t, want[n], atol=0, rtol=0, msg=lambda m, n=n: f"{n}: {m}")
    # HF's state loads strictly into a swapped model (and the swapped model's own, in either layout)
    fresh = replace_moe_blocks(build(family, seed=5))
    fresh.load_state_dict(hf.state_dict(), strict=True)
    ids = tokens(9)
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids).logits, hf(ids).logits, atol=1e-5, rtol=0)
        fresh.load_state_dict(state, strict=True)
        torch.testing.assert_close(fresh(ids).logits, ours(ids).logits, atol=1e-5, rtol=0)
        fresh.load_state_dict(dict(live), strict=True)
        torch.testing.assert_close(fresh(ids).logits, ours(ids).logits, atol=1e-5, rtol=0)
    # an HF entry of the wrong shape or an unknown name under the block is reported, not dropped
    bad = dict(hf.state_dict())
    extra = next(k for k in bad if k.endswith("mlp.gate.weight")).replace("gate.weight", "bogus.weight")
    bad[extra] = torch.zeros(1)
    with pytest.raises(RuntimeError, match=f"Unexpected key.*{extra}"):
        fresh.load_state_dict(bad, strict=True)


def test_export_round_trips_through_save_pretrained(tmp_path):
    hf, ours = trained("qwen2_moe")
    state = export_hf_state_dict(ours)
    ours.save_pretrained(tmp_path, state_dict=state)
    loaded = type(hf).from_pretrained(tmp_path)
    ids = tokens(3)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, ours(ids).logits, atol=1e-5, rtol=0)


def _save_under_fssdp(rank, world, path):
    """Each rank holds part of the experts; every rank calls save_pretrained, as HF asks under torch.distributed."""
    import torch.distributed as dist

    from sparsetrain.moe import sync_dense_grads

    ours = replace_moe_blocks(build("qwen2_moe"), sharding=FSSDP())  # same seed: same weights on every rank
    opt = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    ids = tokens(200 + rank)  # the ranks' batches differ, so every expert moves
    ours(ids, labels=ids).loss.backward()
    sync_dense_grads(ours)
    opt.step()
    local_rows = [m.moe.experts.shard.shape[0] for m in ours.modules() if isinstance(m, HFMoEBlock)]
    ours.save_pretrained(path, is_main_process=rank == 0)
    dist.barrier()
    with torch.no_grad():
        return local_rows, ours(tokens(3)).logits


@pytest.mark.slow
@pytest.mark.distributed
def test_save_pretrained_under_fssdp_gathers_every_expert(tmp_path):
    from tests.collective_harness import spawn, values

    out = values(spawn(_save_under_fssdp, 2, str(tmp_path), timeout_s=300))
    num_experts = FAMILIES["qwen2_moe"]()[1].num_experts
    for local_rows, _ in out:
        assert all(0 < n < num_experts for n in local_rows), local_rows  # no rank holds the whole table
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        for _, logits in out:
            torch.testing.assert_close(loaded(tokens(3)).logits, logits, atol=1e-5, rtol=0)


def switch_loss(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Switch load balancing ``E * sum_i f_i P_i`` with ``f_i`` the fraction of the ``T * k`` assignments."""
    p = torch.softmax(logits.float(), dim=-1)
    chosen = p.topk(top_k, dim=-1).indices.reshape(-1)
    f = torch.bincount(chosen, minlength=p.shape[-1]).float() / chosen.numel()
    return p.shape[-1] * (f * p.mean(0)).sum()


def test_sparsetrain_aux_loss_enters_backward():
    hf = build("mixtral")
    ours = replace_moe_blocks(copy.deepcopy(hf), aux_loss="sparsetrain", aux_loss_weight=0.3)
    ids = tokens(4)
    out = ours(ids, labels=ids)
    out.loss.backward()
    ref = hf(ids, labels=ids, output_router_logits=True)
    task = ref.loss - hf.router_aux_loss_coef * ref.aux_loss  # HF's loss without HF's own aux term
    aux = sum(switch_loss(logits, 2) for logits in ref.router_logits)
    (task + 0.3 * aux).backward()
    torch.testing.assert_close(out.loss, task, atol=1e-5, rtol=0)  # the injected term is not in the reported loss
    grads_ours = ours_in_hf_names(ours, {n: p.grad for n, p in ours.named_parameters()})
    for n, p in hf.named_parameters():
        torch.testing.assert_close(grads_ours[n], p.grad, atol=1e-5, rtol=0, msg=lambda m, n=n: f"{n}: {m}")
    blocks = [m for m in ours.modules() if isinstance(m, HFMoEBlock)]
    torch.testing.assert_close(sum(b.last_aux_loss for b in blocks), 0.3 * aux.detach(), atol=1e-6, rtol=0)


def test_router_jitter_matches_hf_in_training():
    hf, ours = pair("mixtral", router_jitter_noise=0.2)
    hf.train()
    ours.train()
    ids = tokens(5)
    torch.manual_seed(7)
    a = hf(ids).logits
    torch.manual_seed(7)
    b = ours(ids).logits
    torch.testing.assert_close(b, a, atol=1e-5, rtol=0)


def test_fssdp_single_rank_equals_hf_and_exports():
    hf = build("qwen2_moe")
    ours = replace_moe_blocks(copy.deepcopy(hf), sharding=FSSDP())
    ids = tokens(6)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, hf(ids).logits, atol=1e-5, rtol=0)
    state = export_hf_state_dict(ours)
    for n, t in hf.state_dict().items():
        torch.testing.assert_close(state[n], t, atol=0, rtol=0)


def test_replace_leaves_the_global_rng_alone():
    hf = build("olmoe")
    torch.manual_seed(3)
    replace_moe_blocks(hf)
    after = torch.rand(4)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(4), after)


def test_unsupported_family_and_misuse_raise_clear_errors():
    cfg = transformers.DeepseekV2Config(**{**BASE, "num_key_value_heads": 4}, intermediate_size=40,
                                        moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
                                        n_shared_experts=1, first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=16,
                                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8)  # fmt: skip
    v2 = transformers.DeepseekV2ForCausalLM(cfg)
    with pytest.raises(SettingError, match="DeepseekV2Moe.*unsupported family"):
        replace_moe_blocks(v2)
    dense = transformers.LlamaForCausalLM(transformers.LlamaConfig(**BASE, intermediate_size=40))
    with pytest.raises(SettingError, match="no MoE block found in LlamaForCausalLM"):
        replace_moe_blocks(dense)
    model = replace_moe_blocks(build("mixtral"))
    with pytest.raises(SettingError, match="already an HFMoEBlock"):
        replace_moe_blocks(model)
    with pytest.raises(SettingError, match="aux_loss='both'"):
        replace_moe_blocks(build("mixtral"), aux_loss="both")
    with pytest.raises(SettingError, match="hidden_act='gelu'"):
        replace_moe_blocks(build("olmoe", hidden_act="gelu"))


def test_replacing_after_hf_installed_its_recorders_keeps_router_logits():
    model = build("qwen3_moe")
    ids = tokens(7)
    with torch.no_grad():
        before = model(ids, output_router_logits=True)  # installs HF's hooks on the HF routers
        replace_moe_blocks(model)
        after = model(ids, output_router_logits=True)
    assert len(after.router_logits) == len(before.router_logits) == 2
    for x, y in zip(before.router_logits, after.router_logits):
        torch.testing.assert_close(y.float(), x.float(), atol=1e-5, rtol=0)
    torch.testing.assert_close(after.aux_loss, before.aux_loss, atol=1e-6, rtol=0)


def test_a_two_dimensional_gate_up_proj_names_the_tensor_and_both_shapes():
    model = replace_moe_blocks(build("mixtral"))
    state = model.state_dict()
    name = "model.layers.0.mlp.experts.gate_up_proj"
    assert list(state[name].shape) == [4, 96, 32]  # [E, 2I, H]
    state[name] = state[name][0]
    with pytest.raises(CheckpointError, match=r"^model\.layers\.0\.mlp\.experts\.gate_up_proj has shape \[96, 32\]; "
                                        r"Mixtral expects \[E, 2I, H\] = \[4, 96, 32\]"):
        model.load_state_dict(state)
