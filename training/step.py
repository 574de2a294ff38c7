"""One update (§5.3): gradients over the micro-batches, clipping, an Adam and a schedule step.

``train_step`` is the update training/launch.py runs and the training benchmark times.
"""

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist

from common.errors import UserError
from data.tokenizer import PAD_ID
from training.loss import forward_backward
from training.optim import clip_gradients


def accumulate_gradients(
    model, micro: list[dict], smoothing: float, device, precision: str, world, scaler=None
):
    """Gradients of the mean label-smoothed loss per target token over micro-batches (and ranks).

    Returns the summed loss and NLL (this rank's, times the world size) and the target-token
    count over every rank, read from the device once, after the last backward pass. scaler:
    fp16's GradScaler, whose loss scale (a power of 2) multiplies the gradients.
    """
    n_tokens = torch.tensor(
        float(sum(int((b["tgt_out"] != PAD_ID).sum()) for b in micro)), device=device
    )
    if world > 1:
        dist.all_reduce(n_tokens)
    scale = world / n_tokens if scaler is None else scaler.scale(world / n_tokens)
    model.train()
    sums = torch.zeros(2, device=device)  # [loss, nll]
    for i, batch in enumerate(micro):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        sync = nullcontext() if world == 1 or i == len(micro) - 1 else model.no_sync()
        with sync:
            loss, nll = forward_backward(model, batch, smoothing, scale, precision)
        sums += torch.stack((loss, nll))
    loss_sum, nll_sum, tokens = torch.cat((sums * world, n_tokens[None])).tolist()
    return loss_sum, nll_sum, int(tokens)


@dataclass
class StepResult:
    """What one update reports: summed loss and NLL, target tokens, gradient norm."""

    loss_sum: float
    nll_sum: float
    tokens: int
    grad_norm: float


def train_step(
    model,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    micro: list[dict],
    smoothing: float,
    clip_norm: float | None,
    precision: str = "fp32",
    world: int = 1,
    scaler: torch.amp.GradScaler | None = None,
) -> StepResult | None:
    """One update: gradients over the micro-batches, clipping, an Adam step and a schedule step.

    model may be wrapped (DDP, torch.compile). precision: the resolved one (fp32, bf16, fp16).
    A non-finite loss or gradient norm skips the update (gradients dropped, optimizer and
    schedule untouched) and returns None. clip_norm None: no clipping (the paper names none);
    the norm is still measured. scaler (fp16): the loss is scaled up before the backward pass
    and the gradients unscaled before clipping; an overflow halves the scale (a skipped update).
    """
    device = next(model.parameters()).device
    loss_sum, nll_sum, tokens = accumulate_gradients(
        model, micro, smoothing, device, precision, world, scaler
    )
    if scaler is not None:
        scaler.unscale_(optimizer)  # clipping and the norm see the true gradients
    grad_norm = clip_gradients(model.parameters(), clip_norm)
    if not math.isfinite(loss_sum) or not torch.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.update()  # fp16 overflow: the next update tries half the loss scale
        return None
    if scaler is None:
        optimizer.step()
    else:  # not in the paper (float32 on P100s): fp16 needs a loss scale (Micikevicius 2018)
        scaler.step(optimizer)  # the gradients are finite: Adam steps as without a scaler
        scaler.update()  # every growth_interval (2000) finite updates: twice the scale
    optimizer.zero_grad(set_to_none=True)
    schedule.step()
    return StepResult(loss_sum, nll_sum, tokens, float(grad_norm))


class DivergenceError(UserError, FloatingPointError):
    """Too many non-finite updates in a row: the run diverged (a setting to change)."""
