"""Every position-encoding variant, behind one small interface.

A variant is a ``PositionEncoding`` subclass that overrides only the hooks it needs; the
Transformer calls all of them in every stack, so no code anywhere branches on the variant:

- ``embed(x, positions)``: add absolute encodings to the scaled token embeddings
  (sinusoidal §3.5, learned Table 3 row E, their SHAPE-shifted forms);
- ``rotate(q, k, q_positions, k_positions)``: rotate queries and keys in self-attention (RoPE);
- ``bias(q_positions, k_positions)``: an additive per-head attention-score bias, one for the
  whole stack (ALiBi, T5);
- ``attention_terms(layer, q_positions, k_positions)``: an ``AttentionTerms`` for one
  self-attention layer, whose ``scores(q)`` adds query-dependent terms to the logits and whose
  ``values(weights)`` adds terms to the output from the attention probabilities (Shaw et al.
  2018); None (the default) keeps the fused ``scaled_dot_product_attention`` path;
- ``check_length(num_positions)``: fail early, with a message, where a variant has a length cap;
- ``apply_inference_settings(**settings)``: change the settings a variant names in
  ``inference_settings`` on a trained model (RoPE scaling, SHAPE's eval_shift), refusing any
  other key.

The Transformer builds one module per stack with ``(d_model, n_heads, max_positions, n_layers,
causal)``: ``n_layers`` lets a variant hold parameters per layer (indexed by ``layer`` in
``attention_terms``), ``causal`` tells the decoder's module from the encoder's (T5's buckets).
Its YAML in ``configs/position/`` holds only its own hyper-parameters.

Positions count from 0 over real tokens (sequences are right-padded; masks hide the padding).
Self-attention only: every variant leaves cross-attention untouched, since a target position and
a source position are not on one axis (a target word's distance to a source word carries no
meaning).

Adding a variant: write one class here, add ``configs/position/<name>.yaml`` with its
``_target_``, and the tests parametrized over that folder cover it.
"""

import math

import torch
from torch import nn

from common.errors import UserError


class PositionRangeError(UserError):
    """A sequence is longer than a position variant can encode."""


class PositionSettingError(UserError):
    """A position setting out of range, or not one a trained model may change."""


def check_base(base) -> float:
    """base as a float, or PositionSettingError unless it is a finite number above 1."""
    try:
        number = float(base)
    except (TypeError, ValueError):
        number = math.nan
    if not (number > 1 and math.isfinite(number)):  # nan; inf leaves all but 2 dims constant
        raise PositionSettingError(
            f"position.base={base}: pass a finite number above 1 (the paper: 10000), the longest "
            "wavelength's scale"
        )
    return number


def sinusoidal_table(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...), interleaved (§3.5)."""
    return sinusoidal_encoding(torch.arange(num_positions), d_model, base)


def sinusoidal_encoding(
    positions: torch.Tensor, d_model: int, base: float = 10000.0
) -> torch.Tensor:
    """The §3.5 encodings of positions [..., T]: [..., T, d_model] float32, computed in float64."""
    if d_model % 2:
        raise ValueError(f"sinusoidal position encoding needs an even d_model, got {d_model}")
    angles = _angles(positions, d_model, base)  # [..., T, d_model / 2]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # [..., T, d_model / 2, 2]
    return table.flatten(-2).float()  # [..., T, d_model]: sin, cos, sin, cos, ...


def _angles(positions: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """pos / base^(2i/dim) for i < dim/2, in float64 so float32 results are correctly rounded."""
    two_i = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)  # [dim / 2]
    return positions.to(torch.float64)[..., None] / base ** (two_i / dim)  # [..., T, dim / 2]


class AttentionTerms:
    """What a variant adds inside one self-attention layer; each hook may return None."""

    def scores(self, q: torch.Tensor) -> torch.Tensor | None:
        """Terms [B, H, Tq, Tk] added to the scaled logits q k^T / sqrt(d_head), q [B, H, Tq, d]."""
        return None

    def values(self, weights: torch.Tensor) -> torch.Tensor | None:
        """Terms [B, H, Tq, d_head] added to weights @ v, from the probabilities [B, H, Tq, Tk]."""
        return None


class PositionEncoding(nn.Module):
    """Base interface: every hook does nothing, so this class alone is "no position"."""

    #: settings a trained model may change at inference (``apply_inference_settings``)
    inference_settings: tuple[str, ...] = ()

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.max_positions = max_positions
        self.n_layers = n_layers
        self.causal = causal

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
        """An additive attention-score bias [H, Tq, Tk] shared by the stack's layers, or None."""
        return None

    def attention_terms(
        self, layer: int, q_positions: torch.Tensor, k_positions: torch.Tensor
    ) -> AttentionTerms | None:
        """The query- and probability-dependent terms of self-attention layer `layer`, or None.

        None keeps the fused scaled-dot-product kernel; terms make that layer compute its
        attention explicitly (logits, softmax, weighted sum) so the terms can join in.
        """
        return None

    def apply_inference_settings(self, **settings) -> None:
        """Set inference-only settings of a trained model; refuse any other key with one line."""
        name = type(self).__name__
        for key in settings:
            if key not in self.inference_settings:
                allowed = ", ".join(self.inference_settings) or "none"
                raise PositionSettingError(
                    f"position_override.{key} is not an inference-only setting of {name} "
                    f"(its inference-only settings: {allowed}): drop it; a trained run's other "
                    "position settings are fixed by its checkpoint"
                )
        for key, value in settings.items():
            setattr(self, key, value)

    def inference_state(self) -> dict:
        """The current values of the inference-only settings (recorded with each evaluation)."""
        return {key: getattr(self, key) for key in self.inference_settings}


class NoPositionEncoding(PositionEncoding):
    """NoPE: no position information at all (the encoder becomes permutation-equivariant)."""


def shifted(
    positions: torch.Tensor, batch: int, max_shift: int, training: bool, eval_shift: int = 0
) -> torch.Tensor:
    """SHAPE (Kiyono et al. 2021): positions [T] + k, k ~ U{0..max_shift} per sequence, [B, T].

    While training; at evaluation every position moves by eval_shift ([T]). Deviation: their
    code starts evaluation positions at K; by default we start them at 0 (eval_shift 0), where
    every position is also trained; ``position_override.eval_shift=K`` scores their way.
    """
    if not training or max_shift == 0:
        return positions + eval_shift if eval_shift else positions
    offsets = torch.randint(0, max_shift + 1, (batch, 1), device=positions.device)  # [B, 1]
    return positions[None, :] + offsets  # [B, T]


def check_max_shift(max_shift: int) -> int:
    """SHAPE's K, checked: 1 or more."""
    if max_shift < 1:
        raise PositionSettingError(
            f"position.max_shift={max_shift}: pass 1 or more (or the unshifted variant)"
        )
    return max_shift


def check_eval_shift(eval_shift, max_shift: int) -> int:
    """SHAPE's evaluation offset, checked: a whole number from 0 to K (the trained offsets)."""
    if isinstance(eval_shift, bool) or not isinstance(eval_shift, int):
        raise PositionSettingError(
            f"position eval_shift={eval_shift}: pass a whole number from 0 to {max_shift}"
        )
    if not 0 <= eval_shift <= max_shift:
        raise PositionSettingError(
            f"position eval_shift={eval_shift}: pass 0 to {max_shift} (position.max_shift, the "
            "offsets the model was trained on)"
        )
    return eval_shift


class ShapeSettings:
    """SHAPE's inference-only setting: eval_shift, checked against max_shift when it changes."""

    inference_settings = ("eval_shift",)
    max_shift: int
    eval_shift: int

    def apply_inference_settings(self, **settings) -> None:
        """Set eval_shift, checked (0..max_shift); any other key is refused in one line."""
        if "eval_shift" in settings:
            check_eval_shift(settings["eval_shift"], self.max_shift)
        super().apply_inference_settings(**settings)


class SinusoidalPositionEncoding(PositionEncoding):
    """Fixed sinusoids added at the bottom of each stack (§3.5); no parameters, no length cap."""

    max_shift = 0  # SHAPE's K (SinusoidalShapePositionEncoding); 0 = positions as they are
    eval_shift = 0  # SHAPE's offset at evaluation

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
        base: float = 10000.0,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal)
        if d_model % 2:
            raise ValueError(
                f"position=sinusoidal needs an even model.d_model, got {d_model}: "
                "use an even d_model or another position variant"
            )
        self.base = check_base(base)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add float32 sinusoids (float32 even under bf16 autocast)."""
        # [T], or [B, T] while SHAPE shifts each training sequence
        positions = shifted(positions, x.size(0), self.max_shift, self.training, self.eval_shift)
        return x + sinusoidal_encoding(positions, self.d_model, self.base)  # [B, T, d_model]


class SinusoidalShapePositionEncoding(ShapeSettings, SinusoidalPositionEncoding):
    """SHAPE (Kiyono et al. 2021) on the §3.5 sinusoids: shifted positions while training.

    Every position of a training sequence moves by one random k in 0..max_shift (source and
    target sequences draw their own k); at evaluation by eval_shift, 0 unless set (``shifted``).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
        base: float = 10000.0,
        max_shift: int = 100,
        eval_shift: int = 0,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal, base)
        self.max_shift = check_max_shift(max_shift)
        self.eval_shift = check_eval_shift(eval_shift, self.max_shift)


class LearnedPositionEncoding(PositionEncoding):
    """A learned max_positions x d_model table (Table 3 row E, Gehring et al. 2017).

    The paper gives neither the table size nor the initialization; as fairseq, we use
    ``max_positions`` rows (default 1024, ``model.max_positions``) initialized N(0, d_model^-0.5).
    A position past the table is an error, never an index error nor silent clipping.
    """

    table_rows = True  # sized by model.max_positions (no other encoding reads it)
    max_shift = 0  # SHAPE's K (LearnedShapePositionEncoding); 0 = positions as they are
    eval_shift = 0  # SHAPE's offset at evaluation

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal)
        self.table = nn.Parameter(torch.randn(max_positions, d_model) * d_model**-0.5)

    def check_length(self, num_positions: int) -> None:
        """Refuse sequences whose last position is past the table."""
        if num_positions > self.max_positions:
            raise PositionRangeError(
                f"position {num_positions - 1} is past the learned position table "
                f"(model.max_positions={self.max_positions}): raise model.max_positions "
                "or use a variant without a length cap "
                "(position=sinusoidal, rope, alibi, relative, t5)"
            )

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add the table rows of positions [T] (shifted per sequence while training)."""
        # [T], or [B, T] while SHAPE shifts each training sequence
        positions = shifted(positions, x.size(0), self.max_shift, self.training, self.eval_shift)
        return x + self.table[positions]  # [B, T, d_model]


class LearnedShapePositionEncoding(ShapeSettings, LearnedPositionEncoding):
    """SHAPE (Kiyono et al. 2021) on the learned table: shifted positions while training.

    Training shifts a sequence's positions by k in 0..max_shift (see ``shifted``), so the table
    holds max_positions + max_shift rows; evaluation still encodes max_positions positions
    (from 0), the same cap as the unshifted table.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
        max_shift: int = 100,
        eval_shift: int = 0,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal)
        self.max_shift = check_max_shift(max_shift)
        self.eval_shift = check_eval_shift(eval_shift, self.max_shift)
        rows = max_positions + max_shift  # the longest trained sequence at the largest shift
        self.table = nn.Parameter(torch.randn(rows, d_model) * d_model**-0.5)


ROPE_SCALINGS = (None, "linear", "ntk")


class RotaryPositionEncoding(PositionEncoding):
    """RoPE (Su et al. 2021): rotate each (2i, 2i+1) pair of q and k by pos * base^(-2i/d_head).

    The same frequency ladder as §3.5, over the head dimension, in every self-attention layer;
    cross-attention is left unrotated (see the module docstring).

    Inputs longer than training (inference-only settings, off by default; ``evaluate.py
    position_override.scaling=ntk position_override.factor=2`` sets them for a trained run):
    ``scaling=linear`` is position interpolation (Chen et al. 2023: positions / factor, so
    factor x the trained length falls inside the trained angles); ``scaling=ntk`` is NTK-aware
    base scaling (bloc97 2023: base * factor^(d_head / (d_head - 2)), which keeps the fastest
    frequencies and stretches the slowest by the factor). Factor 1 is the unscaled rotation.
    """

    inference_settings = ("scaling", "factor")

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
        base: float = 10000.0,
        scaling: str | None = None,
        factor: float = 1.0,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal)
        self.d_head = d_model // n_heads
        if self.d_head % 2:
            raise ValueError(f"position=rope needs an even head size, got {self.d_head}")
        self.base = check_base(base)
        self.scaling, self.factor = scaling, factor
        self._check_scaling()

    def _check_scaling(self) -> None:
        if self.scaling in ("none", "null"):
            self.scaling = None
        if self.scaling not in ROPE_SCALINGS:
            raise PositionSettingError(
                f"position scaling={self.scaling}: pass linear, ntk or null (unscaled)"
            )
        try:
            factor = float(self.factor)
        except (TypeError, ValueError):
            factor = math.nan
        if not (factor >= 1.0 and math.isfinite(factor)):  # nan; inf collapses every position
            raise PositionSettingError(
                f"position factor={self.factor}: pass a finite number, 1 (unscaled) or more "
                "(how many times the trained length the inputs reach)"
            )
        if factor != 1.0 and self.scaling is None:  # read by nothing (probe 16-9)
            raise PositionSettingError(
                f"position factor={self.factor} scales nothing without a scaling: pass "
                "scaling=linear or scaling=ntk with it, or leave factor at 1"
            )
        if factor == 1.0 and self.scaling is not None:  # named as scaled, unscaled (p-2, p-11)
            raise PositionSettingError(
                f"position scaling={self.scaling} with factor 1 scales nothing: pass a factor "
                "above 1 with it, or leave scaling at null"
            )
        self.factor = factor

    def apply_inference_settings(self, **settings) -> None:
        """Set scaling and/or factor, checked as the constructor checks them (all or none)."""
        before = self.inference_state()
        super().apply_inference_settings(**settings)
        try:
            self._check_scaling()
        except PositionSettingError:
            for key, value in before.items():
                setattr(self, key, value)
            raise

    def _rotate_one(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        base = self.base
        if self.scaling == "linear":
            positions = positions.to(torch.float64) / self.factor
        elif self.scaling == "ntk":
            base = self.base * self.factor ** (self.d_head / (self.d_head - 2))
        angles = _angles(positions, self.d_head, base)  # [T, d_head / 2]
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

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """-slope_h * |i - j|, [H, Tq, Tk] float32."""
        distance = (q_positions[:, None] - k_positions[None, :]).abs().float()  # [Tq, Tk]
        return -self.slopes[:, None, None] * distance  # [H, Tq, Tk]


class RelativeAttentionTerms(AttentionTerms):
    """Shaw et al. 2018 eq. (3)-(4) for one layer, by gathering over the distinct distances.

    With E^K, E^V [R, d_head] (R distinct clipped distances) and bucket(i, j) the row of
    distance j - i, the logits gain (q_i . E^K[bucket(i, j)]) / sqrt(d_head) and the output
    gains sum_j w_ij E^V[bucket(i, j)]; both go through [B, H, Tq, R] (q @ E^T, then a gather;
    the weights summed per distance, then @ E^V), never a [Tq, Tk, d_head] tensor.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, buckets: torch.Tensor):
        self.keys, self.values_table, self.buckets = (
            keys,
            values,
            buckets,
        )  # [R, d], [R, d], [Tq, Tk]

    def scores(self, q: torch.Tensor) -> torch.Tensor:
        """(q_i . a^K_ij) / sqrt(d_head), [B, H, Tq, Tk]."""
        per_distance = q @ self.keys.to(q.dtype).T  # [B, H, Tq, R]
        index = self.buckets.expand(*q.shape[:2], -1, -1)  # [B, H, Tq, Tk]
        return per_distance.gather(-1, index) * q.size(-1) ** -0.5

    def values(self, weights: torch.Tensor) -> torch.Tensor:
        """sum_j w_ij a^V_ij, [B, H, Tq, d_head]."""
        index = self.buckets.expand(*weights.shape[:2], -1, -1)  # [B, H, Tq, Tk]
        per_distance = weights.new_zeros(*weights.shape[:-1], self.keys.size(0))  # [B, H, Tq, R]
        per_distance.scatter_add_(-1, index, weights)
        return per_distance @ self.values_table.to(weights.dtype)  # [B, H, Tq, d_head]


class RelativePositionEncoding(PositionEncoding):
    """Shaw et al. 2018: learned relative key and value embeddings a^K, a^V per layer.

    Distances j - i are clipped to [-k, k] (``max_distance`` k). Default k = 16: the value Shaw
    et al. used for their base model (§4.1; their big model used 8, and their Table 2 shows no
    BLEU change for k >= 2); tensor2tensor's ``transformer_relative`` uses 20 and OpenNMT-py's
    docs suggest 16, 20 or 32. Self-attention only, no absolute encodings (adding them gave no
    gain, §4.2). The embeddings are shared across heads (§3.3's efficient form, and their big
    model; their base model kept one set per head): [R, d_head] per layer, R = 2k + 1 in the
    encoder and k + 1 in the causal decoder, which never sees j > i. No length cap: every
    distance past k shares the clipped embedding. Initialized N(0, d_head^-0.5) (the paper is
    silent; our learned table's rule over the head size).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
        max_distance: int = 16,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal)
        if max_distance < 1:
            raise PositionSettingError(f"position.max_distance={max_distance}: pass 1 or more")
        self.max_distance = max_distance
        d_head = d_model // n_heads
        rows = max_distance + 1 if causal else 2 * max_distance + 1
        self.key_embeddings = nn.Parameter(torch.randn(n_layers, rows, d_head) * d_head**-0.5)
        self.value_embeddings = nn.Parameter(torch.randn(n_layers, rows, d_head) * d_head**-0.5)

    def buckets(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """Row of clip(j - i, -k, k) (or -k..0 in the decoder) per query/key pair, [Tq, Tk]."""
        k = self.max_distance
        distance = k_positions[None, :] - q_positions[:, None]  # [Tq, Tk]
        return distance.clamp(-k, 0 if self.causal else k) + k

    def attention_terms(self, layer, q_positions, k_positions) -> RelativeAttentionTerms:
        """Layer `layer`'s a^K and a^V terms."""
        return RelativeAttentionTerms(
            self.key_embeddings[layer],
            self.value_embeddings[layer],
            self.buckets(q_positions, k_positions),
        )


def t5_buckets(
    relative: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each relative position j - i (Raffel et al. 2020, §2.1).

    Bidirectional: half the buckets for j > i. Then half of the rest are exact distances
    0..n/2-1, the others log-spaced up to max_distance; every longer distance shares the last.
    Causal: j > i (hidden by the mask anyway) falls in bucket 0 with distance 0.
    """
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    max_exact = num_buckets // 2
    scale = (num_buckets - max_exact) / math.log(max_distance / max_exact)
    far = max_exact + (torch.log(distance.clamp(min=1).float() / max_exact) * scale).long()
    far = far.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, far)


class T5PositionEncoding(PositionEncoding):
    """T5's relative attention bias (Raffel et al. 2020): a learned scalar per head and bucket.

    32 log-spaced buckets up to distance 128 by default, bidirectional in the encoder, causal in
    the decoder; one table per stack, shared by its layers (T5 computes it in the first layer
    and reuses it). Deviation: T5 drops the 1/sqrt(d_head) logit scaling (folding it into its
    initialization); we keep §3.2.1's scaling and add the bias after it. Initialized
    N(0, d_model^-0.5) as Hugging Face's T5. No length cap: distances past max_distance share
    the last bucket.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_positions: int,
        n_layers: int = 1,
        causal: bool = False,
        num_buckets: int = 32,
        max_distance: int = 128,
    ):
        super().__init__(d_model, n_heads, max_positions, n_layers, causal)
        if num_buckets < 4 or max_distance <= num_buckets // 2:
            raise PositionSettingError(
                f"position.num_buckets={num_buckets}, max_distance={max_distance}: pass at "
                "least 4 buckets and a max_distance above num_buckets / 2 (T5: 32 and 128)"
            )
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bias_table = nn.Parameter(torch.randn(num_buckets, n_heads) * d_model**-0.5)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        """The learned bias of each pair's bucket, [H, Tq, Tk] float32."""
        relative = k_positions[None, :] - q_positions[:, None]  # [Tq, Tk]
        buckets = t5_buckets(relative, not self.causal, self.num_buckets, self.max_distance)
        return self.bias_table[buckets].permute(2, 0, 1)  # [H, Tq, Tk]
