"""The fused GAT aggregation (``nn/gat_aggregate.py``) against PyG's ``GATConv`` and ``torch.autograd.gradcheck``, and
the fused R-GAT against the same model run through PyG's ``HeteroConv(GATConv)``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsetrain.errors import SettingError
from sparsetrain.nn.gat_aggregate import dst_csr, gat_aggregate
from sparsetrain.nn.rgat import RGAT, _folded, aggregate_first


def _graph(num_src: int, num_dst: int, num_edges: int, seed: int, sort: bool = True):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    dst = torch.randint(0, num_dst - 1, (num_edges,), generator=g)  # the last destination has no in-edge
    if sort:
        dst, order = torch.sort(dst, stable=True)
        src = src[order]
    return torch.stack([src, dst])


def _gat_via_kernel(conv, x_src, x_dst, edge_index):
    """``GATConv``'s output computed with the kernel: the projection after the sum."""
    heads, channels = conv.heads, conv.out_channels
    a_src = x_src @ _folded(conv.lin_src, conv.att_src).T
    a_dst = x_dst @ _folded(conv.lin_dst, conv.att_dst).T
    summed = gat_aggregate(x_src, a_src, a_dst, dst_csr(edge_index, len(x_dst)), conv.negative_slope, heads_first=True)
    out = torch.bmm(summed, conv.lin_src.weight.view(heads, channels, -1).transpose(1, 2))
    return out.transpose(0, 1).reshape(len(x_dst), heads * channels) + conv.bias


@pytest.mark.parametrize("sort", [True, False])
def test_matches_pyg_gatconv_forward_and_gradients(sort):
    from torch_geometric.nn import GATConv

    torch.manual_seed(0)
    num_src, num_dst, f_src, f_dst = 30, 12, 7, 5
    edge_index = _graph(num_src, num_dst, 90, 1, sort)
    conv = GATConv((f_src, f_dst), 3, heads=4, add_self_loops=False).double()
    with torch.no_grad():
        conv.bias.normal_()
    x_src = torch.randn(num_src, f_src, dtype=torch.float64, requires_grad=True)
    x_dst = torch.randn(num_dst, f_dst, dtype=torch.float64, requires_grad=True)
    want = conv((x_src, x_dst), edge_index)
    got = _gat_via_kernel(conv, x_src, x_dst, edge_index)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert torch.equal(got[-1], conv.bias)  # no in-edge: the bias alone, as PyG
    weights = torch.randn_like(want)
    params = [x_src, x_dst, *conv.parameters()]
    g_want = torch.autograd.grad((want * weights).sum(), params)
    g_got = torch.autograd.grad((got * weights).sum(), params)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_per_head_rows_match_pyg_gatconv():
    """``x`` [num_src, heads, C]: the projected rows, summed as ``GATConv`` sums them."""
    from torch_geometric.nn import GATConv

    torch.manual_seed(1)
    edge_index = _graph(20, 9, 50, 4)
    conv = GATConv((6, 6), 5, heads=3, add_self_loops=False, bias=False).double()
    x_src = torch.randn(20, 6, dtype=torch.float64, requires_grad=True)
    x_dst = torch.randn(9, 6, dtype=torch.float64)
    want = conv((x_src, x_dst), edge_index)
    projected = conv.lin_src(x_src).view(20, 3, 5)
    a_src, a_dst = (projected * conv.att_src).sum(-1), (conv.lin_dst(x_dst).view(9, 3, 5) * conv.att_dst).sum(-1)
    got = gat_aggregate(projected, a_src, a_dst, dst_csr(edge_index, 9)).reshape(9, 15)  # heads concatenated
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), x_src)[0], torch.autograd.grad(want.sum(), x_src)[0])


def test_gradcheck_float64():
    edge_index = _graph(9, 6, 25, 2)
    csr = dst_csr(edge_index, 6)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 4, dtype=torch.float64, generator=g, requires_grad=True)
    a_src = torch.randn(9, 2, dtype=torch.float64, generator=g, requires_grad=True)
    a_dst = torch.randn(6, 2, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, s, d: gat_aggregate(x, s, d, csr, 0.2), (x, a_src, a_dst))
    per_head = torch.randn(9, 2, 3, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, s, d: gat_aggregate(x, s, d, csr, 0.2), (per_head, a_src, a_dst))


def test_float32_against_float64_and_hand_value():
    # one destination, two edges, one head: alpha = softmax(leaky_relu([1 + 0.5, -3 + 0.5]))
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0]])
    a_src, a_dst = torch.tensor([[1.0], [-3.0]]), torch.tensor([[0.5]])
    out = gat_aggregate(x, a_src, a_dst, dst_csr(torch.tensor([[0, 1], [0, 0]]), 1), 0.2)
    s = torch.tensor([1.5, -2.5 * 0.2], dtype=torch.float64).softmax(0)
    want = s[0] * torch.tensor([1.0, 2.0], dtype=torch.float64) + s[1] * torch.tensor([3.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(out[0, 0].double(), want, rtol=1e-6, atol=1e-6)


def test_layout_and_gradients_against_numpy_loop():
    """``out[d, h, :]`` (a destination's heads contiguous; ``out[h, d, :]`` with ``heads_first``) and the gradients
    of a weighted sum, against a NumPy loop over the edges in float64, for shared and per-head rows, float32 inputs."""
    rng = np.random.default_rng(5)
    num_src, num_dst, heads, width, slope = 11, 7, 3, 5, 0.2
    edge_index = _graph(num_src, num_dst, 40, 6)
    src, dst = edge_index.numpy()
    a_src, a_dst = rng.normal(size=(num_src, heads)), rng.normal(size=(num_dst, heads))
    for shape, heads_first in [((num_src, width), False), ((num_src, heads, width), False),
                               ((num_src, width), True), ((num_src, heads, width), True)]:
        x = rng.normal(size=shape)
        xh = x[:, None, :].repeat(heads, 1) if x.ndim == 2 else x
        weights = rng.normal(size=(num_dst, heads, width))
        want = np.zeros((num_dst, heads, width))
        want_x, want_src, want_dst = np.zeros_like(xh), np.zeros_like(a_src), np.zeros_like(a_dst)
        for d in range(num_dst):
            into = np.flatnonzero(dst == d)
            if not len(into):
                continue
            raw = a_src[src[into]] + a_dst[d]  # [k, heads]
            alpha = np.exp(np.where(raw > 0, raw, slope * raw))
            alpha /= alpha.sum(0)
            want[d] = np.einsum("kh,khf->hf", alpha, xh[src[into]])
            g_alpha = np.einsum("hf,khf->kh", weights[d], xh[src[into]])
            g_raw = alpha * (g_alpha - (alpha * g_alpha).sum(0)) * np.where(raw > 0, 1.0, slope)
            np.add.at(want_x, src[into], alpha[:, :, None] * weights[d][None])
            np.add.at(want_src, src[into], g_raw)
            want_dst[d] = g_raw.sum(0)
        want_x = want_x.sum(1) if x.ndim == 2 else want_x
        args = [torch.tensor(v, dtype=torch.float32, requires_grad=True) for v in (x, a_src, a_dst)]
        got = gat_aggregate(*args, dst_csr(edge_index, num_dst), slope, heads_first=heads_first)
        if heads_first:
            assert got.shape == (heads, num_dst, width) and got.is_contiguous()
            got = got.transpose(0, 1)
        assert got.shape == (num_dst, heads, width)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-5, atol=1e-5)
        (got * torch.tensor(weights, dtype=torch.float32)).sum().backward()
        for arg, ref in zip(args, (want_x, want_src, want_dst)):
            np.testing.assert_allclose(arg.grad.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_refuses_destination_out_of_range():
    with pytest.raises(SettingError, match="destination outside"):
        dst_csr(torch.tensor([[0, 1], [0, 5]]), 3)


@pytest.mark.parametrize("order", ["auto", "after", "before"])
def test_fused_rgat_equals_pyg_heteroconv(order, monkeypatch):
    from sparsetrain.nn import rgat

    if order != "auto":
        monkeypatch.setattr(rgat, "aggregate_first", lambda *args: order == "after")
    import sparsetrain as st
    from sparsetrain.sampling.graph import CSCGraph

    g = torch.Generator().manual_seed(5)
    num_nodes = {"paper": 60, "author": 40}
    edges = {("paper", "cites", "paper"): (120, 60, 60), ("author", "writes", "paper"): (150, 40, 60),
             ("paper", "rev_writes", "author"): (150, 60, 40)}
    edge_index = {et: torch.stack([torch.randint(0, ns, (e,), generator=g), torch.randint(0, nd, (e,), generator=g)])
                  for et, (e, ns, nd) in edges.items()}
    graph = CSCGraph.from_edge_index_dict(edge_index, num_nodes)
    sampler = st.sampling.NeighborSampler(graph, [4, 3], seed=0, seed_type="paper")
    mb = sampler.sample(st.sampling.SamplerInput(torch.arange(8), node_type="paper", key=1))
    x = {t: torch.randn(num_nodes[t], 6, generator=g, dtype=torch.float64)[mb.input_nodes[t]] for t in num_nodes}
    torch.manual_seed(0)
    model = RGAT(list(num_nodes), list(edges), {"paper": 6, "author": 6}, 8, 3, 2, "paper", heads=2).double()
    model.eval()
    outs, grads = [], []
    for fused in (True, False):
        model.fused = fused
        model.zero_grad()
        out = model(x, mb.to_pyg())
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-12)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_cost_rule_picks_the_cheaper_side():
    # many sources, few destinations: project after the sum; as many destinations as sources: before it
    assert aggregate_first(10_000, 500, 5_000, 128, 128, 4, True)
    assert not aggregate_first(10_000, 10_000, 50_000, 128, 128, 4, False)
