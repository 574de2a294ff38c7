"""Our Transformer's weights as Hugging Face ``MarianMTModel`` weights: tensors only.

Marian (``transformers.models.marian``) is the paper's architecture as ours is: post-LN layers,
ReLU feed-forward, one embedding matrix shared by both stacks and the output projection, scaled
by sqrt(d_model), fixed sinusoids from position 0 (§3, §3.4, §3.5). Four differences, each mapped
here exactly:

- Marian lays the sinusoids out as concatenated halves ``[sin_0 .. sin_{d/2-1}, cos_0 ..]``
  where the paper (and ours) interleave ``sin_0, cos_0, sin_1, ...``. One fixed permutation
  ``marian[c] = ours[channel_permutation(d)[c]]`` of the d_model channels, applied to every
  weight that reads or writes the residual stream (the embedding, every projection's input or
  output side, every LayerNorm's weight and bias, both FFN matrices), maps one onto the other:
  LayerNorm, ReLU and attention are equivariant under a channel permutation, so every activation
  of Marian is ours permuted and the logits are equal.
- Marian projects q, k and v apart; ours fuses k and v (``kv_proj``): split along the output.
- Marian adds ``final_logits_bias`` (kept at zero) to the logits; ours has none.
- Marian's LayerNorms are ``nn.LayerNorm(d_model)`` with torch's default eps 1e-5, hard-coded
  (``MarianConfig`` has no eps field); ours default to 1e-6 (tensor2tensor). ``set_layer_norm_eps``
  sets the modules' eps after building or loading; a folder loaded with ``from_pretrained``
  alone runs at 1e-5 (interop/export.py measures what that changes).
"""

import torch

from common.errors import UserError, optional_module
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from model.position import SinusoidalPositionEncoding
from model.transformer import Transformer

MARIAN_SINUSOID_BASE = 10000.0  # hard-coded in MarianSinusoidalPositionalEmbedding


def channel_permutation(d_model: int) -> torch.Tensor:
    """Indices [d_model]: Marian's channel c is our channel perm[c] (sin channels, then cos)."""
    return torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))


def check_mappable(model: Transformer) -> None:
    """Raise UserError unless the model is one Marian can hold: fixed sinusoids of base 10000."""
    for stack in (model.encoder_position, model.decoder_position):
        if type(stack) is not SinusoidalPositionEncoding:
            raise UserError(
                f"position={type(stack).__name__} has no Hugging Face Marian equivalent: Marian "
                "has only fixed sinusoidal absolute positions; export a position=sinusoidal run"
            )
        if stack.base != MARIAN_SINUSOID_BASE:
            raise UserError(
                f"position.base={stack.base}: Marian's sinusoids use base 10000 only; "
                "export a run trained with the default base"
            )


def marian_config(model: Transformer, max_positions: int = 1024, **overrides):
    """The ``MarianConfig`` of our model's dims and special ids (pad 0, BOS 2 starts, EOS 3)."""
    # transformers deferred: optional (the export and bench extras), needed only to map
    MarianConfig = optional_module("transformers", "export").MarianConfig

    first = model.encoder_layers[0] if len(model.encoder_layers) else model.decoder_layers[0]
    settings = dict(
        vocab_size=model.embedding.num_embeddings,
        decoder_vocab_size=model.embedding.num_embeddings,
        d_model=model.d_model,
        encoder_layers=len(model.encoder_layers),
        decoder_layers=len(model.decoder_layers),
        encoder_attention_heads=first.self_attn.n_heads,
        decoder_attention_heads=first.self_attn.n_heads,
        encoder_ffn_dim=first.ffn.w1.out_features,
        decoder_ffn_dim=first.ffn.w1.out_features,
        max_position_embeddings=max_positions,
        activation_function="relu",
        dropout=model.dropout.p,
        attention_dropout=0.0,  # §5.4: dropout on sub-layer outputs only, as ours
        activation_dropout=0.0,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=EOS_ID,
    )
    return MarianConfig(**(settings | overrides))


def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under Marian's names, residual-stream channels permuted (module docstring)."""
    check_mappable(model)
    perm = channel_permutation(model.d_model)
    ours = {k: v.detach() for k, v in model.state_dict().items()}

    def reads(name: str) -> torch.Tensor:  # Linear weight [out, d_model]: permute inputs
        return ours[name][:, perm]

    def writes(name: str) -> torch.Tensor:  # Linear weight [d_model, in] or bias: permute outputs
        return ours[name][perm]

    out = {"model.shared.weight": ours["embedding.weight"][:, perm]}  # [V, d_model]

    def attention(src: str, dst: str) -> None:
        d = model.d_model
        kv_w, kv_b = ours[f"{src}.kv_proj.weight"][:, perm], ours[f"{src}.kv_proj.bias"]
        out[f"{dst}.q_proj.weight"] = reads(f"{src}.q_proj.weight")
        out[f"{dst}.q_proj.bias"] = ours[f"{src}.q_proj.bias"]
        out[f"{dst}.k_proj.weight"], out[f"{dst}.v_proj.weight"] = kv_w[:d], kv_w[d:]
        out[f"{dst}.k_proj.bias"], out[f"{dst}.v_proj.bias"] = kv_b[:d], kv_b[d:]
        out[f"{dst}.out_proj.weight"] = writes(f"{src}.out_proj.weight")
        out[f"{dst}.out_proj.bias"] = writes(f"{src}.out_proj.bias")

    def norm(src: str, dst: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = writes(f"{src}.weight"), writes(f"{src}.bias")

    def ffn(src: str, dst: str) -> None:
        out[f"{dst}.fc1.weight"] = reads(f"{src}.w1.weight")
        out[f"{dst}.fc1.bias"] = ours[f"{src}.w1.bias"]
        out[f"{dst}.fc2.weight"] = writes(f"{src}.w2.weight")
        out[f"{dst}.fc2.bias"] = writes(f"{src}.w2.bias")

    for i in range(len(model.encoder_layers)):
        src, dst = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        attention(f"{src}.self_attn", f"{dst}.self_attn")
        norm(f"{src}.norm1", f"{dst}.self_attn_layer_norm")
        ffn(f"{src}.ffn", dst)
        norm(f"{src}.norm2", f"{dst}.final_layer_norm")
    for i in range(len(model.decoder_layers)):
        src, dst = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        attention(f"{src}.self_attn", f"{dst}.self_attn")
        norm(f"{src}.norm1", f"{dst}.self_attn_layer_norm")
        attention(f"{src}.cross_attn", f"{dst}.encoder_attn")
        norm(f"{src}.norm2", f"{dst}.encoder_attn_layer_norm")
        ffn(f"{src}.ffn", dst)
        norm(f"{src}.norm3", f"{dst}.final_layer_norm")
    out["final_logits_bias"] = torch.zeros(1, model.embedding.num_embeddings)
    return {k: v.contiguous().clone() for k, v in out.items()}


def layer_norm_eps(model: Transformer) -> float:
    """The eps of our model's LayerNorms (one value: every layer is built with the same)."""
    return next(m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm))


def set_layer_norm_eps(marian: torch.nn.Module, eps: float) -> torch.nn.Module:
    """Marian with every LayerNorm's eps set to eps (Marian hard-codes torch's 1e-5)."""
    for module in marian.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = eps
    return marian


def to_marian(model: Transformer, max_positions: int = 1024):
    """A ``MarianMTModel`` (eval mode, float32, SDPA attention) computing our model's logits."""
    # transformers deferred: optional (the export and bench extras), needed only to map
    MarianMTModel = optional_module("transformers", "export").MarianMTModel

    config = marian_config(model, max_positions)
    marian = MarianMTModel._from_config(config, attn_implementation="sdpa")
    missing, unexpected = marian.load_state_dict(marian_state_dict(model), strict=False)
    # the sinusoid tables are buffers Marian builds itself; the tied copies of model.shared
    allowed = {"embed_positions.weight", "embed_tokens.weight", "lm_head.weight"}
    left = [k for k in missing if not any(k.endswith(a) for a in allowed)]
    if left or unexpected:
        raise RuntimeError(f"Marian weights not mapped: missing {left}, unexpected {unexpected}")
    marian.tie_weights()
    return set_layer_norm_eps(marian, layer_norm_eps(model)).eval()


@torch.inference_mode()
def marian_generate(
    marian,
    sources: list[list[int]],
    beam: int = 1,
    lenpen: float = 1.0,
    max_len_b: int = 50,
) -> list[list[int]]:
    """``marian.generate`` on each source (subword ids + EOS), with our per-sentence length cap.

    Our search caps an output at source subwords + max_len_b tokens, EOS included, and forces
    EOS at the cap (model/search.py); ``generate`` caps a whole batch at one length, so sources
    are batched by length and each batch gets ``max_new_tokens`` = that cap with
    ``forced_eos_token_id``. Beam > 1 is Hugging Face's beam search, which divides log P(Y) by
    |Y|^lenpen, not the paper's GNMT penalty. Returns the outputs without start token and EOS.
    """
    out: list[list[int]] = [[] for _ in sources]
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(sources):
        by_length.setdefault(len(ids), []).append(i)
    device = next(marian.parameters()).device
    for length, rows in sorted(by_length.items()):
        src = torch.tensor([sources[i] for i in rows], device=device)  # [B, S], no padding
        generated = marian.generate(
            input_ids=src,
            attention_mask=torch.ones_like(src),
            num_beams=beam,
            length_penalty=lenpen,
            **({"early_stopping": True} if beam > 1 else {}),
            do_sample=False,
            max_new_tokens=length - 1 + max_len_b,
            min_new_tokens=0,
            forced_eos_token_id=EOS_ID,
            eos_token_id=EOS_ID,
            pad_token_id=PAD_ID,
            decoder_start_token_id=BOS_ID,
            bos_token_id=BOS_ID,
        )  # [B, 1 + T]
        for i, row in zip(rows, generated[:, 1:].tolist(), strict=True):
            out[i] = row[: row.index(EOS_ID)] if EOS_ID in row else row
    return out
