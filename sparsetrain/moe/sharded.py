"""What the sharded expert modes share: a row shard of the expert table, global routing
statistics, gradient averaging, and a layout-independent ``state_dict`` (full tables, or DTensors
over the expert dimension for :mod:`sparsetrain.moe.dcp`)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

try:
    from torch.distributed.tensor import DTensor, Shard
except ImportError:  # torch < 2.4 (e.g. 2.2.1, which DGL needs) keeps them in the private module
    from torch.distributed._tensor import DTensor, Shard

from sparsetrain.collective import RowPlacement, all_reduce_sum, collective_stats, group_info, sparse_all_gather
from sparsetrain.errors import CheckpointError, SettingError
from sparsetrain.moe.experts import ExpertShape

SHARDED_ATTR = "_sparsetrain_sharded"


class ShardedExperts(nn.Module):
    """Base of the sharded expert tables: ``shard`` holds this rank's rows of the ``[E, row_size]`` table.

    The shard's gradient is the sum over ranks divided by the world size, the same averaging
    data-parallel training applies to replicated parameters. ``state_dict`` holds the full
    logical ``w_in``/``w_out`` (a collective: every rank must call it), so a checkpoint loads into
    any world size or sharding mode, or into a single-process layer. With ``dtensor_state_dict``
    set (what :mod:`sparsetrain.moe.dcp` does while it builds a checkpoint) the tables are DTensors
    sharded over the expert dimension instead, built without gathering the whole table.
    ``load_state_dict`` accepts either form.
    """

    mode = "sharded"
    dtensor_state_dict = False

    def __init__(self, shape: ExpertShape, num_experts: int, base_seed: int, group, placement: RowPlacement,
                 stats) -> None:
        super().__init__()
        self.shape, self.num_experts, self.group = shape, num_experts, group
        info = group_info(group)
        self.rank, self.world_size = info.rank, info.world_size
        self.stats = stats if stats is not None else collective_stats()
        self._check_placement(placement)
        self.placement = placement
        self._set_shard(shape.init_rows(placement.local_ids(self.rank), base_seed))

    def _set_shard(self, rows: torch.Tensor) -> nn.Parameter:
        """Install ``rows`` as a new ``shard`` parameter (a new object: autograd caches a leaf's shape)."""
        self.shard = nn.Parameter(rows)
        setattr(self.shard, SHARDED_ATTR, True)
        if self.world_size > 1:
            scale = 1.0 / self.world_size
            self.shard.register_hook(lambda g: g * scale)
        return self.shard

    def _check_placement(self, placement: RowPlacement) -> None:
        if not isinstance(placement, RowPlacement):
            raise SettingError(f"MoE {self.mode}: placement must be a sparsetrain.collective.RowPlacement, got "
                               f"{type(placement).__name__}")
        if placement.world_size != self.world_size:
            raise SettingError(
                f"MoE {self.mode}: the placement is for world size {placement.world_size} but the process group has "
                f"{self.world_size} ranks; build the placement with world_size={self.world_size}"
            )
        if placement.num_rows != self.num_experts:
            raise SettingError(
                f"MoE {self.mode}: the placement has {placement.num_rows} rows but the layer has {self.num_experts} "
                "experts"
            )

    @property
    def owner_placement(self) -> RowPlacement:
        """The placement without replicas (owned rows only)."""
        return self.placement

    def global_stats(self, counts: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, int]:
        """Per-expert counts and the token count summed over every rank of the group."""
        both = torch.cat([counts.to(torch.int64), torch.tensor([num_tokens], dtype=torch.int64, device=counts.device)])
        both = all_reduce_sum(both, self.group)
        return both[:-1], int(both[-1])

    def full_rows(self) -> torch.Tensor:
        """The whole ``[E, row_size]`` table on every rank (a collective)."""
        base = self.owner_placement
        with torch.no_grad():
            owned = self.shard.detach()[: base.num_owned(self.rank)]
            return sparse_all_gather(owned, torch.arange(self.num_experts), placement=base, group=self.group,
                                     stats=self.stats)

    # ------------------------------------------------------------------ checkpoints
    @property
    def w_in(self) -> torch.Tensor:
        """This rank's rows (owned, then replicas) of the ``w_in`` table: a view of ``shard``.

        The state_dict keys ``w_in``/``w_out`` name these attributes, as checkpoint tools expect of a key."""
        return self.shape.unpack(self.shard)[0]

    @property
    def w_out(self) -> torch.Tensor:
        """This rank's rows of the ``w_out`` table: a view of ``shard``."""
        return self.shape.unpack(self.shard)[1]

    def chunk_placement(self) -> RowPlacement:
        """The experts in DTensor ``Shard(0)`` order: rank ``r`` holds the ``r``-th ``torch.chunk`` block of ids."""
        per = -(-self.num_experts // self.world_size)
        return RowPlacement.from_offsets([min(r * per, self.num_experts) for r in range(self.world_size + 1)])

    def _mesh(self) -> DeviceMesh:
        if getattr(self, "_device_mesh", None) is None:
            group = self.group if self.group is not None else dist.group.WORLD
            self._device_mesh = DeviceMesh.from_group(group, device_type=self.shard.device.type)
        return self._device_mesh

    def to_dtensors(self, local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(w_in, w_out)`` tables from ``local``, a tensor in this rank's layout (the shard or optimizer state
        shaped like it), as DTensors sharded over the expert dimension (plain tensors at world size 1).

        A collective: owned rows move to the rank whose ``torch.chunk`` block holds them (one sparse gather)."""
        owned = local.detach()[: self.owner_placement.num_owned(self.rank)].contiguous()
        if self.world_size == 1:
            rows = owned
        else:
            chunk = self.chunk_placement()
            with torch.no_grad():
                rows = sparse_all_gather(owned, chunk.owned_ids(self.rank), placement=self.owner_placement,
                                         group=self.group, stats=self.stats)  # fmt: skip
        w_in, w_out = (t.contiguous() for t in self.shape.unpack(rows))
        if self.world_size == 1:
            return w_in, w_out
        mesh = self._mesh()
        shapes = ((self.num_experts, *w_in.shape[1:]), (self.num_experts, *w_out.shape[1:]))
        return tuple(
            DTensor.from_local(t, mesh, [Shard(0)], run_check=False, shape=torch.Size(s),
                               stride=torch.empty(s, device="meta").stride())
            for t, s in zip((w_in, w_out), shapes)
        )

    def from_tables(self, w_in: torch.Tensor, w_out: torch.Tensor, what: str) -> torch.Tensor:
        """This rank's rows (owned, then replicas) of the ``w_in``/``w_out`` tables, full tensors or DTensors as
        :meth:`to_dtensors` makes them (a collective then). ``what`` names the tables in errors."""
        want_in = (self.num_experts, self.shape.d_model, self.shape.in_width)
        want_out = (self.num_experts, self.shape.d_hidden, self.shape.d_model)
        if tuple(w_in.shape) != want_in or tuple(w_out.shape) != want_out:
            raise CheckpointError(
                f"{what}: checkpoint shapes {tuple(w_in.shape)}/{tuple(w_out.shape)} do not match the layer's "
                f"{want_in}/{want_out}; build the layer with the checkpoint's d_model, d_hidden, num_experts and "
                "activation"
            )
        ids = self.placement.local_ids(self.rank)
        sharded = [isinstance(t, DTensor) and tuple(t.placements) == (Shard(0),) for t in (w_in, w_out)]
        if all(sharded) and self.world_size > 1 and w_in.device_mesh.size() == self.world_size:
            chunk = self.chunk_placement()
            rows = self.shape.pack(w_in.to_local(), w_out.to_local())
            if rows.shape[0] != chunk.num_owned(self.rank):
                raise CheckpointError(f"{what}: the DTensor holds {rows.shape[0]} experts on rank {self.rank}, not the "
                                      f"{chunk.num_owned(self.rank)} of torch.chunk's Shard(0) layout; build it with "
                                      "to_dtensors")  # fmt: skip
            with torch.no_grad():
                return sparse_all_gather(rows, ids, placement=chunk, group=self.group, stats=self.stats)
        w_in, w_out = (t.full_tensor() if isinstance(t, DTensor) else t for t in (w_in, w_out))
        return self.shape.pack(w_in, w_out)[ids.to(w_in.device)]

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        if self.dtensor_state_dict:
            w_in, w_out = self.to_dtensors(self.shard)
        else:
            w_in, w_out = (t.contiguous() for t in self.shape.unpack(self.full_rows()))
        destination[prefix + "w_in"] = w_in
        destination[prefix + "w_out"] = w_out

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        keys = (prefix + "w_in", prefix + "w_out")
        if any(k not in state_dict for k in keys):
            missing_keys.extend(k for k in keys if k not in state_dict)
            return
        try:
            rows = self.from_tables(state_dict[keys[0]], state_dict[keys[1]], f"{prefix}w_in/w_out")
        except CheckpointError as exc:
            error_msgs.append(str(exc))
            return
        with torch.no_grad():
            self.shard.copy_(rows.to(self.shard.device, self.shard.dtype))

    def extra_repr(self) -> str:
        return (f"rank={self.rank}, world_size={self.world_size}, local_rows={self.shard.shape[0]}, "
                f"placement={self.placement!r}")


def sharded_parameter_names(model: nn.Module) -> list[str]:
    """Names of the expert-shard parameters in ``model`` (for DDP's ignore list: they must not be all-reduced)."""
    return [n for n, p in model.named_parameters() if getattr(p, SHARDED_ATTR, False)]


def sync_dense_grads(model: nn.Module, group=None) -> None:
    """Average the gradients of every replicated parameter over ``group`` (expert shards excluded).

    A missing gradient counts as zero, so every rank joins the same all-reduce. Use this instead of
    DDP, or wrap with DDP after ignoring :func:`sharded_parameter_names`.
    """
    world = group_info(group).world_size
    if world == 1:
        return
    params = [p for p in model.parameters() if p.requires_grad and not getattr(p, SHARDED_ATTR, False)]
    if not params:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    flat = all_reduce_sum(flat, group) / world
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
        offset += n

