"""The models the benchmarks time: ours from configs/model/<name>.yaml, and HF Marian of equal
dims (same layers, heads, d_ff, vocabulary, shared embeddings, post-LN, sinusoids)."""

from pathlib import Path

import torch
from omegaconf import OmegaConf

from common.errors import optional_module
from data.tokenizer import PAD_ID
from interop.marian import marian_config
from model.transformer import build_model

ROOT = Path(__file__).resolve().parents[1]


def build_models(model_name: str, vocab_size: int, with_hf: bool, **dims):
    """Our Transformer of configs/model/<name>.yaml (+ dims) and optionally Marian of equal dims."""
    model_cfg = OmegaConf.merge(
        OmegaConf.load(ROOT / "configs" / "model" / f"{model_name}.yaml"),
        {k: v for k, v in dims.items() if v is not None},
    )
    position = OmegaConf.load(ROOT / "configs" / "position" / "sinusoidal.yaml")
    torch.manual_seed(0)
    ours = build_model(model_cfg, position, vocab_size, PAD_ID).eval()
    if not with_hf:
        return ours, None, model_cfg
    # transformers deferred: optional (the bench extra), needed only with --vs hf
    MarianMTModel = optional_module("transformers", "bench").MarianMTModel

    config = marian_config(ours, model_cfg.max_positions)  # equal dims, ids, post-LN, ReLU
    torch.manual_seed(0)
    theirs = MarianMTModel._from_config(config, attn_implementation="sdpa").eval()
    return ours, theirs, model_cfg
