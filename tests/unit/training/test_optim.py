"""training/optim.py: the §5.3 learning-rate schedule and the optimizer train.py builds."""

import torch

from training.optim import noam_adam, noam_lr


def test_noam_schedule_peaks_at_warmup():
    peak = noam_lr(4000, 512, 4000)
    assert abs(peak - 512**-0.5 * 4000**-0.5) < 1e-12
    assert abs(peak - 6.99e-4) < 1e-6
    assert noam_lr(2000, 512, 4000) < peak and noam_lr(8000, 512, 4000) < peak
    assert noam_lr(100, 512, 4000, scale=2.0) == 2 * noam_lr(100, 512, 4000)


def test_noam_adam_follows_the_schedule_step_by_step():
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer, schedule = noam_adam([weight], d_model=512, warmup=10, lr_scale=2.0)
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.98)
    assert optimizer.param_groups[0]["eps"] == 1e-9
    for step in range(1, 21):
        assert abs(optimizer.param_groups[0]["lr"] - noam_lr(step, 512, 10, 2.0)) < 1e-15
        weight.grad = torch.ones(3)
        optimizer.step()
        schedule.step()


def test_clip_gradients_returns_the_norm_and_clips_only_when_asked():
    from training.optim import clip_gradients

    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    norm = clip_gradients([a, b], None)
    assert norm.item() == 5.0 and a.grad.tolist() == [3.0, 0.0] and b.grad.tolist() == [4.0]
    assert clip_gradients([a, b], 0).item() == 5.0 and b.grad.item() == 4.0  # 0: no clipping
    assert clip_gradients([a, b], 1.0).item() == 5.0
    assert torch.allclose(torch.cat((a.grad, b.grad)), torch.tensor([0.6, 0.0, 0.8]), atol=1e-6)
