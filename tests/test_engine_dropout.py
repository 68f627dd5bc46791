import torch

from sparsetrain.nn.dropout import dropout, relu_dropout


def test_hash_dropout_keeps_the_right_fraction_and_scales():
    torch.manual_seed(0)
    x = torch.randn(1000, 257)
    out = dropout(x, 0.3, training=True)
    kept = out != 0
    assert abs(kept.double().mean().item() - 0.7) < 0.01
    assert torch.allclose(out[kept], x[kept] / 0.7)
    assert torch.equal(dropout(x, 0.3, training=False), x)


def test_gradient_uses_the_forward_mask():
    torch.manual_seed(1)
    x = torch.randn(300, 64, dtype=torch.float64, requires_grad=True)
    out = dropout(x, 0.5, training=True)
    out.sum().backward()
    assert torch.equal(x.grad, (out != 0).double() * 2.0)


def test_same_seed_same_mask_and_masks_differ_between_calls():
    x = torch.ones(50, 40)
    torch.manual_seed(5)
    a, b = dropout(x, 0.5, True), dropout(x, 0.5, True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.5, True), a)
    assert not torch.equal(a, b)


def test_relu_dropout_equals_dropout_of_relu_with_its_gradient():
    x = torch.randn(400, 33, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(7)
    fused = relu_dropout(x, 0.4, training=True)
    torch.manual_seed(7)
    reference = dropout(torch.relu(x), 0.4, training=True)
    assert torch.equal(fused, reference)
    upstream = torch.randn_like(fused)
    (grad_fused,) = torch.autograd.grad(fused, x, upstream)
    (grad_reference,) = torch.autograd.grad(reference, x, upstream)
    assert torch.allclose(grad_fused, grad_reference)
    assert torch.equal(relu_dropout(x, 0.4, training=False), torch.relu(x))


def test_bfloat16_takes_the_same_mask_and_rounds_like_torch():
    torch.manual_seed(3)
    x = torch.randn(2000, 65) * 5
    for relu in (False, True):
        torch.manual_seed(11)
        reference = relu_dropout(x, 0.3, True) if relu else dropout(x, 0.3, True)
        torch.manual_seed(11)
        half = x.bfloat16()
        got = relu_dropout(half, 0.3, True) if relu else dropout(half, 0.3, True)
        assert got.dtype == torch.bfloat16
        kept = reference != 0
        assert torch.equal(got != 0, kept)  # same hash mask (and, with relu, same sign test)
        scale = half.new_tensor(1 / 0.7).float()
        assert torch.equal(got[kept], (half[kept].float() * scale).bfloat16())


def test_bfloat16_relu_dropout_gradient():
    x = torch.randn(500, 40).bfloat16().requires_grad_()
    out = relu_dropout(x, 0.5, training=True)
    out.float().sum().backward()
    assert x.grad.dtype == torch.bfloat16
    assert torch.equal(x.grad, (out != 0).bfloat16() * 2.0)
