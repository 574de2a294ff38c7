"""The Transformer: paper dimensions, incremental decoding, causality, padding, permutations."""

import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import OmegaConf

from common.errors import UserError
from model.position import PositionRangeError
from model.transformer import (
    FeedForward,
    MultiHeadAttention,
    build_model,
    count_parameters,
    explicit_attention,
)
from tests.conftest import CONFIG_DIR, tiny_model


def test_base_model_has_the_papers_parameter_count():
    cfg = OmegaConf.load(CONFIG_DIR / "model" / "base.yaml")
    position = OmegaConf.load(CONFIG_DIR / "position" / "sinusoidal.yaml")
    model = instantiate(cfg, position=position, vocab_size=37000)
    n = count_parameters(model)
    print(f"model=base, vocab 37000: {n:,} parameters (paper: 65M)")
    assert 60e6 <= n <= 65e6


def test_embeddings_and_output_projection_share_one_matrix(position_yaml):
    model = tiny_model(position_yaml)
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 4))
    model.eval()
    logits = model(src, tgt)
    with torch.no_grad():
        model.embedding.weight[7] += torch.randn(model.embedding.weight.shape[1])
    assert not torch.allclose(model(src, tgt)[..., 7], logits[..., 7])
    assert sum(
        p.numel() for p in model.parameters() if p.shape == model.embedding.weight.shape
    ) == (model.embedding.weight.numel())


def test_attention_equals_the_reference_formula():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    q, (k, v) = attn.query(x), attn.keys_values(x)
    scores = q @ k.transpose(-1, -2) / (16 // 4) ** 0.5  # [B, H, T, T]
    weights = scores.masked_fill(~keep, float("-inf")).softmax(-1)
    expected = attn.out_proj((weights @ v).transpose(1, 2).flatten(2))
    assert torch.allclose(attn.attend(q, k, v, keep), expected, atol=1e-6)


def test_d_model_must_divide_into_heads():
    with pytest.raises(ValueError, match="not divisible by model.n_heads"):
        MultiHeadAttention(30, 4)


def test_incremental_decoding_equals_teacher_forcing(position_yaml):
    model = tiny_model(position_yaml).eval()
    src = torch.randint(4, 40, (3, 7))
    src[1, 4:] = 0
    tgt = torch.randint(4, 40, (3, 9))
    full = model(src, tgt)
    memory, keep = model.encode(src)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, keep, cache, offset=t) for t in range(9)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5
    prefilled = model.new_cache(memory, repeat=2)  # encoder keys/values projected up front
    rows = torch.arange(3).repeat_interleave(2)
    steps = [model.decode(tgt[rows, t : t + 1], None, keep[rows], prefilled, t) for t in range(9)]
    assert (torch.cat(steps, dim=1) - full[rows]).abs().max() <= 1e-5


def test_shape_decodes_incrementally_at_an_evaluation_offset():
    """eval_shift moves every position alike: cached decoding still equals teacher forcing."""
    model = tiny_model(CONFIG_DIR / "position" / "sinusoidal_shape.yaml").eval()
    src, tgt = torch.randint(4, 40, (2, 7)), torch.randint(4, 40, (2, 9))
    at_zero = model(src, tgt)
    model.apply_position_settings({"eval_shift": 60})
    full = model(src, tgt)
    assert (full - at_zero).abs().max() > 1e-3  # the offset reaches the output
    memory, keep = model.encode(src)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, keep, cache, offset=t) for t in range(9)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5


def test_every_tensor_stays_on_the_models_device(position_yaml):
    """On the meta device, a tensor made on the CPU inside the model is an error, as on CUDA."""
    meta = torch.device("meta")
    model = tiny_model(position_yaml).to(meta)
    src, tgt = torch.randint(4, 40, (3, 7)).to(meta), torch.randint(4, 40, (3, 9)).to(meta)
    logits = model(src, tgt)  # [B, T, V]
    logits.sum().backward()
    assert logits.device == meta and all(p.grad.device == meta for p in model.parameters())
    model.eval()
    memory, keep = model.encode(src)
    cache = model.new_cache(memory, repeat=2)
    rows = torch.arange(3).repeat_interleave(2)
    step = model.decode(tgt[rows, :1], None, keep[rows], cache, offset=0)
    assert step.device == meta and step.shape == (6, 1, 40)


def test_decoder_is_causal(position_yaml):
    model = tiny_model(position_yaml).eval()
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 8))
    changed = tgt.clone()
    changed[:, 5:] = torch.randint(4, 40, (2, 3))
    a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:], atol=1e-4)


def test_padding_does_not_change_real_positions(position_yaml):
    model = tiny_model(position_yaml).eval()
    src, tgt = torch.randint(4, 40, (1, 5)), torch.randint(4, 40, (1, 4))
    alone = model(src, tgt)
    padded_src = F.pad(src, (0, 3), value=0)
    padded_tgt = F.pad(tgt, (0, 2), value=0)
    other = torch.randint(4, 40, (1, 8)), torch.randint(4, 40, (1, 6))
    batch = model(torch.cat((padded_src, other[0])), torch.cat((padded_tgt, other[1])))
    assert torch.allclose(batch[0, :4], alone[0], atol=1e-5)


def test_encoder_is_permutation_equivariant_only_without_positions(position_yaml):
    model = tiny_model(position_yaml).eval()
    with torch.no_grad():
        for p in model.parameters():  # a trained learned table is not zero: make it count
            if p.dim() == 2 and p.shape[0] == 64:
                p.normal_()
    src = torch.randint(4, 40, (2, 7))
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    out, _ = model.encode(src)
    out_perm, _ = model.encode(src[:, perm])
    equivariant = torch.allclose(out[:, perm], out_perm, atol=1e-5)
    assert equivariant == (position_yaml.stem == "none")


def test_learned_overflow_in_the_model_is_the_clear_error():
    from tests.conftest import POSITION_CONFIGS

    learned = next(p for p in POSITION_CONFIGS if p.stem == "learned")
    model = tiny_model(learned, max_positions=8)
    with pytest.raises(UserError, match="past the learned position table"):
        model(torch.randint(4, 40, (1, 9)), torch.randint(4, 40, (1, 3)))


@pytest.mark.parametrize("kind", ["causal", "padding", "bias"])
def test_explicit_attention_equals_sdpa(kind):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    mask, is_causal = None, kind == "causal"
    if kind == "padding":
        mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    if kind == "bias":
        allowed = torch.ones(5, 5, dtype=torch.bool).tril()
        mask = torch.randn(3, 5, 5, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    assert torch.allclose(explicit_attention(q, k, v, mask, is_causal), expected, atol=1e-12)


def test_bf16_attention_on_cpu_is_close_to_float32():
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4)
    x = torch.randn(2, 6, 32)
    q, (k, v) = attention.query(x), attention.keys_values(x)
    expected = attention.attend(q, k, v, is_causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attention.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), expected, atol=0.05)


def adds_absolute_encodings(model) -> bool:
    """Whether the variant adds anything to the embeddings (sinusoidal, learned, SHAPE)."""
    x = torch.zeros(1, 3, model.d_model)
    return not torch.equal(model.encoder_position.embed(x, torch.arange(3)), x)


def test_shifting_every_position_changes_only_absolute_variants(position_yaml):
    """Relative variants see distances only: moving all positions by 5 leaves the encoder as is."""
    model = tiny_model(position_yaml).eval()
    src = torch.randint(4, 40, (2, 7))
    src[1, 5:] = 0
    out, _ = model.encode(src)
    moved, _ = model.encode(src, offset=5)
    unchanged = torch.allclose(out, moved, atol=1e-5)
    assert unchanged == (not adds_absolute_encodings(model)), position_yaml.stem


def test_a_2000_subword_source_encodes_without_a_length_cap(position_yaml):
    model = tiny_model(position_yaml, max_positions=64).eval()
    src = torch.randint(4, 40, (1, 2000))
    try:
        model.encoder_position.check_length(2000)
    except PositionRangeError:  # a learned table: the one clear error, never a crash
        with pytest.raises(PositionRangeError):
            model.encode(src)
        return
    with torch.no_grad():
        out, _ = model.encode(src)
        logits = model.decode(torch.randint(4, 40, (1, 3)), out, src != 0)
    assert out.shape == (1, 2000, 32) and torch.isfinite(out).all()
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", ["relative", "t5", "rope", "alibi"])
def test_the_relative_variants_have_no_length_cap(name):
    """The variants the issue names must be among those that encode 2,000 subwords."""
    model = tiny_model(CONFIG_DIR / "position" / f"{name}.yaml", max_positions=64)
    model.encoder_position.check_length(2000)
    model.decoder_position.check_length(2000)


def test_the_fused_kernel_stays_where_a_variant_adds_no_attention_terms(position_yaml, monkeypatch):
    """Self-attention leaves scaled_dot_product_attention only for variants with terms."""
    model = tiny_model(position_yaml).eval()
    calls = []
    fused = F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    model(torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 4)))
    positions = torch.arange(3)
    with_terms = model.encoder_position.attention_terms(0, positions, positions) is not None
    self_attentions, cross_attentions = 2 + 2, 2
    assert len(calls) == cross_attentions + (0 if with_terms else self_attentions)


def test_relative_tables_are_per_layer_and_each_is_used():
    model = tiny_model(CONFIG_DIR / "position" / "relative.yaml")
    assert model.encoder_position.key_embeddings.shape == (2, 33, 8)
    assert model.decoder_position.value_embeddings.shape == (2, 17, 8)  # causal: -16..0
    model(torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 4))).sum().backward()
    for position in (model.encoder_position, model.decoder_position):
        for table in (position.key_embeddings, position.value_embeddings):
            assert all(table.grad[layer].abs().sum() > 0 for layer in range(2))


def test_shape_draws_new_offsets_in_training_only():
    for name in ("sinusoidal_shape", "learned_shape"):
        model = tiny_model(CONFIG_DIR / "position" / f"{name}.yaml", dropout=0.0)
        src, tgt = torch.randint(4, 40, (4, 6)), torch.randint(4, 40, (4, 5))
        model.train()
        assert not torch.allclose(model(src, tgt), model(src, tgt))
        model.eval()
        assert torch.equal(model(src, tgt), model(src, tgt))


def test_rope_settings_apply_to_both_stacks_and_a_refused_one_changes_nothing():
    from model.position import PositionSettingError

    model = tiny_model(CONFIG_DIR / "position" / "rope.yaml").eval()
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    plain = model(src, tgt)
    with pytest.raises(PositionSettingError, match="with factor 1 scales nothing"):
        model.apply_position_settings({"scaling": "ntk", "factor": 1})  # probe p-11
    assert torch.equal(model(src, tgt), plain)
    assert model.apply_position_settings({"scaling": "ntk", "factor": 4}) == {
        "scaling": "ntk",
        "factor": 4.0,
    }
    assert model.decoder_position.factor == 4.0 and model.encoder_position.factor == 4.0
    assert not torch.allclose(model(src, tgt), plain, atol=1e-4)


def test_every_variant_builds_and_trains_in_the_quickstart_and_multi30k_experiments(
    position_yaml,
):
    """Each experiment composes with position=<variant>; one step in its own precision.

    multi30k_small and extrapolation_multi30k build the same small model as table3_multi30k
    (in fp32 / bf16): composing them is enough.
    """
    from runs.device import resolve_precision
    from tests.conftest import compose_config
    from training.loss import forward_backward

    for experiment in ("multi30k_small", "extrapolation_multi30k"):
        cfg = compose_config([f"experiment={experiment}", f"position={position_yaml.stem}"])
        assert cfg.position._target_ == OmegaConf.load(position_yaml)._target_, experiment
        assert cfg.model.d_model == 256
    for experiment in ("quickstart", "table3_multi30k"):
        cfg = compose_config([f"experiment={experiment}", f"position={position_yaml.stem}"])
        assert cfg.position._target_ == OmegaConf.load(position_yaml)._target_, experiment
        torch.manual_seed(0)
        model = build_model(cfg.model, cfg.position, vocab_size=60).train()
        tgt = torch.randint(4, 60, (2, 7))
        batch = {"src": torch.randint(4, 60, (2, 6)), "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
        precision = resolve_precision(cfg.trainer.precision, torch.device("cpu"))
        loss = forward_backward(model, batch, cfg.optim.label_smoothing, 1 / 12, precision)[0]
        assert torch.isfinite(torch.as_tensor(loss)), experiment
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_bf16_autocast_stays_close_to_float32(position_yaml):
    model = tiny_model(position_yaml).eval()
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    expected = model(src, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(src, tgt)
    assert torch.allclose(got.float(), expected, atol=0.1), position_yaml.stem


def test_decoding_a_shifted_target_without_a_cache_keeps_distances(position_yaml):
    """decode(offset=o) without a cache: relative variants see the same distances as at 0."""
    model = tiny_model(position_yaml).eval()
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    memory, keep = model.encode(src)
    at_zero = model.decode(tgt, memory, keep)
    moved = model.decode(tgt, memory, keep, offset=7)
    unchanged = torch.allclose(at_zero, moved, atol=1e-5)
    assert unchanged == (not adds_absolute_encodings(model)), position_yaml.stem


def graph_nodes(tensor: torch.Tensor) -> set[str]:
    """Type names of every node in tensor's autograd graph."""
    seen, names, stack = set(), set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def test_feed_forward_is_the_paper_s_and_its_backward_copies_no_hidden_gradient():
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (§3.3), with the in-place ReLU on addmm's own output:
    on a view of it, autograd's backward (CopySlices) would copy the hidden gradient three times."""
    torch.manual_seed(0)
    ffn = FeedForward(16, 64)
    x = torch.randn(2, 3, 16, requires_grad=True)  # [B, T, d_model]
    y = ffn(x)
    expected = F.linear(F.relu(F.linear(x, ffn.w1.weight, ffn.w1.bias)), ffn.w2.weight, ffn.w2.bias)
    assert y.shape == (2, 3, 16) and torch.allclose(y, expected, atol=1e-6)
    nodes = graph_nodes(y)
    assert "ReluBackward0" in nodes and "CopySlices" not in nodes
    (grad,) = torch.autograd.grad(y.sum(), x)
    (reference,) = torch.autograd.grad(expected.sum(), x)
    assert torch.allclose(grad, reference, atol=1e-6)
