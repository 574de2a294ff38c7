"""Every position-encoding variant, behind one small interface.

A variant is a ``PositionEncoding`` subclass that overrides only the hooks it needs; the
Transformer calls all of them in every stack, so no code anywhere branches on the variant:

- ``embed(x, positions)``: add absolute encodings to the scaled token embeddings
  (sinusoidal §3.5, learned Table 3 row E);
- ``rotate(q, k, q_positions, k_positions)``: rotate queries and keys in self-attention (RoPE);
- ``bias(q_positions, k_positions)``: an additive per-head attention-score bias (ALiBi);
- ``check_length(num_positions)``: fail early, with a message, where a variant has a length cap.

Positions count from 0 over real tokens (sequences are right-padded; masks hide the padding).
Every variant takes the same constructor arguments ``(d_model, n_heads, max_positions)``; its YAML
in ``configs/position/`` holds only its own hyper-parameters. Self-attention only: RoPE and ALiBi
leave cross-attention untouched, since a target position and a source position are not on one
axis (a target word's distance to a source word carries no meaning).

Adding a variant: write one class here, add ``configs/position/<name>.yaml`` with its
``_target_``, and the tests parametrized over that folder cover it.
"""

import math

import torch
from torch import nn

from data.errors import UserError


class PositionRangeError(UserError):
    """A sequence is longer than a position variant can encode."""


def sinusoidal_table(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...), interleaved (§3.5)."""
    return sinusoidal_encoding(torch.arange(num_positions), d_model, base)


def sinusoidal_encoding(
    positions: torch.Tensor, d_model: int, base: float = 10000.0
) -> torch.Tensor:
    """The §3.5 encodings of the given positions, [T, d_model] float32, computed in float64."""
    if d_model % 2:
        raise ValueError(f"sinusoidal position encoding needs an even d_model, got {d_model}")
    angles = _angles(positions, d_model, base)  # [T, d_model / 2]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # [T, d_model / 2, 2]
    return table.flatten(-2).float()  # [T, d_model]: sin, cos, sin, cos, ...


def _angles(positions: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """pos / base^(2i/dim) for i < dim/2, in float64 so float32 results are correctly rounded."""
    two_i = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)  # [dim / 2]
    return positions.to(torch.float64)[:, None] / base ** (two_i / dim)  # [T, dim / 2]


class PositionEncoding(nn.Module):
    """Base interface: every hook does nothing, so this class alone is "no position"."""

    def __init__(self, d_model: int, n_heads: int, max_positions: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.max_positions = max_positions

    def check_length(self, num_positions: int) -> None:
        """Raise PositionRangeError if positions 0..num_positions-1 cannot be encoded."""

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [B, T, d_model] plus absolute encodings of positions [T]."""
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries [B, H, Tq, d_head] and keys [B, H, Tk, d_head] with position applied."""
        return q, k

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        """An additive attention-score bias [H, Tq, Tk], or None."""
        return None


class NoPositionEncoding(PositionEncoding):
    """NoPE: no position information at all (the encoder becomes permutation-equivariant)."""


class SinusoidalPositionEncoding(PositionEncoding):
    """Fixed sinusoids added at the bottom of each stack (§3.5); no parameters, no length cap."""

    def __init__(self, d_model: int, n_heads: int, max_positions: int, base: float = 10000.0):
        super().__init__(d_model, n_heads, max_positions)
        if d_model % 2:
            raise ValueError(
                f"position=sinusoidal needs an even model.d_model, got {d_model}: "
                "use an even d_model or another position variant"
            )
        self.base = base

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add float32 sinusoids (float32 even under bf16 autocast)."""
        return x + sinusoidal_encoding(positions, self.d_model, self.base)  # [B, T, d_model]


class LearnedPositionEncoding(PositionEncoding):
    """A learned max_positions x d_model table (Table 3 row E, Gehring et al. 2017).

    The paper gives neither the table size nor the initialization; as fairseq, we use
    ``max_positions`` rows (default 1024, ``model.max_positions``) initialized N(0, d_model^-0.5).
    A position past the table is an error, never an index error nor silent clipping.
    """

    def __init__(self, d_model: int, n_heads: int, max_positions: int):
        super().__init__(d_model, n_heads, max_positions)
        self.table = nn.Parameter(torch.randn(max_positions, d_model) * d_model**-0.5)

    def check_length(self, num_positions: int) -> None:
        """Refuse sequences whose last position is past the table."""
        if num_positions > self.max_positions:
            raise PositionRangeError(
                f"position {num_positions - 1} is past the learned position table "
                f"(model.max_positions={self.max_positions}): raise model.max_positions "
                "or use another position variant (position=sinusoidal, rope, alibi)"
            )

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add the table rows of positions [T]."""
        return x + self.table[positions]  # [B, T, d_model]


class RotaryPositionEncoding(PositionEncoding):
    """RoPE (Su et al. 2021): rotate each (2i, 2i+1) pair of q and k by pos * base^(-2i/d_head).

    The same frequency ladder as §3.5, over the head dimension, in every self-attention layer;
    cross-attention is left unrotated (see the module docstring).
    """

    def __init__(self, d_model: int, n_heads: int, max_positions: int, base: float = 10000.0):
        super().__init__(d_model, n_heads, max_positions)
        self.d_head = d_model // n_heads
        if self.d_head % 2:
            raise ValueError(f"position=rope needs an even head size, got {self.d_head}")
        self.base = base

    def _rotate_one(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = _angles(positions, self.d_head, self.base)  # [T, d_head / 2]
        cos, sin = angles.cos().float(), angles.sin().float()
        pairs = x.float().unflatten(-1, (-1, 2))  # [B, H, T, d_head / 2, 2]
        even, odd = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2).to(x.dtype)  # [B, H, T, d_head]

    def rotate(self, q, k, q_positions, k_positions):
        """Rotate queries and keys by their own positions."""
        return self._rotate_one(q, q_positions), self._rotate_one(k, k_positions)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Per-head slopes 2^(-8h/n) (Press et al. 2022), interpolated when n is not a power of 2."""

    def powers_of_two(n: int) -> list[float]:
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = powers_of_two(closest) + powers_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes)


class ALiBiPositionEncoding(PositionEncoding):
    """ALiBi (Press et al. 2022): bias score(i, j) by -slope_h * |i - j|.

    Symmetric in the encoder; in the decoder the causal mask hides j > i, so the same formula
    is the causal bias -slope_h * (i - j). No embeddings, no length cap.
    """

    def __init__(self, d_model: int, n_heads: int, max_positions: int):
        super().__init__(d_model, n_heads, max_positions)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """-slope_h * |i - j|, [H, Tq, Tk] float32."""
        distance = (q_positions[:, None] - k_positions[None, :]).abs().float()  # [Tq, Tk]
        return -self.slopes[:, None, None] * distance  # [H, Tq, Tk]
