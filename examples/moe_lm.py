"""A small transformer language model whose MLP is a mixture-of-experts layer (one line), trained
on synthetic token data. Runs in one process or under torchrun with FSSDP or expert parallelism,
the dense part averaged by hand, by DDP or sharded by FSDP2, with DCP checkpoints that resume at
any world size.

    python examples/moe_lm.py --steps 20
    torchrun --nproc-per-node 2 examples/moe_lm.py --sharding fssdp
    torchrun --nproc-per-node 2 examples/moe_lm.py --sharding fssdp --dp ddp
    torchrun --nproc-per-node 2 examples/moe_lm.py --sharding fssdp --dp fsdp2 --steps 10 --save /tmp/ckpt
    python examples/moe_lm.py --resume /tmp/ckpt --steps 20          # continues at step 10 in one process
    torchrun --nproc-per-node 2 examples/moe_lm.py --sharding expert-parallel
    torchrun --nproc-per-node 2 examples/moe_lm.py --model mixtral --sharding fssdp --dp fsdp2   # HF Mixtral

Every rank trains on its slice of the same global batch; the printed loss is the global-batch
loss, so every mode prints the same numbers for the same seed.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from sparsetrain.errors import SparsetrainError
from sparsetrain.moe import (
    FSSDP,
    DCPState,
    ExpertParallel,
    MoE,
    finish_step,
    load_dcp,
    sharded_parameter_names,
    sync_dense_grads,
)


def make_sharding(name: str, **fssdp_kwargs):
    """``"none"``, ``"fssdp"`` or ``"expert-parallel"`` -> the ``sharding=`` argument of :class:`MoE`."""
    if name == "none":
        return None
    if name == "fssdp":
        return FSSDP(**fssdp_kwargs)
    if name == "expert-parallel":
        return ExpertParallel()
    raise SystemExit(f"unknown --sharding {name!r}; use none, fssdp or expert-parallel")


class Block(nn.Module):
    """Pre-norm transformer block; the MLP is an MoE."""

    def __init__(self, d: int, heads: int, num_experts: int, top_k: int, sharding) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = MoE(d, 2 * d, num_experts, top_k, sharding=sharding)  # <- the one line that makes it an MoE model

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.ln1(h)
        h = h + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
        m, aux = self.mlp(self.ln2(h))
        return h + m, aux.loss


class TinyLM(nn.Module):
    """Token + position embeddings, ``layers`` MoE blocks, a tied-free output head."""

    def __init__(self, vocab: int, d: int = 32, heads: int = 4, layers: int = 2, seq: int = 16,
                 num_experts: int = 8, top_k: int = 2, sharding_factory=lambda: None) -> None:  # fmt: skip
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, num_experts, top_k, sharding_factory()) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = tokens.shape[1]
        h = self.tok(tokens) + self.pos(torch.arange(s, device=tokens.device))
        mask = torch.triu(torch.full((s, s), float("-inf"), dtype=h.dtype, device=h.device), diagonal=1)
        aux = h.new_zeros(())
        for block in self.blocks:
            h, a = block(h, mask)
            aux = aux + a
        return self.head(self.ln(h)), aux


def mixtral_lm(vocab: int, seq: int, sharding) -> nn.Module:
    """A 2-layer Hugging Face Mixtral (random weights) whose MoE blocks are sparsetrain ``MoE`` layers.

    ``aux_loss="sparsetrain"``: the load-balancing loss over the tokens of all ranks enters backward
    through each block (see :mod:`sparsetrain.moe.hf`); the printed loss is the language-model loss."""
    from transformers import MixtralConfig, MixtralForCausalLM

    from sparsetrain.moe.hf import replace_moe_blocks

    cfg = MixtralConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2,
                        max_position_embeddings=seq, bos_token_id=None, eos_token_id=None,
                        pad_token_id=None)  # fmt: skip
    return replace_moe_blocks(MixtralForCausalLM(cfg), sharding=sharding, aux_loss="sparsetrain")


def data_parallel(model: nn.Module, dp: str, layers=()) -> nn.Module:
    """The dense part of ``model`` data-parallel: ``"sync"`` (gradients averaged by :func:`sync_dense_grads`
    after backward), ``"ddp"`` or ``"fsdp2"`` (``fully_shard`` on each of ``layers``, then the root).

    Expert shards are left out of both DDP and FSDP2: their sharding already reduce-scatters their
    gradients (summed over ranks, then divided by the world size, which is DDP's and FSDP2's averaging).
    """
    if dp == "sync" or not dist.is_initialized():
        return model
    names = sharded_parameter_names(model)
    if dp == "ddp":
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)
        return DistributedDataParallel(model)
    if dp == "fsdp2":
        ignored = {p for n, p in model.named_parameters() if n in set(names)}
        for layer in layers:
            fully_shard(layer, ignored_params=ignored)
        fully_shard(model, ignored_params=ignored)
        return model
    raise SystemExit(f"unknown --dp {dp!r}; use sync, ddp or fsdp2")


def synthetic_batch(step: int, batch: int, seq: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """``[batch, seq + 1]`` tokens following ``next = (5 * cur + 3) % vocab`` 80% of the time, random otherwise."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    tokens = torch.empty(batch, seq + 1, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
    noise = torch.randint(0, vocab, (batch, seq), generator=g)
    keep = torch.rand(batch, seq, generator=g) < 0.8
    for t in range(seq):
        tokens[:, t + 1] = torch.where(keep[:, t], (5 * tokens[:, t] + 3) % vocab, noise[:, t])
    return tokens


def train(sharding: str = "none", *, model: str = "tiny", dp: str = "sync", steps: int = 10, batch: int = 8,
          seq: int = 16, vocab: int = 64, lr: float = 1e-2, seed: int = 0, dtype: torch.dtype = torch.float32,
          fssdp_kwargs: dict | None = None, resume: str | None = None, save: str | None = None,
          log=None) -> tuple[list[float], nn.Module]:  # fmt: skip
    """Train :class:`TinyLM` (``model="tiny"``) or :func:`mixtral_lm` (``"mixtral"``) up to step ``steps``; returns the
    global-batch loss of every step run (same on every rank) and the model. ``resume``/``save``: a DCP checkpoint folder
    to start from / write at the end (any world size, sharding mode and ``dp`` can resume any other)."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if batch % world:
        raise SystemExit(f"--batch {batch} must be divisible by the world size {world}")
    torch.manual_seed(seed)
    make = lambda: make_sharding(sharding, **(fssdp_kwargs or {}))  # noqa: E731
    if model == "tiny":
        lm = TinyLM(vocab, seq=seq, sharding_factory=make).to(dtype)
        layers = lm.blocks
    elif model == "mixtral":
        lm = mixtral_lm(vocab, seq, make()).to(dtype)
        layers = lm.model.layers
    else:
        raise SystemExit(f"unknown --model {model!r}; use tiny or mixtral")
    net = data_parallel(lm, dp, layers=layers)
    opt = torch.optim.Adam(lm.parameters(), lr=lr)  # after data_parallel: FSDP2 replaces parameters by DTensors
    start = 0
    if resume is not None:
        state = {"train": DCPState(lm, opt), "step": 0}
        load_dcp(state, checkpoint_id=resume)  # dcp.load without unpickling code from the checkpoint
        start = state["step"]
    per_rank = batch // world
    losses = []
    for step in range(start, steps):
        t0 = time.perf_counter()
        tokens = synthetic_batch(step, batch, seq, vocab, seed)[rank * per_rank : (rank + 1) * per_rank]
        if isinstance(lm, TinyLM):
            logits, aux = net(tokens[:, :-1])
        else:
            logits, aux = net(input_ids=tokens[:, :-1]).logits, 0.0
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1)) + aux
        opt.zero_grad()
        loss.backward()
        if dp == "sync":
            sync_dense_grads(lm)  # average replicated parameters' gradients (expert shards reduce themselves)
        opt.step()
        finish_step(lm, opt)  # refresh FSSDP replicas, due rebalances
        value = loss.detach().clone()
        if world > 1:
            dist.all_reduce(value)
            value /= world
        losses.append(float(value))
        if log is not None:
            log(step, float(value), time.perf_counter() - t0)
    if save is not None:
        dcp.save({"train": DCPState(lm, opt), "step": steps}, checkpoint_id=save)
    return losses, lm


def main() -> None:
    summary, usage = __doc__.split("\n\n", 2)[:2]
    p = argparse.ArgumentParser(description=summary, epilog="examples:\n" + usage,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sharding", default="none", choices=["none", "fssdp", "expert-parallel"],
                   help="where the experts live: none (every rank holds all), fssdp (sharded, each step gathers the "
                        "experts its tokens use) or expert-parallel (tokens go to the experts' ranks); default none")
    p.add_argument(
        "--model",
        default="tiny",
        choices=["tiny", "mixtral"],
        help="tiny: TinyLM; mixtral: HF Mixtral via replace_moe_blocks",
    )
    p.add_argument(
        "--dp",
        default="sync",
        choices=["sync", "ddp", "fsdp2"],
        help="data parallelism of the dense part under torchrun: sync_dense_grads, DDP or FSDP2",
    )
    p.add_argument(
        "--steps", type=int, default=20, help="train up to this step (a resumed run continues from its checkpoint's)"
    )
    p.add_argument("--batch", type=int, default=8,
                   help="sequences in the global batch, split over the ranks (default 8)")
    p.add_argument("--rematerialize", action="store_true", help="FSSDP: gather experts again in backward")
    p.add_argument("--save", help="write a DCP checkpoint folder after the last step")
    p.add_argument("--resume", help="start from a DCP checkpoint folder (written at any world size)")
    args = p.parse_args()
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    kwargs = {"rematerialize": True} if args.rematerialize else {}

    def log(step, value, seconds):
        if rank == 0:
            print(f"step {step:3d}  loss {value:.7f}  {1000 * seconds:6.1f} ms")

    try:
        train(args.sharding, model=args.model, dp=args.dp, steps=args.steps, batch=args.batch, fssdp_kwargs=kwargs,
              resume=args.resume, save=args.save, log=log)  # fmt: skip
    except SparsetrainError as exc:  # e.g. a --resume folder that is not a checkpoint: one line, not a traceback
        raise SystemExit(f"moe_lm.py: {exc}") from None
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
