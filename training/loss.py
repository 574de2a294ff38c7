"""The training loss: label-smoothed cross-entropy (§5.4) and one forward-backward pass."""

import torch
import torch.nn.functional as F

from data.tokenizer import PAD_ID
from runs.device import autocast


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Per-token label-smoothed cross-entropy [N] and NLL [N] of logits [N, V], pads zero.

    One log-softmax forward in float32 (or wider); backward writes the gradient in one pass,
    softmax - (1 - eps) * onehot - eps / V, instead of autograd's chain of [N, V] tensors.
    """

    @staticmethod
    def forward(ctx, logits, target, smoothing: float, ignore_index: int):
        wide = torch.promote_types(logits.dtype, torch.float32)
        log_probs = F.log_softmax(logits.to(wide), dim=-1)  # [N, V]
        keep = (target != ignore_index).float()  # [N]
        nll = -log_probs.gather(1, target[:, None]).squeeze(1) * keep  # [N]
        loss = (1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1) * keep
        ctx.save_for_backward(log_probs, target, keep)
        ctx.smoothing, ctx.logits_dtype = smoothing, logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        log_probs, target, keep = ctx.saved_tensors
        smoothing = ctx.smoothing
        grad = log_probs.exp().sub_(smoothing / log_probs.size(1))  # [N, V]
        grad.scatter_add_(1, target[:, None], grad.new_full((grad.size(0), 1), smoothing - 1))
        grad.mul_((grad_loss * keep)[:, None])
        return grad.to(ctx.logits_dtype), None, None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float):
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets (§5.4).

    Equal to ``F.cross_entropy(..., label_smoothing=smoothing, ignore_index=PAD_ID)`` summed.
    """
    loss, nll = LabelSmoothedCrossEntropy.apply(
        logits.flatten(0, 1), target.flatten(), smoothing, PAD_ID
    )
    return loss.sum(), nll.sum()


def forward_backward(
    model: torch.nn.Module, batch: dict, smoothing: float, scale, precision: str = "fp32"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backpropagate scale x the batch's label-smoothed loss; return its summed loss and NLL.

    precision: the forward pass under bf16 or fp16 autocast, or none (fp32); weights and
    gradients stay float32 (fp16's loss scale is in scale: training/step.py). The sums come
    back as detached 0-d tensors on the batch's device, so a GPU is not made to wait.
    """
    with autocast(batch["src"].device, precision):
        logits = model(batch["src"], batch["tgt_in"])  # [B, T, V]
        loss, nll = label_smoothed_loss(logits, batch["tgt_out"], smoothing)
    (loss * scale).backward()
    return loss.detach(), nll.detach()
