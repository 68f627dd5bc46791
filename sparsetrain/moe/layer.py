"""The drop-in :class:`MoE` layer."""

from __future__ import annotations

import torch
from torch import nn

from sparsetrain import _args
from sparsetrain.errors import CheckpointError, InputError, SettingError, SettingTypeError
from sparsetrain.moe import autotune, grouped
from sparsetrain.moe.dispatch import combine, permute, plan_dispatch
from sparsetrain.moe.experts import ACTIVATIONS, ExpertShape, LocalExperts, expert_ffn
from sparsetrain.moe.losses import MoEAux, load_balancing_loss, router_z_loss
from sparsetrain.moe.router import SCORES, Router
from sparsetrain.moe.shared import SharedExperts


class MoE(nn.Module):
    """Mixture-of-experts feed-forward layer: ``y, aux = moe(x)`` for ``x [..., d_model]``.

    Args:
        d_model, d_hidden: model width and each expert's hidden width.
        num_experts, top_k: experts in the layer and experts per token (any ``1 <= top_k <= num_experts``).
        capacity_factor: ``None`` (default) is dropless; a number caps each expert at
            ``ceil(capacity_factor * tokens * top_k / num_experts)`` assignments per call and drops
            the rest by the policy in :mod:`sparsetrain.moe.dispatch` (1st choices before 2nd, then token order).
        router: ``"softmax"`` or ``"sigmoid"`` scores; ``renormalize`` rescales the chosen weights to sum
            to one (default: on for sigmoid, off for softmax).
        routed_scaling_factor: multiplies the combine weights after renormalization (DeepSeek-V3: 2.5).
        n_group, topk_group: group-limited routing (DeepSeek-V3): experts form ``n_group`` equal groups and a
            token picks its experts among its ``topk_group`` best groups (default: no limit).
        shared_experts: number of always-on experts (one dense MLP of width ``shared_experts * d_hidden``,
            or ``shared_hidden`` when given); ``shared_gate`` scales its output by a learned per-token
            sigmoid gate (Qwen2-MoE).
        activation: ``"swiglu"`` (default), ``"gelu"``, ``"relu"`` or ``"silu"``.
        aux_loss_weight, z_loss_weight: weights of the load-balancing loss and router z-loss in ``aux.loss``.
        expert_bias: DeepSeek-V3 selection-only bias; call :meth:`update_expert_bias` after each optimizer
            step (it uses the token counts seen since the last call, summed over ranks).
        sharding: ``None`` (all experts here), :class:`~sparsetrain.moe.FSSDP` or
            :class:`~sparsetrain.moe.ExpertParallel`: shorthand for ``shard_experts(MoE(...), sharding)`` (the one
            planner), except that the whole expert table is never built: each rank builds only its shard from
            the layer's seed. Same weights and inputs give the same function in every mode.
        backend: the grouped-matmul backend of the experts (:data:`sparsetrain.moe.grouped.BACKENDS`: ``"native"``,
            ``"loop"``, ``"bucketed"``); ``None`` (default) measures them on the first call of each shape and uses
            the fastest (:mod:`sparsetrain.moe.autotune`; ``SPARSETRAIN_MOE_BACKENDS=table.json`` keeps the choices on
            disk). All compute the same function up to float rounding.

    Returns ``(y, aux)``: ``y`` has the shape and dtype of ``x``; ``aux`` is a :class:`MoEAux`.

    Under a sharding every rank passes its own tokens. The auxiliary losses use the counts of all
    ranks, and each rank's ``aux.loss`` is its share, scaled so that the *mean over ranks* equals the
    loss of the whole global batch; expert-shard gradients are averaged over ranks the same way. With
    per-rank task losses that are means over equally sized local batches, averaging replicated
    gradients (:func:`~sparsetrain.moe.sync_dense_grads`, or DDP with
    :func:`~sparsetrain.moe.sharded_parameter_names` ignored) gives exactly the single-process gradients.
    ``capacity_factor`` applies to each rank's local tokens.
    Expert weights are initialized row by row from one draw of the global RNG, so the same seed gives
    the same layer in every sharding mode and world size.
    """

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        num_experts: int,
        top_k: int = 2,
        *,
        capacity_factor: float | None = None,
        router: str = "softmax",
        renormalize: bool | None = None,
        shared_experts: int = 0,
        shared_hidden: int | None = None,
        shared_gate: bool = False,
        routed_scaling_factor: float = 1.0,
        n_group: int = 1,
        topk_group: int | None = None,
        activation: str = "swiglu",
        aux_loss_weight: float = 0.01,
        z_loss_weight: float = 1e-3,
        expert_bias: bool = False,
        bias_update_rate: float = 1e-3,
        sharding=None,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        grouped.check_backend(backend, "MoE: backend")
        self.backend = backend
        check = {"error": SettingError, "type_error": SettingTypeError}
        d_model = _args.integer("MoE", "d_model", d_model, low=1, **check)
        d_hidden = _args.integer("MoE", "d_hidden", d_hidden, low=1, **check)
        num_experts = _args.integer("MoE", "num_experts", num_experts, low=1, **check)
        top_k = _args.integer("MoE", "top_k", top_k, low=1, high=num_experts, **check)
        # inf would make every expert's capacity infinite (an OverflowError at the first forward): None is dropless
        capacity_factor = _args.number("MoE", "capacity_factor", capacity_factor, low=0, low_open=True, optional=True,
                                       **check)
        _args.choice("MoE", "router", router, SCORES, error=SettingError)
        renormalize = _args.boolean("MoE", "renormalize", renormalize, optional=True, type_error=SettingTypeError)
        shared_experts = _args.integer("MoE", "shared_experts", shared_experts, low=0, **check)
        shared_hidden = _args.integer("MoE", "shared_hidden", shared_hidden, low=1, optional=True, **check)
        shared_gate = _args.boolean("MoE", "shared_gate", shared_gate, type_error=SettingTypeError)
        routed_scaling_factor = _args.number("MoE", "routed_scaling_factor", routed_scaling_factor, low=0,
                                             low_open=True, **check)
        n_group = _args.integer("MoE", "n_group", n_group, low=1, **check)
        topk_group = _args.integer("MoE", "topk_group", topk_group, low=1, optional=True, **check)
        _args.choice("MoE", "activation", activation, ACTIVATIONS, error=SettingError)
        aux_loss_weight = _args.number("MoE", "aux_loss_weight", aux_loss_weight, low=0, **check)
        z_loss_weight = _args.number("MoE", "z_loss_weight", z_loss_weight, low=0, **check)
        expert_bias = _args.boolean("MoE", "expert_bias", expert_bias, type_error=SettingTypeError)
        bias_update_rate = _args.number("MoE", "bias_update_rate", bias_update_rate, low=0, **check)
        if not shared_experts and (shared_hidden is not None or shared_gate):
            raise SettingError("MoE: shared_hidden and shared_gate describe the shared experts; set shared_experts "
                               ">= 1")
        self.d_model, self.d_hidden, self.num_experts, self.top_k = d_model, d_hidden, num_experts, top_k
        self.capacity_factor = capacity_factor
        self.aux_loss_weight, self.z_loss_weight = float(aux_loss_weight), float(z_loss_weight)
        shape = ExpertShape(d_model, d_hidden, activation)
        base_seed = int(torch.randint(0, 2**62, (1,)).item())
        self.router = Router(
            d_model, num_experts, top_k, score=router, renormalize=renormalize,
            expert_bias=expert_bias, bias_update_rate=bias_update_rate,
            routed_scaling_factor=routed_scaling_factor, n_group=n_group, topk_group=topk_group,
        )  # fmt: skip
        self.shared = None
        if shared_experts:
            width = shared_experts * d_hidden if shared_hidden is None else shared_hidden
            self.shared = SharedExperts(d_model, width, activation, gate=shared_gate)
        self.expert_shape, self.expert_seed = shape, base_seed  # every placement of the experts builds from these
        self.experts = LocalExperts(shape, num_experts, base_seed) if sharding is None else None
        self.register_buffer("pending_counts", torch.zeros(num_experts, dtype=torch.int64), persistent=False)
        if sharding is not None:
            shard_experts(self, sharding)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, MoEAux]:
        """Route, run the chosen experts, combine; see the class docstring."""
        if x.shape[-1] != self.d_model:
            raise InputError(
                f"MoE.forward: input has last dimension {x.shape[-1]} but the layer was built with "
                f"d_model={self.d_model}; reshape the input or rebuild the layer"
            )
        if not x.dtype.is_floating_point:
            raise InputError(f"MoE.forward: input dtype {x.dtype} is not floating point")
        lead = x.shape[:-1]
        xt = x.reshape(-1, self.d_model)
        num_tokens = xt.shape[0]
        routing = self.router(xt)
        plan = plan_dispatch(routing.experts, self.num_experts, self.capacity_factor)
        counts, total_tokens = self.experts.global_stats(plan.selected, num_tokens)
        if self.training and self.router.expert_bias is not None:
            self.pending_counts += counts.to(self.pending_counts.device)
        x_sorted = permute(xt, plan)  # sorted once; its backward and combine's are gathers too
        expert_out = self.experts(x_sorted, plan.counts, backend=self.backend_for(x_sorted, plan.counts, num_tokens))
        y = combine(expert_out, plan, routing.weights, num_tokens)
        if self.shared is not None:
            y = y + self.shared(xt)
        world = self.experts.world_size
        lb = load_balancing_loss(
            routing.scores, counts, total_tokens, self.top_k, world_size=world,
            normalize_scores=self.router.score == "sigmoid",
        )  # fmt: skip
        z = router_z_loss(routing.logits, total_tokens, world_size=world)
        aux = MoEAux(
            loss=self.aux_loss_weight * lb + self.z_loss_weight * z,
            load_balancing_loss=lb,
            z_loss=z,
            counts=plan.selected,
            dropped=plan.dropped,
            router_logits=routing.logits,
        )
        return y.reshape(*lead, self.d_model).to(x.dtype), aux

    def backend_for(self, x_sorted: torch.Tensor, counts: torch.Tensor, num_tokens: int) -> str:
        """The grouped-matmul backend for this call: ``backend`` when forced (argument, or
        :func:`~sparsetrain.moe.grouped.set_backend`), else the measured choice for this shape
        (:func:`sparsetrain.moe.autotune.choose`, timed here on ``x_sorted`` and ``counts`` the first time)."""
        forced = self.backend or grouped.forced_backend()
        if forced is not None:
            return forced
        shape, dev, dt = self.expert_shape, x_sorted.device, x_sorted.dtype
        train = torch.is_grad_enabled()
        key = autotune.tune_key(dev, dt, shape.d_model, shape.d_hidden, shape.activation, self.num_experts, self.top_k,
                                num_tokens, train)  # fmt: skip
        backends = grouped.candidates(dev, dt, shape.d_model, shape.in_width, shape.d_hidden)
        local = self.experts if isinstance(self.experts, LocalExperts) else None
        state: dict = {}

        def run(backend: str, backward: bool) -> None:
            if "w" not in state:  # the layer's own weights where it holds them all, else constant ones of its shapes
                if local is not None and local.w_in.dtype == dt:  # (no random draw: the global RNG stays untouched)
                    w_in, w_out = local.w_in.detach(), local.w_out.detach()
                else:
                    w_in = torch.full((self.num_experts, shape.d_model, shape.in_width), 0.01, device=dev, dtype=dt)
                    w_out = torch.full((self.num_experts, shape.d_hidden, shape.d_model), 0.01, device=dev, dtype=dt)
                state["w"] = (w_in.requires_grad_(train), w_out.requires_grad_(train))
                state["x"] = x_sorted.detach().requires_grad_(train)
            w_in, w_out = state["w"]
            with torch.set_grad_enabled(backward):
                out = expert_ffn(state["x"], w_in, w_out, counts, shape.activation, backend=backend)
                if backward:
                    torch.autograd.grad(out, (state["x"], w_in, w_out), torch.ones_like(out))

        return autotune.choose(key, backends, run, dev, train)

    @torch.no_grad()
    def update_expert_bias(self) -> None:
        """Apply the selection-bias update from the counts seen since the last call, then reset them."""
        self.router.update_bias(self.pending_counts)
        self.pending_counts.zero_()

    def extra_repr(self) -> str:
        cap = "dropless" if self.capacity_factor is None else f"capacity_factor={self.capacity_factor}"
        return (f"d_model={self.d_model}, d_hidden={self.d_hidden}, num_experts={self.num_experts}, "
                f"top_k={self.top_k}, {cap}")


def shard_experts(module: nn.Module, sharding) -> nn.Module:
    """Place the experts of every :class:`MoE` in ``module`` (itself included) by ``sharding``, as ``fully_shard``
    applies FSDP2 to a built model: ``shard_experts(model, FSSDP())`` or ``ExpertParallel(group)``.

    Each layer's experts become this rank's shard, holding the layer's current weights (every rank must hold the same
    ones: the same seed, or the same checkpoint loaded), so the layer computes what it did before. Call it on every
    rank, before building the optimizer and before wrapping in DDP / ``fully_shard`` (their ignore lists take
    :func:`~sparsetrain.moe.sharded_parameter_names`). Returns ``module``.

    Planned, then applied: every layer is checked and its shard built before any layer changes, so a refusal
    (no MoE layer, a layer already sharded, a sharding that does not fit) leaves ``module`` as it was.
    """
    if isinstance(sharding, type) or not callable(getattr(sharding, "build", None)):
        raise SettingError(f"shard_experts: sharding={sharding!r} is not a sharding; pass an instance such as "
                           "FSSDP() or ExpertParallel(group)")
    layers = [(name, m) for name, m in module.named_modules() if isinstance(m, MoE)]
    if not layers:
        raise SettingError(f"shard_experts: no sparsetrain MoE layer in {type(module).__name__}; build the model "
                           "with sparsetrain.moe.MoE (a Hugging Face model: replace_moe_blocks(model) first)")
    for name, layer in layers:
        if layer.experts is not None and not isinstance(layer.experts, LocalExperts):
            where = f" {name!r}" if name else ""
            raise CheckpointError(f"shard_experts: the experts of MoE layer{where} are already sharded "
                                  f"({layer.experts.mode}); shard each layer once, nothing was changed")
    plan = [(layer, _shard_of(layer, sharding)) for _, layer in layers]
    for layer, sharded in plan:
        layer.experts = sharded
    return module


def _shard_of(layer: MoE, sharding) -> nn.Module:
    """This rank's shard of ``layer``'s experts under ``sharding``, holding the layer's current weights."""
    sharded = sharding.build(layer.expert_shape, layer.num_experts, layer.expert_seed)
    if layer.experts is not None:  # the layer's own weights, which may have been trained or loaded since it was built
        sharded.load_state_dict(layer.experts.state_dict())
    return sharded


def update_expert_biases(model: nn.Module) -> None:
    """Call :meth:`MoE.update_expert_bias` on every MoE layer of ``model`` built with ``expert_bias=True``."""
    for m in model.modules():
        if isinstance(m, MoE) and m.router.expert_bias is not None:
            m.update_expert_bias()


def finish_step(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Call after ``optimizer.step()`` on every rank: refreshes FSSDP replicas from their owners,
    runs rebalances that are due (moving optimizer state rows with the experts) and applies the
    expert-bias updates of layers built with ``expert_bias=True``."""
    for m in model.modules():
        if isinstance(m, MoE):
            after = getattr(m.experts, "after_step", None)
            if after is not None:
                after(optimizer)
            if m.router.expert_bias is not None:
                m.update_expert_bias()
