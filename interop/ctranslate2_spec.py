"""Our Transformer as a CTranslate2 ``TransformerSpec``, built from the weights (tensors only).

CTranslate2 4.x converts Marian folders, but its Marian converter assumes Marian's conventions
(pad is the last vocabulary entry, the decoder starts from a zero embedding), which ours do not
follow (pad 0, a learned BOS start). So, as its OpenNMT-py and fairseq converters do, the spec
is filled from the weights here: post-LN layers (``pre_norm=False``: each block's LayerNorm
after its residual add, §3.1), ReLU, embeddings scaled by sqrt(d_model) (§3.4), the shared
embedding as the output projection, our LayerNorm eps, and an explicit position table in our
own channel layout (no permutation needed: CTranslate2 adds whatever table it is given).

Position variants: ``sinusoidal`` (the §3.5 table, ``max_positions`` rows), ``learned`` (each
stack's table), ``none`` (a zero table) and ``rope`` (CTranslate2's rotary self-attention,
interleaved pairs as ours, same base; cross-attention unrotated as ours); ``sinusoidal_shape``
and ``learned_shape`` as their unshifted tables (SHAPE shifts in training only). ``alibi`` is
refused: CTranslate2's ALiBi exists for decoder-only models, not for an encoder; so are
``relative`` and ``t5``, whose per-layer or per-stack attention terms this spec does not map
(CTranslate2's own relative-position and T5-bias specs would be the way to add them).
"""

import torch

from common.errors import UserError, optional_module
from model.position import (
    LearnedPositionEncoding,
    NoPositionEncoding,
    PositionEncoding,
    RotaryPositionEncoding,
    SinusoidalPositionEncoding,
    sinusoidal_table,
)
from model.transformer import Transformer


def _position_table(position: PositionEncoding, d_model: int, max_positions: int):
    """The [rows, d_model] table added to the scaled embeddings, or None (rotary)."""
    # SHAPE's subclasses shift positions randomly in training only: at inference they are these
    # tables from row eval_shift on (0 unless position_override.eval_shift set it)
    if isinstance(position, SinusoidalPositionEncoding):
        shift = position.eval_shift
        return sinusoidal_encoding_table(max_positions + shift, d_model, position.base)[shift:]
    if isinstance(position, LearnedPositionEncoding):
        return position.table.detach().float().cpu()[position.eval_shift :]
    if type(position) is NoPositionEncoding:
        return torch.zeros(max_positions, d_model)
    if type(position) is RotaryPositionEncoding:
        if position.scaling is not None and position.factor != 1:
            raise UserError(
                f"position_override.scaling={position.scaling} (factor {position.factor}) has no "
                "CTranslate2 equivalent here: evaluate with engine=ours"
            )
        return None
    raise UserError(
        f"position={type(position).__name__} has no CTranslate2 equivalent for an encoder-decoder "
        "(CTranslate2 supports absolute tables and rotary self-attention here): pick another engine"
    )


def sinusoidal_encoding_table(rows: int, d_model: int, base: float) -> torch.Tensor:
    """The §3.5 table (interleaved sin/cos), [rows, d_model] float32."""
    return sinusoidal_table(rows, d_model, base)


def _linear(spec, weights: dict, name: str) -> None:
    """Fill a CTranslate2 linear spec with our layer name's weight and bias."""
    spec.weight, spec.bias = weights[f"{name}.weight"], weights[f"{name}.bias"]


def _fused(spec, weights: dict, *names: str) -> None:
    """Fill a CTranslate2 linear spec with our layers' weights and biases stacked (q then kv)."""
    spec.weight = torch.cat([weights[f"{n}.weight"] for n in names])
    spec.bias = torch.cat([weights[f"{n}.bias"] for n in names])


def _norm(spec, weights: dict, name: str) -> None:
    """Fill a CTranslate2 LayerNorm spec with our LayerNorm's weight (gamma) and bias (beta)."""
    spec.gamma, spec.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]


def _ffn(spec, weights: dict, name: str, norm_name: str) -> None:
    """Fill a CTranslate2 feed-forward spec: our w1, w2 and the LayerNorm after the block."""
    _linear(spec.linear_0, weights, f"{name}.w1")
    _linear(spec.linear_1, weights, f"{name}.w2")
    _norm(spec.layer_norm, weights, norm_name)


def _stack_specs(model: Transformer):
    """Empty CTranslate2 encoder and decoder specs of our layer counts, heads and positions."""
    # ctranslate2 deferred: optional (the export extra), needed only to convert
    common_spec = optional_module("ctranslate2.specs.common_spec", "export")
    transformer_spec = optional_module("ctranslate2.specs.transformer_spec", "export")

    first = model.encoder_layers[0] if len(model.encoder_layers) else model.decoder_layers[0]
    n_heads = first.self_attn.n_heads
    rotary = {}
    if isinstance(model.encoder_position, RotaryPositionEncoding):
        rotary = dict(rotary_dim=0, rotary_interleave=True, rotary_base=model.encoder_position.base)
    encoder = transformer_spec.TransformerEncoderSpec(
        len(model.encoder_layers),
        n_heads,
        pre_norm=False,
        activation=common_spec.Activation.RELU,
        **rotary,
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        len(model.decoder_layers),
        n_heads,
        pre_norm=False,
        activation=common_spec.Activation.RELU,
        **rotary,
    )
    return encoder, decoder


def _fill_layers(encoder, decoder, weights: dict) -> None:
    """Fill every encoder and decoder layer's attention, LayerNorm and feed-forward specs."""
    for i, layer in enumerate(encoder.layer):
        p = f"encoder_layers.{i}"
        attention = layer.self_attention
        _fused(attention.linear[0], weights, f"{p}.self_attn.q_proj", f"{p}.self_attn.kv_proj")
        _linear(attention.linear[1], weights, f"{p}.self_attn.out_proj")
        _norm(attention.layer_norm, weights, f"{p}.norm1")
        _ffn(layer.ffn, weights, f"{p}.ffn", f"{p}.norm2")
    for i, layer in enumerate(decoder.layer):
        p = f"decoder_layers.{i}"
        attention = layer.self_attention
        _fused(attention.linear[0], weights, f"{p}.self_attn.q_proj", f"{p}.self_attn.kv_proj")
        _linear(attention.linear[1], weights, f"{p}.self_attn.out_proj")
        _norm(attention.layer_norm, weights, f"{p}.norm1")
        _linear(layer.attention.linear[0], weights, f"{p}.cross_attn.q_proj")
        _linear(layer.attention.linear[1], weights, f"{p}.cross_attn.kv_proj")
        _linear(layer.attention.linear[2], weights, f"{p}.cross_attn.out_proj")
        _norm(layer.attention.layer_norm, weights, f"{p}.norm2")
        _ffn(layer.ffn, weights, f"{p}.ffn", f"{p}.norm3")


def ctranslate2_spec(model: Transformer, vocabulary: list[str], max_positions: int = 1024):
    """A ``ctranslate2.specs.TransformerSpec`` computing our model; vocabulary: pieces by id.

    max_positions: rows of the sinusoid table (CTranslate2 needs a finite one; ours has no cap).
    """
    # ctranslate2 deferred: optional (the export extra), needed only to convert
    transformer_spec = optional_module("ctranslate2.specs.transformer_spec", "export")

    d = model.d_model
    tables = [
        _position_table(p, d, max_positions)
        for p in (model.encoder_position, model.decoder_position)
    ]
    encoder, decoder = _stack_specs(model)
    weights = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    eps = next(m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm))
    embedding = weights["embedding.weight"]  # [V, d_model]
    encoder.embeddings[0].weight = embedding
    decoder.embeddings.weight = embedding
    decoder.projection.weight = embedding  # §3.4: shared with the pre-softmax projection
    for stack, table in zip((encoder, decoder), tables, strict=True):
        if table is not None:
            stack.position_encodings.encodings = table
        elif hasattr(stack, "position_encodings"):
            stack.position_encodings.encodings = torch.zeros(max_positions, d)
    _fill_layers(encoder, decoder, weights)

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = eps
    spec.config.add_source_eos = False  # the engine passes our EOS itself
    spec.config.decoder_start_token = vocabulary[2]  # our BOS "<s>", a learned embedding
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    return spec


def save_ctranslate2(spec, out_dir, quantization: str | None = None) -> None:
    """Validate, optionally quantize (int8, ...) and write the spec as a CTranslate2 folder."""
    # ctranslate2 deferred: optional (the export extra), needed only to convert
    Converter = optional_module("ctranslate2.converters.converter", "export").Converter

    class SpecConverter(Converter):
        def _load(self):
            return spec

    SpecConverter().convert(str(out_dir), quantization=quantization, force=True)
