"""training/step.py: fp16's update through torch's GradScaler (on the CPU: torch >= 2.3)."""

import copy

import torch

from tests.conftest import CONFIG_DIR, tiny_model
from training.optim import noam_adam
from training.step import train_step


def setup(init_scale: float):
    """A tiny model, its Adam and schedule, one batch, and a GradScaler starting at init_scale."""
    model = tiny_model(CONFIG_DIR / "position" / "sinusoidal.yaml", dropout=0.0)  # no masks
    adam, schedule = noam_adam(model.parameters(), 32, (0.9, 0.98), 1e-9, 4, 1.0)
    generator = torch.Generator().manual_seed(0)
    tgt = torch.randint(4, 40, (4, 8), generator=generator)
    src = torch.randint(4, 40, (4, 7), generator=generator)
    batch = {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
    return model, adam, schedule, batch, torch.amp.GradScaler("cpu", init_scale=init_scale)


def test_an_fp16_overflow_skips_the_update_and_halves_the_loss_scale():
    model, adam, schedule, batch, scaler = setup(init_scale=2.0**40)  # fp16 overflows
    before = copy.deepcopy(model.state_dict())
    result = train_step(model, adam, schedule, [batch], 0.1, None, "fp16", 1, scaler)
    assert result is None and scaler.get_scale() == 2.0**39
    assert schedule.last_epoch == 0 and not adam.state  # neither Adam nor the schedule stepped
    assert all(p.grad is None for p in model.parameters())
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_an_fp16_update_measures_the_unscaled_gradient_norm():
    model, adam, schedule, batch, scaler = setup(init_scale=2.0**10)
    twin = copy.deepcopy(model)
    twin_adam, twin_schedule = noam_adam(twin.parameters(), 32, (0.9, 0.98), 1e-9, 4, 1.0)
    fp16 = train_step(model, adam, schedule, [batch], 0.1, None, "fp16", 1, scaler)
    fp32 = train_step(twin, twin_adam, twin_schedule, [batch], 0.1, None, "fp32")
    # the norm after unscale_ (not 1024 times it), within fp16's rounding of the fp32 one
    assert abs(fp16.grad_norm / fp32.grad_norm - 1) < 0.02, (fp16.grad_norm, fp32.grad_norm)
    assert abs(fp16.loss_sum / fp32.loss_sum - 1) < 0.01
    assert scaler.get_scale() == 2.0**10 and scaler.state_dict()["_growth_tracker"] == 1
    assert schedule.last_epoch == 1 and adam.state  # the update was applied
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
