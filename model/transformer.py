"""The encoder-decoder Transformer of Vaswani et al. 2017 ("Attention Is All You Need").

As the paper (section numbers are its own): post-LN sub-layers LayerNorm(x + Dropout(f(x)))
(§3.1, §5.4); multi-head scaled dot-product attention (§3.2) through
``torch.nn.functional.scaled_dot_product_attention``; a ReLU feed-forward network (§3.3); one
embedding matrix shared by the source and target embeddings and the pre-softmax projection,
embeddings multiplied by sqrt(d_model) (§3.4); dropout on every sub-layer output and on the
embedding + position sums (§5.4). Position information comes from a ``PositionEncoding``
(model/position.py) built once per stack; its hooks are called in every layer whatever the
variant, and a self-attention layer leaves the fused kernel only where the variant returns
``AttentionTerms`` for it.

Choices the paper leaves open: LayerNorm eps 1e-6 (tensor2tensor); no bias on the shared output
projection; biases on the q/k/v and output projections of attention (the paper's formulas
Q W^Q, K W^K, V W^V, Concat(...) W^O and tensor2tensor have none; fairseq and PyTorch's
``nn.MultiheadAttention`` have them: 4 d_model parameters per attention block, 0.06% of the base
model); the initialization in ``Transformer._init_weights``.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import nn

from common.errors import UserError
from model.dropout import Dropout
from model.position import AttentionTerms, PositionEncoding

LayerCache = dict[str, torch.Tensor]


def attention_mask(allowed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A boolean mask (True = attend), or with a bias [H, Tq, Tk] an additive float mask."""
    if bias is None:
        return allowed
    return bias.masked_fill(~allowed, float("-inf"))  # broadcast to [B, H, Tq, Tk]


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    terms: AttentionTerms | None = None,
    on_weights: Callable[[torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_head) + mask) v [B, H, Tq, d_head], the softmax in float32.

    The same result as ``F.scaled_dot_product_attention``; used for bf16 on CPU, where two
    batched matmuls run 2x faster (forward + backward) than its fused bf16 and fp32 kernels,
    wherever a position variant adds terms to the logits or the output (``terms``), and where
    an analysis reads the attention weights (``on_weights`` is handed them).
    """
    scores = (q @ k.transpose(-1, -2)).float() * q.size(-1) ** -0.5  # [B, H, Tq, Tk]
    extra_scores = terms.scores(q) if terms is not None else None
    if extra_scores is not None:
        scores = scores + extra_scores.float()
    if is_causal:
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = (
            scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        )
    weights = scores.softmax(dim=-1)  # [B, H, Tq, Tk] float32
    if on_weights is not None:
        on_weights(weights)
    out = weights.to(v.dtype) @ v  # [B, H, Tq, d_head]
    extra_values = terms.values(weights) if terms is not None else None
    return out if extra_values is None else out + extra_values.to(out.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (§3.2.2); q, k and v are projected apart so keys can be cached."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(
                f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}: "
                "pick a head count that divides d_model"
            )
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        # an analysis's reader of the softmax weights [B, H, Tq, Tk] (evaluation/attention.py)
        self.weights_hook: Callable[[torch.Tensor], None] | None = None

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # [B, H, T, d_head]

    def query(self, x: torch.Tensor) -> torch.Tensor:
        """Projected queries [B, H, T, d_head] of x [B, T, d_model]."""
        return self._split_heads(self.q_proj(x))

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected keys and values, each [B, H, T, d_head]."""
        k, v = self.kv_proj(x).chunk(2, dim=-1)
        return self._split_heads(k), self._split_heads(v)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        terms: AttentionTerms | None = None,
    ) -> torch.Tensor:
        """softmax(q k^T / sqrt(d_head) + mask) v, heads merged and projected: [B, Tq, d_model].

        With a position variant's terms, its logit and output terms join in (explicit path).
        """
        explicit = terms is not None or self.weights_hook is not None
        if explicit or (q.device.type == "cpu" and q.dtype == torch.bfloat16):
            out = explicit_attention(q, k, v, mask, is_causal, terms, self.weights_hook)
        else:
            if mask is not None and mask.dtype != torch.bool:
                mask = mask.to(q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
        return self.out_proj(out.transpose(1, 2).flatten(2))  # [B, Tq, d_model]


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d_model] -> [B, T, d_model]; ReLU in place (w1's backward keeps no output).

        w1 runs on the flattened tokens so that the in-place ReLU acts on addmm's own output,
        not on a 3-d view of it: on a view, autograd's backward copies the whole hidden
        gradient three times (CopySlices), 12% of an FFN's forward + backward on a CPU.
        """
        hidden = F.linear(x.reshape(-1, x.shape[-1]), self.w1.weight, self.w1.bias)  # [B*T, d_ff]
        return self.w2(F.relu(hidden, inplace=True)).view(*x.shape[:-1], -1)  # [B, T, d_model]


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each as LayerNorm(x + Dropout(sublayer(x)))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, eps: float):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        position: PositionEncoding,
        index: int = 0,
    ) -> torch.Tensor:
        """x [B, S, d_model] -> [B, S, d_model]; index: this layer's place in the stack."""
        q = self.self_attn.query(x)
        k, v = self.self_attn.keys_values(x)
        q, k = position.rotate(q, k, positions, positions)
        terms = position.attention_terms(index, positions, positions)
        x = self.norm1(self.dropout.residual(x, self.self_attn.attend(q, k, v, mask, terms=terms)))
        return self.norm2(self.dropout.residual(x, self.ffn(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, then feed-forward."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, eps: float):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.norm3 = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor | None,
        self_mask: torch.Tensor | None,
        cross_mask: torch.Tensor,
        positions: torch.Tensor,
        position: PositionEncoding,
        cache: LayerCache | None = None,
        index: int = 0,
    ) -> torch.Tensor:
        """y [B, T, d_model] over memory [B, S, d_model] -> [B, T, d_model].

        With a cache, keys/values of earlier steps are read from it and this step's appended;
        the encoder's keys/values are projected once and kept there. index: this layer's place
        in the stack.
        """
        q = self.self_attn.query(y)
        k, v = self.self_attn.keys_values(y)
        q, k = position.rotate(q, k, positions, positions)
        if cache is not None:
            if "self_k" in cache:
                k = torch.cat((cache["self_k"], k), dim=2)  # [B, H, t + T, d_head]
                v = torch.cat((cache["self_v"], v), dim=2)
            cache["self_k"], cache["self_v"] = k, v
        is_causal = self_mask is None
        # the keys end at this step's last query: positions t + T - (t + T) .. t + T - 1
        key_positions = positions[-1] + 1 - k.size(2) + torch.arange(k.size(2), device=y.device)
        terms = position.attention_terms(index, positions, key_positions)
        y = self.norm1(
            self.dropout.residual(y, self.self_attn.attend(q, k, v, self_mask, is_causal, terms))
        )

        if cache is not None and "cross_k" in cache:
            mk, mv = cache["cross_k"], cache["cross_v"]
        else:
            mk, mv = self.cross_attn.keys_values(memory)  # [B, H, S, d_head]
            if cache is not None:
                cache["cross_k"], cache["cross_v"] = mk, mv
        cross = self.cross_attn.attend(self.cross_attn.query(y), mk, mv, cross_mask)
        y = self.norm2(self.dropout.residual(y, cross))
        return self.norm3(self.dropout.residual(y, self.ffn(y)))


class Transformer(nn.Module):
    """The encoder-decoder Transformer (§3) with a pluggable position encoding."""

    def __init__(
        self,
        vocab_size: int,
        position: Callable[..., PositionEncoding],
        d_model: int = 512,
        n_heads: int = 8,
        n_encoder_layers: int = 6,
        n_decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        max_positions: int = 1024,
        layer_norm_eps: float = 1e-6,
        pad_id: int = 0,
    ):
        super().__init__()
        self.d_model = d_model
        self.pad_id = pad_id
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.encoder_position = position(
            d_model=d_model,
            n_heads=n_heads,
            max_positions=max_positions,
            n_layers=n_encoder_layers,
            causal=False,
        )
        self.decoder_position = position(
            d_model=d_model,
            n_heads=n_heads,
            max_positions=max_positions,
            n_layers=n_decoder_layers,
            causal=True,
        )
        layer_args = (d_model, n_heads, d_ff, dropout, layer_norm_eps)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(*layer_args) for _ in range(n_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(*layer_args) for _ in range(n_decoder_layers)
        )
        self.dropout = Dropout(dropout)
        self._init_weights()

    def _init_weights(self) -> None:
        """Xavier-uniform weights and zero biases in every linear layer; N(0, d_model^-0.5)
        embeddings with a zero pad row (the paper specifies no initialization).

        The embeddings follow fairseq; the q/k/v projections do not: fairseq draws them with
        gain 1/sqrt(2), here one rule (gain 1) holds for every linear layer.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=self.d_model**-0.5)
        with torch.no_grad():
            self.embedding.weight[self.pad_id].zero_()

    def check_lengths(self, src_len: int | None = None, tgt_len: int | None = None) -> None:
        """Raise PositionRangeError if a source of src_len or a target of tgt_len positions
        cannot be encoded (a learned table's rows, say); None: that side is not checked."""
        if src_len is not None:
            self.encoder_position.check_length(src_len)
        if tgt_len is not None:
            self.decoder_position.check_length(tgt_len)

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor, position: PositionEncoding):
        x = self.embedding(tokens) * self.d_model**0.5  # [B, T, d_model]
        return self.dropout(position.embed(x, positions))

    def encode(self, src: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder output [B, S, d_model] and the source mask [B, S] (True = real token).

        offset: the first position (0; the shift tests move every position by a constant).
        """
        self.encoder_position.check_length(offset + src.size(1))
        src_keep = src != self.pad_id  # [B, S]
        positions = torch.arange(offset, offset + src.size(1), device=src.device)  # [S]
        allowed = src_keep[:, None, None, :]  # [B, 1, 1, S]
        mask = attention_mask(allowed, self.encoder_position.bias(positions, positions))
        x = self._embed(src, positions, self.encoder_position)
        for i, layer in enumerate(self.encoder_layers):
            x = layer(x, mask, positions, self.encoder_position, i)
        return x, src_keep

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor | None,
        src_keep: torch.Tensor,
        cache: list[LayerCache] | None = None,
        offset: int = 0,
    ) -> torch.Tensor:
        """Logits [B, T, vocab] for target inputs [B, T] starting at position offset.

        Teacher forcing: offset 0 and no cache. Incremental decoding: pass the same cache
        (from ``new_cache(memory)``, which holds the encoder's keys/values, so memory may then
        be None) at every step, with offset = tokens already decoded.
        """
        length = tgt_in.size(1)
        self.decoder_position.check_length(offset + length)
        positions = torch.arange(offset, offset + length, device=tgt_in.device)  # [T]
        first_key = 0 if cache is not None else offset  # a cache holds the `offset` earlier keys
        key_positions = torch.arange(first_key, offset + length, device=tgt_in.device)  # [t + T]
        bias = self.decoder_position.bias(positions, key_positions)
        if bias is None and cache is None:
            self_mask = None  # causal, and right padding never precedes a real token
        else:
            allowed = key_positions[None, :] <= positions[:, None]  # [T, t + T]
            self_mask = attention_mask(allowed, bias)
        cross_mask = src_keep[:, None, None, :]  # [B, 1, 1, S]
        y = self._embed(tgt_in, positions, self.decoder_position)
        for i, layer in enumerate(self.decoder_layers):
            layer_cache = cache[i] if cache is not None else None
            y = layer(
                y, memory, self_mask, cross_mask, positions, self.decoder_position, layer_cache, i
            )
        return F.linear(y, self.embedding.weight)  # [B, T, vocab]

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits [B, T, vocab] for sources [B, S] and target inputs [B, T]."""
        memory, src_keep = self.encode(src)
        return self.decode(tgt_in, memory, src_keep)

    def apply_position_settings(self, settings: dict) -> dict:
        """Apply inference-only position settings (e.g. RoPE scaling) to both stacks.

        Returns the settings now in force; a key the variant does not allow is a one-line error.
        """
        for position in (self.encoder_position, self.decoder_position):
            position.apply_inference_settings(**settings)
        return self.encoder_position.inference_state()

    def new_cache(self, memory: torch.Tensor | None = None, repeat: int = 1) -> list[LayerCache]:
        """A key/value cache for incremental decoding.

        Given the encoder output memory [B, S, d_model], the cross-attention keys/values are
        projected once here and repeated for `repeat` hypotheses per sentence (beam search).
        """
        cache: list[LayerCache] = [{} for _ in self.decoder_layers]
        if memory is not None:
            for layer, layer_cache in zip(self.decoder_layers, cache, strict=True):
                k, v = layer.cross_attn.keys_values(memory)  # [B, H, S, d_head]
                layer_cache["cross_k"] = k.repeat_interleave(repeat, dim=0)  # [B * repeat, ...]
                layer_cache["cross_v"] = v.repeat_interleave(repeat, dim=0)
        return cache


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (the shared embedding counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_model(model_cfg, position_cfg, vocab_size: int, pad_id: int = 0) -> Transformer:
    """The Transformer that configs/model/*.yaml and configs/position/*.yaml describe.

    A bad setting (a constructor's ValueError, or a UserError) is one UserError with the
    constructor's one-line message, not Hydra's wrapped traceback.
    """
    try:
        return instantiate(model_cfg, position=position_cfg, vocab_size=vocab_size, pad_id=pad_id)
    except InstantiationException as e:
        if isinstance(e.__cause__, UserError):
            raise e.__cause__ from None
        if not isinstance(e.__cause__, ValueError):
            raise
        raise UserError(str(e.__cause__)) from e.__cause__
