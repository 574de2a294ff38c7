"""Adam with the paper's learning-rate schedule (§5.3): warm up linearly, then decay as 1/sqrt."""

import torch


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3), step from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_adam(
    parameters,
    d_model: int,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    warmup: int = 4000,
    lr_scale: float = 1.0,
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Fused Adam (float32 master weights) and the §5.3 schedule, stepped once per update."""
    optimizer = torch.optim.Adam(parameters, lr=1.0, betas=tuple(betas), eps=eps, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: noam_lr(s + 1, d_model, warmup, lr_scale)
    )
    return optimizer, schedule


def clip_gradients(parameters, max_norm: float | None) -> torch.Tensor:
    """The total gradient 2-norm; gradients scaled to max_norm if set (> 0) and exceeded.

    With max_norm None (the paper clips nothing) only the norm is computed (the non-finite
    check needs it): no pass that multiplies every gradient by 1.
    """
    parameters = [p for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in parameters])
    if max_norm:  # None or 0: no clipping
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
    return total
