"""Attention kernels against dense float64 references built from an explicit N x N mask, PyTorch's SDPA with that mask,
and PyG's TransformerConv."""

import numpy as np
import pytest
import torch

from sparsetrain.nn.attention import Packing, add_self_loops, cluster_attention, edge_attention, linear_attention


def dense_masked_attention(q, k, v, mask, scale):
    """Reference: full score matrix, -inf where ``mask`` [heads?, Nd, Ns] is False, softmax, rows with no key -> 0."""
    scores = torch.einsum("ihd,jhd->hij", q, k) * scale
    scores = scores.masked_fill(~mask[None], float("-inf"))
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("hij,jhd->ihd", p, v)


def random_block(num_src, num_dst, num_edges, seed):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    dst = torch.randint(0, num_dst, (num_edges,), generator=g)
    ei = torch.unique(torch.stack([src, dst]), dim=1)  # the dense reference cannot hold duplicate edges
    return ei[:, torch.randperm(ei.shape[1], generator=g)]


def qkv(num_dst, num_src, heads, dim, seed):
    g = torch.Generator().manual_seed(seed)
    make = lambda n: torch.randn(n, heads, dim, generator=g, dtype=torch.float64, requires_grad=True)  # noqa: E731
    return make(num_dst), make(num_src), make(num_src)


@pytest.mark.parametrize("num_src,num_dst,num_edges,chunk", [(12, 5, 30, 7), (40, 40, 150, 1 << 18), (30, 9, 4, 3)])
def test_edge_attention_matches_dense_masked_reference(num_src, num_dst, num_edges, chunk):
    heads, dim = 3, 4
    ei = add_self_loops(random_block(num_src, num_dst, num_edges, seed=num_src), num_dst)
    q, k, v = qkv(num_dst, num_src, heads, dim, seed=1)
    scale = dim ** -0.5
    out = edge_attention(q, k, v, ei, chunk_edges=chunk)
    mask = torch.zeros(num_dst, num_src, dtype=torch.bool)
    mask[ei[1], ei[0]] = True
    ref = dense_masked_attention(q, k, v, mask, scale)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    weight = torch.randn_like(ref)
    grads = torch.autograd.grad((out * weight).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref * weight).sum(), (q, k, v))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_edge_attention_gradcheck_and_isolated_destination():
    q, k, v = qkv(4, 6, 2, 3, seed=3)
    ei = torch.tensor([[0, 1, 5, 2, 3], [0, 0, 1, 1, 3]])  # destination 2 has no edge -> output 0
    out = edge_attention(q, k, v, ei, chunk_edges=2)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    assert torch.autograd.gradcheck(lambda a, b, c: edge_attention(a, b, c, ei, chunk_edges=2), (q, k, v))


def test_add_self_loops_replaces_existing_loops():
    ei = torch.tensor([[0, 1, 2, 3], [0, 0, 2, 1]])
    out = add_self_loops(ei, num_dst=3)
    pairs = sorted(map(tuple, out.t().tolist()))
    assert pairs == [(0, 0), (1, 0), (1, 1), (2, 2), (3, 1)]


def block_diagonal_mask(groups):
    return groups[:, None] == groups[None, :]


def test_cluster_attention_matches_dense_block_diagonal_reference():
    g = torch.Generator().manual_seed(0)
    sizes = [1, 3, 9, 17, 2, 40, 8]  # several tile buckets (8, 16, 32, 64)
    groups = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    groups = groups[torch.randperm(len(groups), generator=g)]  # members scattered over the node ids
    n, heads, dim = len(groups), 2, 5
    q, k, v = qkv(n, n, heads, dim, seed=4)
    out = cluster_attention(q, k, v, Packing.from_groups(groups))
    ref = dense_masked_attention(q, k, v, block_diagonal_mask(groups), dim ** -0.5)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    weight = torch.randn_like(ref)
    for got, want in zip(
        torch.autograd.grad((out * weight).sum(), (q, k, v)), torch.autograd.grad((ref * weight).sum(), (q, k, v))
    ):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_cluster_attention_from_contiguous_pointers():
    ptr = torch.tensor([0, 4, 4, 11, 30])  # an empty cluster in the middle
    groups = torch.repeat_interleave(torch.arange(4), ptr[1:] - ptr[:-1])
    q, k, v = qkv(30, 30, 3, 4, seed=5)
    packing = Packing.from_pointers(ptr)
    assert sum(int(valid.sum()) for _, valid in packing.tiles) == 30
    out = cluster_attention(q, k, v, packing)
    torch.testing.assert_close(
        out, dense_masked_attention(q, k, v, block_diagonal_mask(groups), 0.5), rtol=1e-12, atol=1e-12
    )
    with pytest.raises(ValueError, match="max_size"):
        Packing.from_pointers(ptr, max_size=10)


def test_linear_attention_matches_explicit_formula_per_group():
    groups = torch.tensor([0, 1, 0, 2, 1, 0, 0, 2, 2, 2])
    q, k, v = qkv(10, 10, 2, 3, seed=6)
    out = linear_attention(q, k, v, Packing.from_groups(groups))
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    qn, kn, vn = phi(q).detach().numpy(), phi(k).detach().numpy(), v.detach().numpy()
    ref = np.zeros_like(vn)
    for i in range(10):
        members = np.flatnonzero(groups.numpy() == groups[i].item())
        for h in range(2):
            w = kn[members, h] @ qn[i, h]  # phi(k_j) . phi(q_i)
            ref[i, h] = (w[:, None] * vn[members, h]).sum(0) / w.sum()
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-12)
    whole = linear_attention(q, k, v)
    torch.testing.assert_close(
        whole, linear_attention(q, k, v, Packing.from_groups(torch.zeros(10, dtype=torch.int64)))
    )


def sdpa_with_mask(q, k, v, mask):
    """PyTorch's fused attention over all nodes, restricted by a boolean [Nq, Nk] mask (heads as the batch dim)."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
    )
    return out.transpose(0, 1)


def test_edge_and_cluster_attention_equal_sdpa_with_the_equivalent_dense_mask():
    n, heads, dim = 96, 4, 8
    ei = add_self_loops(random_block(n, n, 500, seed=11), n)
    groups = torch.randint(0, 9, (n,), generator=torch.Generator().manual_seed(11))
    q, k, v = qkv(n, n, heads, dim, seed=11)
    edge_mask = torch.zeros(n, n, dtype=torch.bool)
    edge_mask[ei[1], ei[0]] = True
    for ours, mask in ((edge_attention(q, k, v, ei, chunk_edges=128), edge_mask),
                       (cluster_attention(q, k, v, Packing.from_groups(groups)), block_diagonal_mask(groups))):
        ref = sdpa_with_mask(q, k, v, mask)
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
        weight = torch.randn_like(ref)
        for got, want in zip(
            torch.autograd.grad((ours * weight).sum(), (q, k, v)), torch.autograd.grad((ref * weight).sum(), (q, k, v))
        ):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_graph_transformer_sequence_equals_the_model_on_sdpa_masks(monkeypatch):
    from sparsetrain.nn import GraphTransformer
    from sparsetrain.nn import graph_transformer as gt

    n, heads = 80, 4
    g = torch.Generator().manual_seed(12)
    ei = torch.unique(torch.randint(0, n, (2, 400), generator=g), dim=1)
    ptr = torch.tensor([0, 16, 40, 41, 72, 80])
    x = torch.randn(n, 6, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    model = GraphTransformer(6, 16, 3, num_layers=2, heads=heads, dropout=0.0).double()
    ours = model.forward_sequence(x, ei, ptr)
    loops = add_self_loops(ei, n)
    edge_mask = torch.zeros(n, n, dtype=torch.bool)
    edge_mask[loops[1], loops[0]] = True
    cluster_mask = block_diagonal_mask(torch.repeat_interleave(torch.arange(len(ptr) - 1), ptr[1:] - ptr[:-1]))
    monkeypatch.setattr(gt, "edge_attention", lambda q, k, v, *_, **__: sdpa_with_mask(q, k, v, edge_mask))
    monkeypatch.setattr(gt, "cluster_attention", lambda q, k, v, *_, **__: sdpa_with_mask(q, k, v, cluster_mask))
    torch.testing.assert_close(ours, model.forward_sequence(x, ei, ptr), rtol=1e-10, atol=1e-12)


def test_edge_only_graph_transformer_equals_pyg_transformer_conv_with_the_same_weights():
    """The benchmark's PyG peer computes the same function: our sparse layer's attention is TransformerConv's."""
    from torch_geometric.nn import TransformerConv

    from sparsetrain.nn import GraphTransformer

    n, dim, heads = 50, 16, 4
    g = torch.Generator().manual_seed(13)
    ei = torch.randint(0, n, (2, 300), generator=g)  # duplicates included: both count every copy of an edge
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    model = GraphTransformer(5, dim, 3, num_layers=2, heads=heads, dropout=0.0, cluster_layers=False).double()
    edges = add_self_loops(ei, n)
    h = model.embed(x)
    for layer in model.sparse:
        conv = TransformerConv(dim, dim // heads, heads=heads, root_weight=False).double()
        (key_w, value_w), (key_b, value_b) = layer.kv.weight.chunk(2), layer.kv.bias.chunk(2)
        with torch.no_grad():
            for lin, w, b in (
                (conv.lin_query, layer.q.weight, layer.q.bias),
                (conv.lin_key, key_w, key_b),
                (conv.lin_value, value_w, value_b),
            ):
                lin.weight.copy_(w)
                lin.bias.copy_(b)
        h = h + layer.out(conv(layer.norm(h), edges))
    torch.testing.assert_close(model.forward_sequence(x, ei), model.head(model.head_norm(h)), rtol=1e-10, atol=1e-12)


@pytest.mark.gpu
def test_kernels_on_cuda_match_the_cpu_results():
    ei = add_self_loops(random_block(300, 120, 2000, seed=9), 120)
    q, k, v = qkv(120, 300, 4, 16, seed=9)
    groups = torch.randint(0, 7, (300,), generator=torch.Generator().manual_seed(9))
    cpu_edge = edge_attention(q, k, v, ei)
    gpu_edge = edge_attention(q.cuda(), k.cuda(), v.cuda(), ei.cuda(), chunk_edges=512)
    torch.testing.assert_close(gpu_edge.cpu(), cpu_edge, rtol=1e-10, atol=1e-12)
    for got, ref in zip(
        torch.autograd.grad(gpu_edge.square().sum(), (q, k, v)), torch.autograd.grad(cpu_edge.square().sum(), (q, k, v))
    ):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-11)
    qs, ks, vs = qkv(300, 300, 4, 16, seed=10)
    for kernel in (cluster_attention, linear_attention):
        cpu = kernel(qs, ks, vs, Packing.from_groups(groups))
        gpu = kernel(qs.cuda(), ks.cuda(), vs.cuda(), Packing.from_groups(groups.cuda()))
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-10, atol=1e-12)
        grads = torch.autograd.grad(gpu.square().sum(), (qs, ks, vs))
        want = torch.autograd.grad(cpu.square().sum(), (qs, ks, vs))
        for got, ref in zip(grads, want):
            torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-11)
