"""An independent, deliberately naive MoE reference: one token and one choice at a time."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def act(h: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "swiglu":
        half = h.shape[-1] // 2
        return F.silu(h[..., :half]) * h[..., half:]
    return {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}[activation](h)


def reference_moe(x, router_w, w_in, w_out, *, top_k, score="softmax", renormalize=None, bias=None,
                  capacity_factor=None, activation="swiglu", shared=None, aux_w=0.01, z_w=1e-3):
    """``(y, aux_loss, lb, z, counts, dropped)`` computed with Python loops over tokens and choices."""
    renormalize = (score == "sigmoid") if renormalize is None else renormalize
    x2 = x.reshape(-1, x.shape[-1])
    num_tokens, num_experts = x2.shape[0], router_w.shape[0]
    logits = x2 @ router_w.t()
    scores = torch.softmax(logits, -1) if score == "softmax" else torch.sigmoid(logits)
    pick = scores.detach() + (0 if bias is None else bias.to(scores.dtype))
    choices = [sorted(range(num_experts), key=lambda e, t=t: -float(pick[t, e]))[:top_k] for t in range(num_tokens)]
    counts = torch.zeros(num_experts, dtype=torch.int64)
    for c in choices:
        for e in c:
            counts[e] += 1
    keep = [[True] * top_k for _ in range(num_tokens)]
    dropped = 0
    if capacity_factor is not None:
        import math

        cap = math.ceil(capacity_factor * num_tokens * top_k / num_experts)
        used = [0] * num_experts
        for j in range(top_k):
            for t in range(num_tokens):
                e = choices[t][j]
                if used[e] < cap:
                    used[e] += 1
                else:
                    keep[t][j] = False
                    dropped += 1
    rows = []
    for t in range(num_tokens):
        ws = torch.stack([scores[t, e] for e in choices[t]])
        if renormalize:
            ws = ws / ws.sum()
        acc = torch.zeros_like(x2[t])
        for j, e in enumerate(choices[t]):
            if keep[t][j]:
                acc = acc + ws[j] * (act(x2[t] @ w_in[e], activation) @ w_out[e])
        if shared is not None:
            acc = acc + act(x2[t] @ shared[0], activation) @ shared[1]
        rows.append(acc)
    y = torch.stack(rows).reshape(x.shape)
    probs = scores / scores.sum(-1, keepdim=True) if score == "sigmoid" else scores
    f = counts.to(x.dtype) / (num_tokens * top_k)
    lb = num_experts * (f * probs.mean(0)).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    return y, aux_w * lb + z_w * z, lb, z, counts, dropped
