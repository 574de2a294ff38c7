"""model/dropout.py: the CPU mask keeps 1 - p, scales by 1 / (1 - p), and fuses the residual."""

import torch
import torch.nn.functional as F

from model.dropout import Dropout, keep_mask


def test_keep_mask_keeps_one_minus_p_and_scales_as_nn_dropout():
    torch.manual_seed(0)
    mask = keep_mask(torch.Size([1_000_000]), 0.1, torch.device("cpu"))
    reference = F.dropout(torch.ones(1000), 0.1, True)
    assert set(mask.unique().tolist()) == {0.0, reference.max().item()}
    kept = (mask != 0).float().mean().item()
    assert abs(kept - 0.9) < 5 * (0.9 * 0.1 / 1e6) ** 0.5  # five standard errors


def test_dropout_matches_its_mask_forward_and_backward_and_resumes_from_the_rng_state():
    drop = Dropout(0.3).train()
    x = torch.randn(4, 5, 6, requires_grad=True)
    y = torch.randn(4, 5, 6, requires_grad=True)
    state = torch.get_rng_state()
    out = drop.residual(x, y)
    torch.set_rng_state(state)
    mask = keep_mask(y.shape, 0.3, y.device)
    assert torch.allclose(out, x + y * mask)
    grad = torch.randn_like(out)
    out.backward(grad)
    assert torch.equal(x.grad, grad) and torch.allclose(y.grad, grad * mask)
    torch.set_rng_state(state)
    dropped = drop(y)
    torch.set_rng_state(state)
    assert torch.equal(dropped, y * keep_mask(y.shape, 0.3, y.device))


def test_dropout_is_the_identity_in_eval_mode_and_at_p_zero():
    y, x = torch.randn(3, 4), torch.randn(3, 4)
    assert torch.equal(Dropout(0.5).eval()(y), y)
    assert torch.equal(Dropout(0.0).train()(y), y)
    assert torch.equal(Dropout(0.5).eval().residual(x, y), x + y)
