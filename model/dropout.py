"""Dropout (§5.4) with a cheaper mask on CPU, and dropout fused into the residual sum.

The math is nn.Dropout's: in training every element is kept with probability 1 - p and scaled
by 1 / (1 - p), else zeroed; in eval mode (or p = 0) it is the identity. Only how the mask is
drawn differs on a CPU: ``torch.bernoulli_`` draws a double per element through torch's serial
CPU generator (two 32-bit Mersenne-Twister numbers); here one 31-bit integer per element from
the same generator is compared with round((1 - p) * 2^31), so the keep probability is 1 - p
to within 2^-31 (deviation: bernoulli_'s is within 2^-53), at a third of the RNG cost. The
mask comes from torch's default generator, so a resumed run (which restores its state) draws
the same masks. Other devices keep ``F.dropout`` (fused kernels there).

``residual(x, y)`` is x + dropout(y) in one pass (``torch.addcmul``) for the post-LN
sub-layers LayerNorm(x + Dropout(sublayer(x))) (§5.4), whose backward is one multiply.
"""

import torch
import torch.nn.functional as F
from torch import nn

_RANDOM_BITS = 31  # torch's int32 random_() draws uniformly from [0, 2^31)


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
    """Float32 mask of `shape`: 1 / (1 - p) with probability 1 - p (within 2^-31), else 0."""
    threshold = round((1 - p) * 2**_RANDOM_BITS)
    bits = torch.empty(shape, dtype=torch.int32, device=device).random_()  # [*shape]
    scale = (torch.ones((), dtype=torch.float32) / (1 - p)).item()  # nn.Dropout's float32 1/(1-p)
    return torch.where(bits < threshold, scale, 0.0)  # [*shape] float32


class _MaskedResidual(torch.autograd.Function):
    """x + y * mask in one pass; backward: dx = g, dy = g * mask."""

    @staticmethod
    def forward(ctx, x, y, mask):
        ctx.save_for_backward(mask)
        return torch.addcmul(x, y, mask)

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad, grad * mask, None


class _Masked(torch.autograd.Function):
    """y * mask; backward: dy = g * mask."""

    @staticmethod
    def forward(ctx, y, mask):
        ctx.save_for_backward(mask)
        return y * mask

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask, None


class Dropout(nn.Dropout):
    """nn.Dropout (same p, same train/eval behaviour) with a cheaper CPU mask; see the module."""

    def _cheap_mask(self, y: torch.Tensor) -> bool:
        return self.training and self.p > 0 and y.device.type == "cpu" and y.dtype == torch.float32

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        """Dropout(y)."""
        if not self._cheap_mask(y):
            return F.dropout(y, self.p, self.training)
        if self.p == 1:
            return y * 0.0
        return _Masked.apply(y, keep_mask(y.shape, self.p, y.device))

    def residual(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x + Dropout(y), the residual sum of a sub-layer (§5.4), in one pass on a CPU."""
        if not self._cheap_mask(y) or self.p == 1 or x.shape != y.shape:
            return x + self(y)
        return _MaskedResidual.apply(x, y, keep_mask(y.shape, self.p, y.device))
