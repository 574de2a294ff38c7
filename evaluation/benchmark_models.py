"""The models the benchmarks time: ours from configs/model/<name>.yaml, and HF Marian of equal
dims (same layers, heads, d_ff, vocabulary, shared embeddings, post-LN, sinusoids)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_models(model_name: str, vocab_size: int, with_hf: bool, **dims):
    """Our Transformer of configs/model/<name>.yaml (+ dims) and optionally Marian of equal dims."""
    import torch
    from omegaconf import OmegaConf

    from data.tokenizer import BOS_ID, EOS_ID, PAD_ID
    from model.transformer import build_model

    model_cfg = OmegaConf.merge(
        OmegaConf.load(ROOT / "configs" / "model" / f"{model_name}.yaml"),
        {k: v for k, v in dims.items() if v is not None},
    )
    position = OmegaConf.load(ROOT / "configs" / "position" / "sinusoidal.yaml")
    torch.manual_seed(0)
    ours = build_model(model_cfg, position, vocab_size, PAD_ID).eval()
    if not with_hf:
        return ours, None, model_cfg
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=vocab_size,
        d_model=model_cfg.d_model,
        encoder_layers=model_cfg.n_encoder_layers,
        decoder_layers=model_cfg.n_decoder_layers,
        encoder_attention_heads=model_cfg.n_heads,
        decoder_attention_heads=model_cfg.n_heads,
        encoder_ffn_dim=model_cfg.d_ff,
        decoder_ffn_dim=model_cfg.d_ff,
        max_position_embeddings=model_cfg.max_positions,
        activation_function="relu",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=EOS_ID,
    )
    torch.manual_seed(0)
    theirs = MarianMTModel._from_config(config, attn_implementation="sdpa").eval()
    return ours, theirs, model_cfg
