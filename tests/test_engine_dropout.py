import torch

from sparsetrain.engine.dropout import dropout, relu_dropout


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
