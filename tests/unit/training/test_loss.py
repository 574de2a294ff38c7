"""training/loss.py: label-smoothed cross-entropy against its definition and F.cross_entropy."""

import torch
import torch.nn.functional as F

from training.loss import forward_backward, label_smoothed_loss


def test_label_smoothed_loss_matches_the_definition():
    torch.manual_seed(0)
    logits, target = torch.randn(2, 3, 11), torch.tensor([[5, 6, 0], [7, 8, 9]])
    loss, nll = label_smoothed_loss(logits, target, smoothing=0.1)
    logp = logits.log_softmax(-1)
    real = target != 0
    expected_nll = -logp.gather(-1, target[..., None])[..., 0][real].sum()
    expected = 0.9 * expected_nll + 0.1 * (-logp.mean(-1))[real].sum()
    assert torch.allclose(nll, expected_nll) and torch.allclose(loss, expected)
    assert torch.allclose(nll, F.cross_entropy(logits[real], target[real], reduction="sum"))


def test_label_smoothed_loss_gradient_matches_autograd_through_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 11, (3, 5))
    target[0, -2:] = 0  # padding
    loss, nll = label_smoothed_loss(logits, target, smoothing=0.1)
    expected = F.cross_entropy(
        logits.flatten(0, 1), target.flatten(), ignore_index=0, label_smoothing=0.1, reduction="sum"
    )
    (grad,) = torch.autograd.grad(loss, logits)
    (expected_grad,) = torch.autograd.grad(expected, logits)
    assert torch.allclose(loss, expected) and not nll.requires_grad
    assert torch.allclose(grad, expected_grad, atol=1e-12)
    assert grad[0, -2:].abs().max() == 0  # no gradient into padding
    assert torch.autograd.gradcheck(lambda x: label_smoothed_loss(x, target, 0.1)[0], (logits,))


def test_forward_backward_scales_the_gradient_and_returns_the_sums():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(11, 8), torch.nn.Linear(8, 11))

    class Decoder(torch.nn.Module):  # the Transformer's call: model(src, tgt_in) -> [B, T, V]
        def forward(self, src, tgt_in):
            return model(tgt_in)

    batch = {
        "src": torch.randint(1, 11, (2, 4)),
        "tgt_in": torch.randint(1, 11, (2, 5)),
        "tgt_out": torch.tensor([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]]),
    }
    loss, nll = forward_backward(Decoder(), batch, 0.1, 0.25, precision="fp32")
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected_loss, expected_nll = label_smoothed_loss(model(batch["tgt_in"]), batch["tgt_out"], 0.1)
    expected_loss.backward()
    assert abs(loss - expected_loss.item()) < 1e-5 and abs(nll - expected_nll.item()) < 1e-5
    for grad, parameter in zip(grads, model.parameters(), strict=True):
        assert torch.allclose(grad, 0.25 * parameter.grad)
