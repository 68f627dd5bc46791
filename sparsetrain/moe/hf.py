"""Hugging Face ``transformers`` MoE blocks swapped in place for a sparsetrain :class:`~sparsetrain.moe.MoE`.

``replace_moe_blocks(model)`` replaces every sparse MoE block of a Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE or
DeepSeek-V3 model (``transformers`` 5.x) by an :class:`HFMoEBlock`: same forward contract (``[B, S, H]`` in,
``[B, S, H]`` out), same function (router, expert choice, combine weights, shared expert), weights mapped
from HF's fused layout. The swapped blocks' ``state_dict`` entries keep HF's names and layouts, so a plain
``model.save_pretrained(path)`` (safetensors, sharded or not; under a sharding, called on every rank as HF asks
under torch.distributed: the expert tables are gathered, rank 0 writes) gives a checkpoint that
``AutoModelForCausalLM.from_pretrained`` loads into the original HF classes, and ``load_state_dict`` takes HF's
state dicts. ``state_dict(keep_vars=True)`` (the live parameters) and :func:`moe_layout_state_dict` give
sparsetrain's names (``….mlp.moe.experts.w_in``), the parameter names DCP's helpers check.

Routing per family, read from the block being replaced (``norm_topk_prob``: renormalize the top-k weights
to sum to one; the transformers 5.x config default is off for Qwen2-MoE, Qwen3-MoE and OLMoE, on for
DeepSeek-V3, and released Qwen3-MoE checkpoints set it on):

* Mixtral: softmax scores, top-k weights always renormalized; ``router_jitter_noise`` in training.
* Qwen2-MoE: softmax, ``norm_topk_prob``; a shared expert of its own width
  (``shared_expert_intermediate_size``) scaled by a per-token sigmoid gate (``shared_expert_gate``).
* Qwen3-MoE, OLMoE: softmax, ``norm_topk_prob``.
* DeepSeek-V3: sigmoid scores, ``norm_topk_prob``, then ``routed_scaling_factor``; group-limited top-k
  (``n_group``, ``topk_group``); ``e_score_correction_bias`` added for selection only (the noaux_tc bias,
  kept in fp32; sparsetrain's ``update_expert_biases``/``finish_step`` update it, HF's code never does);
  ``n_shared_experts`` ungated shared experts.

Auxiliary losses, two ways (``aux_loss=``):

* ``"hf"`` (default): the block feeds its router logits to HF's output recorders exactly where the HF
  router did, so ``model(..., output_router_logits=True)`` returns ``router_logits`` and HF's own
  ``aux_loss`` (``load_balancing_loss_func``), and with ``labels`` HF adds
  ``router_aux_loss_coef * aux_loss`` to ``loss`` as before. Nothing else is added: training equals HF's.
* ``"sparsetrain"``: sparsetrain's ``aux.loss`` (load balancing over the tokens of *all* ranks under a
  sharding, plus router z-loss; weights ``aux_loss_weight`` and ``z_loss_weight``) enters every
  backward pass through the block's output: the output is returned through an identity whose backward
  also sends gradient 1 into ``aux.loss`` (as if ``aux.loss`` had been added to the loss being
  differentiated). HF's loop needs no change; ``outputs.loss`` does not show the term, and each
  block keeps its last value in ``block.last_aux_loss`` (detached). With gradient accumulation over
  ``N`` micro-batches whose losses are divided by ``N``, divide the weights by ``N`` too. Leave
  ``output_router_logits`` off in this mode, or HF's loss is added on top.

Mapping: HF stores experts for ``F.linear`` (``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``);
sparsetrain stores them for grouped matmul (``w_in [E, H, 2I]``, ``w_out [E, I, H]``), so the expert
weights are copied once, transposed, and HF's tensors are released with the old block. ``state_dict``
transposes them back into contiguous copies (what safetensors writes), one more copy of the experts while
the state dict is alive.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from sparsetrain.errors import CheckpointError, SettingError
from sparsetrain.moe.grouped import check_backend
from sparsetrain.moe.layer import MoE

AUX_MODES = ("hf", "sparsetrain")


@dataclass(frozen=True)
class Family:
    """How one HF family's MoE block maps onto :class:`MoE`."""

    name: str
    score: str  #: router scores: "softmax" or "sigmoid"
    always_renormalize: bool  #: renormalize top-k weights regardless of the router's ``norm_topk_prob``
    shared: str | None = None  #: attribute of the shared-expert MLP on the block
    shared_gate: str | None = None  #: attribute of the shared expert's sigmoid gate (``Linear(H, 1)``)
    grouped: bool = False  #: DeepSeek-V3 router: scaling factor, groups, score-correction bias


FAMILIES = {
    "MixtralSparseMoeBlock": Family("Mixtral", "softmax", True),
    "Qwen2MoeSparseMoeBlock": Family("Qwen2-MoE", "softmax", False, "shared_expert", "shared_expert_gate"),
    "Qwen3MoeSparseMoeBlock": Family("Qwen3-MoE", "softmax", False),
    "OlmoeSparseMoeBlock": Family("OLMoE", "softmax", False),
    "DeepseekV3MoE": Family("DeepSeek-V3", "sigmoid", False, "shared_experts", None, grouped=True),
}


class _AddAuxGradient(torch.autograd.Function):
    """Identity on ``y`` whose backward also gives ``aux_loss`` the gradient 1."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, aux_loss: torch.Tensor) -> torch.Tensor:
        ctx.aux_meta = (aux_loss.shape, aux_loss.dtype, aux_loss.device)
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        shape, dtype, device = ctx.aux_meta
        return grad, torch.ones(shape, dtype=dtype, device=device)


class RouterLogitsTap(nn.Module):
    """Returns ``(router_logits,)``: the module HF's ``router_logits`` output recorder is hooked on."""

    def forward(self, router_logits: torch.Tensor) -> tuple[torch.Tensor]:
        return (router_logits,)


class HFMoEBlock(nn.Module):
    """A sparsetrain :class:`MoE` behind an HF MoE block's forward contract (tensor in, tensor out).

    Its ``state_dict`` entries carry the replaced HF block's names and tensor layouts (so
    ``save_pretrained`` writes what ``from_pretrained`` loads into the plain HF model), and
    ``load_state_dict`` takes either those or the ``moe.*`` entries. ``state_dict(keep_vars=True)``,
    which asks for the live parameters, and :func:`moe_layout_state_dict` give the ``moe.*`` entries.
    """

    hf_layout = True  #: ``state_dict`` in HF's names and layouts (off inside :func:`moe_layout_state_dict`)

    def __init__(self, moe: MoE, family: Family, *, source: str, jitter_noise: float = 0.0,
                 aux_loss: str = "hf") -> None:
        super().__init__()
        self.moe = moe
        self.router_logits = RouterLogitsTap()
        self.family, self.source, self.jitter_noise, self.aux_loss = family, source, float(jitter_noise), aux_loss
        self.last_aux_loss: torch.Tensor | None = None
        self._keep_vars = False
        self.register_state_dict_pre_hook(_note_keep_vars)
        self.register_state_dict_post_hook(_state_dict_to_hf)
        self.register_load_state_dict_pre_hook(_state_dict_from_hf)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``[..., H] -> [..., H]``, like the HF block it replaced."""
        if self.training and self.jitter_noise > 0:
            noise = torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
            hidden_states = hidden_states * noise
        y, aux = self.moe(hidden_states)
        self.router_logits(aux.router_logits)
        if self.aux_loss == "sparsetrain":
            self.last_aux_loss = aux.loss.detach()
            if torch.is_grad_enabled() and aux.loss.requires_grad:
                y = _AddAuxGradient.apply(y, aux.loss)
        return y

    def hf_state_dict(self, moe_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """HF-layout tensors (names relative to the block) from this block's ``moe`` state entries (consumed)."""
        fam, take = self.family, moe_state.pop
        out = {"gate.weight": take("router.weight")}
        out["experts.gate_up_proj"] = take("experts.w_in").transpose(1, 2).contiguous()
        out["experts.down_proj"] = take("experts.w_out").transpose(1, 2).contiguous()
        if fam.grouped:
            out["gate.e_score_correction_bias"] = take("router.expert_bias")
        if fam.shared is not None:
            gate, up = take("shared.w_in").t().chunk(2, dim=0)
            out[f"{fam.shared}.gate_proj.weight"] = gate.contiguous()
            out[f"{fam.shared}.up_proj.weight"] = up.contiguous()
            out[f"{fam.shared}.down_proj.weight"] = take("shared.w_out").t().contiguous()
        if fam.shared_gate is not None:
            out[f"{fam.shared_gate}.weight"] = take("shared.gate_weight")
        if moe_state:
            raise CheckpointError(f"HFMoEBlock ({self.source}): no HF name for the state entries {sorted(moe_state)}")
        return out

    def moe_state_from_hf(self, hf_state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
        """Inverse of :meth:`hf_state_dict`: ``moe`` state entries from the HF-layout entries present in
        ``hf_state`` (the mapped ones are consumed; the rest stay for the caller to report). ``prefix``: the block's
        name in the model, for messages."""
        fam, out = self.family, {}
        pairs = {"gate.weight": "router.weight"}
        if fam.grouped:
            pairs["gate.e_score_correction_bias"] = "router.expert_bias"
        if fam.shared_gate is not None:
            pairs[f"{fam.shared_gate}.weight"] = "shared.gate_weight"
        for hf_name, name in pairs.items():
            if hf_name in hf_state:
                out[name] = hf_state.pop(hf_name)
        shape = self.moe.expert_shape
        experts = {"experts.gate_up_proj": ("experts.w_in", "[E, 2I, H]", (shape.in_width, shape.d_model)),
                   "experts.down_proj": ("experts.w_out", "[E, H, I]", (shape.d_model, shape.d_hidden))}
        for hf_name, (name, layout, rows) in experts.items():
            if hf_name in hf_state:
                tensor = hf_state.pop(hf_name)
                want = [self.moe.num_experts, *rows]
                if list(tensor.shape) != want:
                    raise CheckpointError(f"{prefix}{hf_name} has shape {list(tensor.shape)}; {fam.name} expects "
                                          f"{layout} = {want} (experts, then HF's F.linear layout)")
                out[name] = tensor.transpose(1, 2)
        if fam.shared is not None:
            gate, up, down = (f"{fam.shared}.{p}_proj.weight" for p in ("gate", "up", "down"))
            if gate in hf_state and up in hf_state:
                out["shared.w_in"] = torch.cat([hf_state.pop(gate).t(), hf_state.pop(up).t()], dim=1)
            if down in hf_state:
                out["shared.w_out"] = hf_state.pop(down).t()
        return out

    def extra_repr(self) -> str:
        return f"replaces={self.source}, aux_loss={self.aux_loss!r}"


def _note_keep_vars(block: HFMoEBlock, prefix: str, keep_vars: bool) -> None:
    block._keep_vars = keep_vars


def _state_dict_to_hf(block: HFMoEBlock, state: dict, prefix: str, local_metadata: dict) -> None:
    """State-dict post-hook: the block's ``moe.*`` entries become the HF block's (in place)."""
    if block._keep_vars or not block.hf_layout:
        return
    moe_prefix = prefix + "moe."
    moe_state = {k[len(moe_prefix) :]: state.pop(k) for k in [k for k in state if k.startswith(moe_prefix)]}
    with torch.no_grad():
        state.update({prefix + k: v for k, v in block.hf_state_dict(moe_state).items()})


def _state_dict_from_hf(block: HFMoEBlock, state: dict, prefix: str, *args) -> None:
    """Load-state-dict pre-hook: the HF-layout entries of the block become ``moe.*`` entries (in place);
    entries it cannot map stay, for ``load_state_dict`` to report as unexpected."""
    names = [k for k in state if k.startswith(prefix) and not k.startswith(prefix + "moe.")]
    if not names:
        return
    hf_state = {k[len(prefix) :]: state[k] for k in names}
    moe_state = block.moe_state_from_hf(hf_state, prefix)  # consumes what it maps
    for k in names:
        if k[len(prefix) :] not in hf_state:
            del state[k]
    state.update({f"{prefix}moe.{k}": v for k, v in moe_state.items()})


def _moe_for(block: nn.Module, family: Family, config, sharding, aux_loss: str, aux_loss_weight: float | None,
             z_loss_weight: float, backend: str | None = None) -> MoE:
    gate, experts = block.gate, block.experts
    num_experts, d_model = gate.weight.shape
    d_hidden = experts.gate_up_proj.shape[1] // 2
    act = getattr(config, "hidden_act", "silu")
    if act != "silu":
        raise SettingError(
            f"replace_moe_blocks: {type(block).__name__} uses hidden_act={act!r}; sparsetrain's gated experts are SiLU "
            "(SwiGLU) only"
        )
    renormalize = family.always_renormalize or bool(getattr(gate, "norm_topk_prob", False))
    kw: dict = {}
    state = {
        "router.weight": gate.weight,
        "experts.w_in": experts.gate_up_proj.transpose(1, 2),
        "experts.w_out": experts.down_proj.transpose(1, 2),
    }
    if family.grouped:
        kw.update(routed_scaling_factor=gate.routed_scaling_factor, n_group=gate.num_group or 1,
                  topk_group=gate.topk_group or gate.num_group or 1, expert_bias=True)  # fmt: skip
        state["router.expert_bias"] = gate.e_score_correction_bias
    if family.shared is not None:
        mlp = getattr(block, family.shared)
        kw.update(shared_experts=1, shared_hidden=mlp.gate_proj.weight.shape[0],
                  shared_gate=family.shared_gate is not None)
        state["shared.w_in"] = torch.cat([mlp.gate_proj.weight.t(), mlp.up_proj.weight.t()], dim=1)
        state["shared.w_out"] = mlp.down_proj.weight.t()
        if family.shared_gate is not None:
            state["shared.gate_weight"] = getattr(block, family.shared_gate).weight
    if aux_loss == "hf":
        weights = dict(aux_loss_weight=0.0, z_loss_weight=0.0)
    else:
        default = getattr(config, "router_aux_loss_coef", 0.01)
        weights = dict(aux_loss_weight=default if aux_loss_weight is None else aux_loss_weight,
                       z_loss_weight=z_loss_weight)
    with torch.random.fork_rng(devices=[]):  # building the layer draws initial weights; leave the caller's RNG alone
        moe = MoE(d_model, d_hidden, num_experts, gate.top_k, router=family.score, renormalize=renormalize,
                  activation="swiglu", sharding=sharding, backend=backend, **weights, **kw)  # fmt: skip
    with torch.no_grad():
        moe.load_state_dict({k: v.detach() for k, v in state.items()}, strict=True)
    moe.to(device=gate.weight.device, dtype=experts.gate_up_proj.dtype)
    if family.grouped:
        moe.router.expert_bias = moe.router.expert_bias.float()  # HF keeps the correction bias in fp32 too
    return moe


def _recorder_specs(owner: nn.Module) -> list[tuple[str, type]]:
    """``(key, target class)`` of the HF output recorders that ``owner`` (a PreTrainedModel) installs."""
    out = []
    for key, specs in (getattr(owner, "_can_record_outputs", None) or {}).items():
        for spec in specs if isinstance(specs, list) else [specs]:
            target = getattr(spec, "target_class", spec)
            if isinstance(target, type):
                out.append((key, target))
    return out


def _owner_of(name: str, modules: dict[str, nn.Module]) -> nn.Module | None:
    """The nearest ancestor of module ``name`` that declares HF output recorders."""
    parts = name.split(".")
    for i in range(len(parts) - 1, -1, -1):
        m = modules.get(".".join(parts[:i]))
        if m is not None and getattr(m, "_can_record_outputs", None):
            return m
    return None


def _looks_like_moe(module: nn.Module) -> bool:
    names = dict(module.named_children())
    return "experts" in names and ("gate" in names or "router" in names)


def replace_moe_blocks(
    model: nn.Module,
    *,
    sharding=None,
    aux_loss: str = "hf",
    aux_loss_weight: float | None = None,
    z_loss_weight: float = 0.0,
    backend: str | None = None,
) -> nn.Module:
    """Swap every MoE block of an HF model in place for an :class:`HFMoEBlock`; returns ``model``.

    Args:
        model: a ``transformers`` model of a supported family (see the module docstring).
        sharding: ``None``, :class:`~sparsetrain.moe.FSSDP` or :class:`~sparsetrain.moe.ExpertParallel`
            for every replaced layer (with a sharding, torch.distributed must be initialized first and every
            rank must hold the same HF weights).
        aux_loss: ``"hf"`` (HF's own load-balancing loss through ``output_router_logits``) or
            ``"sparsetrain"`` (sparsetrain's aux loss injected into backward); see the module docstring.
        aux_loss_weight, z_loss_weight: weights of sparsetrain's losses when ``aux_loss="sparsetrain"``
            (default: the config's ``router_aux_loss_coef``, else 0.01; and 0).
        backend: force the experts' grouped-matmul backend (see :class:`~sparsetrain.moe.MoE`); ``None`` (default)
            measures the backends on each layer shape's first call and keeps the fastest.

    Raises :class:`~sparsetrain.errors.SettingError` naming the block class for an MoE block of another family.
    """
    if aux_loss not in AUX_MODES:
        raise SettingError(f"replace_moe_blocks: aux_loss={aux_loss!r} is not known; use one of {AUX_MODES}")
    check_backend(backend, "replace_moe_blocks: backend")
    from transformers.utils.output_capturing import install_output_capuring_hook

    modules = dict(model.named_modules())
    found = []
    for name, module in modules.items():
        family = FAMILIES.get(type(module).__name__)
        if family is not None:
            found.append((name, module, family))
        elif isinstance(module, HFMoEBlock):
            raise SettingError(f"replace_moe_blocks: {name} is already an HFMoEBlock; call it once per model")
        elif _looks_like_moe(module) and not any(name.startswith(f + ".") for f, _, _ in found):
            supported = ", ".join(f"{k} ({f.name})" for k, f in FAMILIES.items())
            raise SettingError(
                f"replace_moe_blocks: {type(module).__name__} at {name!r} is an MoE block of an unsupported family; "
                f"supported blocks: {supported}"
            )
    if not found:
        raise SettingError(f"replace_moe_blocks: no MoE block found in {type(model).__name__}")
    config = getattr(model, "config", None)
    for name, block, family in found:
        moe = _moe_for(block, family, config, sharding, aux_loss, aux_loss_weight, z_loss_weight, backend)
        new = HFMoEBlock(moe, family, source=type(block).__name__,
                         jitter_noise=getattr(block, "jitter_noise", 0.0) or 0.0,
                         aux_loss=aux_loss)  # fmt: skip
        new.train(block.training)
        owner = _owner_of(name, modules)
        if owner is not None:
            for key, target in _recorder_specs(owner):
                if isinstance(block.gate, target):
                    install_output_capuring_hook(new.router_logits, key, 0)
        parent_name, _, attr = name.rpartition(".")
        setattr(modules[parent_name] if parent_name else model, attr, new)
    return model


def export_hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state in HF's names and layouts: what ``model.state_dict()`` gives by default (kept for code
    written before it did). A collective under a sharding."""
    with _layout(model, hf=True):
        return model.state_dict()


@contextmanager
def _layout(model: nn.Module, hf: bool) -> Iterator[None]:
    blocks = [m for m in model.modules() if isinstance(m, HFMoEBlock)]
    before = [b.hf_layout for b in blocks]
    for b in blocks:
        b.hf_layout = hf
    try:
        yield
    finally:
        for b, was in zip(blocks, before):
            b.hf_layout = was


def moe_layout_state_dict(model: nn.Module):
    """Context in which ``model.state_dict()`` names the swapped blocks' entries as sparsetrain's modules do
    (``….mlp.moe.experts.w_in``): the parameter names torch's ``distributed.checkpoint.state_dict`` helpers
    expect (:class:`~sparsetrain.moe.DCPState` uses it)."""
    return _layout(model, hf=False)
