"""Position encodings: the §3.5 formula, its relative-position property, and each hook."""

import math

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from model.position import (
    LearnedPositionEncoding,
    PositionRangeError,
    PositionSettingError,
    SinusoidalPositionEncoding,
    alibi_slopes,
    sinusoidal_table,
    t5_buckets,
)


def test_sinusoidal_table_matches_the_formula():
    table = sinusoidal_table(2000, 512)
    assert table.shape == (2000, 512) and table.dtype == torch.float32
    for pos in (0, 1, 7, 100, 1999):
        for i in (0, 1, 10, 100, 255):
            angle = pos / 10000 ** (2 * i / 512)
            assert abs(table[pos, 2 * i].item() - math.sin(angle)) < 1e-6
            assert abs(table[pos, 2 * i + 1].item() - math.cos(angle)) < 1e-6


def test_sinusoids_are_relative_positions_by_rotation():
    """PE(t + k) = M_k PE(t) with M_k block-diagonal 2x2 rotations independent of t."""
    d = 64
    table = sinusoidal_table(300, d).double()
    freqs = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    for k in (1, 5, 37):
        c, s = torch.cos(k * freqs), torch.sin(k * freqs)
        blocks = [torch.tensor([[ci, si], [-si, ci]]) for ci, si in zip(c, s, strict=True)]
        rotation = torch.block_diag(*blocks)  # [d, d]
        for t in (0, 3, 100, 250):
            assert torch.allclose(rotation @ table[t], table[t + k], atol=1e-6)


def test_sinusoidal_has_no_parameters_and_no_gradient():
    pe = SinusoidalPositionEncoding(d_model=16, n_heads=2, max_positions=8)
    assert list(pe.parameters()) == []
    x = torch.zeros(1, 5, 16, requires_grad=True)
    out = pe.embed(x, torch.arange(5))
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))  # d(x + PE)/dx = 1: PE is a constant


def test_sinusoidal_stays_float32_under_bf16_autocast():
    pe = SinusoidalPositionEncoding(d_model=16, n_heads=2, max_positions=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = pe.embed(torch.zeros(1, 1000, 16), torch.arange(1000))
    assert out.dtype == torch.float32
    assert torch.equal(out[0], sinusoidal_table(1000, 16))


def test_sinusoidal_rejects_odd_d_model():
    with pytest.raises(ValueError, match="even model.d_model"):
        SinusoidalPositionEncoding(d_model=15, n_heads=3, max_positions=8)


def test_learned_table_overflow_is_one_clear_error():
    pe = LearnedPositionEncoding(d_model=8, n_heads=2, max_positions=16)
    assert pe.table.shape == (16, 8)
    pe.check_length(16)
    with pytest.raises(PositionRangeError) as err:
        pe.check_length(17)
    message = str(err.value)
    assert "position 16" in message and "max_positions=16" in message
    assert "raise model.max_positions" in message and "position=sinusoidal" in message


def test_learned_table_init_scale():
    torch.manual_seed(0)
    pe = LearnedPositionEncoding(d_model=256, n_heads=4, max_positions=1024)
    assert abs(pe.table.std().item() - 256**-0.5) < 0.005


def test_alibi_slopes_follow_the_paper():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    six = alibi_slopes(6)
    assert six.shape == (6,) and torch.all(six > 0)


def test_every_variant_builds_from_its_yaml(position_yaml):
    factory = instantiate(OmegaConf.load(position_yaml))
    pe = factory(d_model=32, n_heads=4, max_positions=64)
    x = torch.randn(2, 5, 32)
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    positions = torch.arange(5)
    assert pe.embed(x, positions).shape == x.shape
    rq, rk = pe.rotate(q, k, positions, positions)
    assert rq.shape == q.shape and rk.shape == k.shape
    bias = pe.bias(positions, positions)
    assert bias is None or bias.shape == (4, 5, 5)


def test_rope_scores_depend_only_on_relative_position():
    rope = instantiate(OmegaConf.load("configs/position/rope.yaml"))(
        d_model=32, n_heads=4, max_positions=64
    )
    q, k = torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8)

    def score(i, j):
        rq, rk = rope.rotate(q, k, torch.tensor([i]), torch.tensor([j]))
        return (rq * rk).sum(-1)

    assert torch.allclose(score(3, 1), score(10, 8), atol=1e-5)
    assert not torch.allclose(score(3, 1), score(3, 2), atol=1e-3)


def build(name: str, **kwargs):
    """The variant of configs/position/<name>.yaml with tiny dimensions (and kwargs)."""
    factory = instantiate(OmegaConf.load(f"configs/position/{name}.yaml"))
    return factory(**{"d_model": 32, "n_heads": 4, "max_positions": 64, **kwargs})


def test_every_variants_attention_terms_have_the_interface_shapes(position_yaml):
    factory = instantiate(OmegaConf.load(position_yaml))
    for causal in (False, True):
        pe = factory(d_model=32, n_heads=4, max_positions=64, n_layers=2, causal=causal)
        q_positions, k_positions = torch.arange(3, 8), torch.arange(8)
        for layer in range(2):
            terms = pe.attention_terms(layer, q_positions, k_positions)
            if terms is None:
                continue
            scores = terms.scores(torch.randn(2, 4, 5, 8))
            values = terms.values(torch.rand(2, 4, 5, 8).softmax(-1))
            assert scores is None or scores.shape == (2, 4, 5, 8)
            assert values is None or values.shape == (2, 4, 5, 8)


def test_t5_buckets_equal_t5s_own_function():
    """Bucket boundaries against Hugging Face's T5Attention._relative_position_bucket."""
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-1000, 1001)[None, :] - torch.arange(0, 5)[:, None]  # [5, 2001]
    for bidirectional in (True, False):
        for num_buckets, max_distance in ((32, 128), (8, 20), (16, 50)):
            ours = t5_buckets(relative, bidirectional, num_buckets, max_distance)
            theirs = T5Attention._relative_position_bucket(
                relative, bidirectional, num_buckets, max_distance
            )
            assert torch.equal(ours, theirs), (bidirectional, num_buckets, max_distance)
    encoder, decoder = build("t5"), build("t5", causal=True)
    assert encoder.bias_table.shape == decoder.bias_table.shape == (32, 4)
    positions = torch.arange(200)
    enc, dec = encoder.bias(positions, positions), decoder.bias(positions, positions)
    assert enc.shape == dec.shape == (4, 200, 200)
    # the encoder tells left from right; the decoder's buckets only look back
    assert not torch.allclose(enc[:, 10, 5], enc[:, 10, 15])
    assert torch.allclose(dec[:, 10, 11:], dec[:, 10, 10:11].expand(-1, 189))


def naive_shaw_attention(q, k, v, a_k, a_v, mask):
    """Shaw et al. eq. (3)-(4) with the [Tq, Tk, d] tensors materialized (the reference)."""
    scores = (q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, a_k)) / q.size(-1) ** 0.5
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return weights @ v + torch.einsum("bhij,ijd->bhid", weights, a_v)


def test_relative_attention_equals_shaws_equations():
    from model.transformer import explicit_attention

    torch.manual_seed(0)
    for causal in (False, True):
        pe = build("relative", max_distance=3, n_layers=2, causal=causal).double()
        q, k, v = (torch.randn(2, 4, 9, 8, dtype=torch.float64) for _ in range(3))
        positions = torch.arange(9)
        mask = torch.ones(9, 9, dtype=torch.bool)
        mask = mask.tril() if causal else mask
        for layer in range(2):
            distance = (positions[None, :] - positions[:, None]).clamp(-3, 3)  # [Tq, Tk]
            # rows of the clipped distances -3..3; the decoder holds -3..0 (j > i is masked)
            rows = distance.clamp(max=0 if causal else 3) + 3
            a_k = pe.key_embeddings[layer][rows]  # [Tq, Tk, d]
            a_v = pe.value_embeddings[layer][rows]
            expected = naive_shaw_attention(q, k, v, a_k, a_v, mask)
            terms = pe.attention_terms(layer, positions, positions)
            got = explicit_attention(q, k, v, None, causal, terms)
            assert torch.allclose(got, expected, atol=1e-6)  # the logits are float32
    assert build("relative").key_embeddings.shape == (1, 33, 8)  # 2k + 1 rows, k = 16
    assert build("relative", causal=True, n_layers=3).value_embeddings.shape == (3, 17, 8)


def test_shape_shifts_in_training_and_not_at_evaluation():
    for name in ("sinusoidal_shape", "learned_shape"):
        pe = build(name)
        x, positions = torch.zeros(64, 10, 32), torch.arange(10)
        pe.eval()
        unshifted = pe.embed(x, positions)
        assert torch.equal(unshifted, pe.embed(x, positions))
        if name == "sinusoidal_shape":
            assert torch.equal(unshifted[0], sinusoidal_table(10, 32))
        span = torch.arange(64 + pe.max_shift)
        table = pe.embed(torch.zeros(1, len(span), 32), span)[0]  # unshifted rows (evaluation)
        pe.train()
        shifted_rows = pe.embed(x, positions)  # [B, T, d_model]
        offsets = []
        for row in shifted_rows:  # each sequence is one contiguous run of table rows from k
            k = int((table - row[0]).abs().sum(-1).argmin())
            assert torch.allclose(row, table[k : k + 10], atol=1e-6)
            offsets.append(k)
        assert 0 <= min(offsets) and max(offsets) <= pe.max_shift and len(set(offsets)) > 5
        again = pe.embed(x, positions)
        assert not torch.equal(again, shifted_rows)


def test_shape_eval_shift_moves_evaluation_positions_within_the_trained_offsets():
    """position_override.eval_shift=K scores SHAPE as its authors' code does (from K)."""
    x, positions = torch.zeros(2, 10, 32), torch.arange(10)
    for name in ("sinusoidal_shape", "learned_shape"):
        pe = build(name).eval()
        rows = pe.embed(torch.zeros(1, 64 + 100, 32), torch.arange(64 + 100))[0]  # from 0
        assert pe.inference_state() == {"eval_shift": 0}
        pe.apply_inference_settings(eval_shift=100)
        assert torch.equal(pe.embed(x, positions)[1], rows[100:110])
        assert pe.inference_state() == {"eval_shift": 100}
        for bad in (101, -1, 2.5):
            with pytest.raises(PositionSettingError, match=f"eval_shift={bad}: pass"):
                pe.apply_inference_settings(eval_shift=bad)
        assert pe.inference_state() == {"eval_shift": 100}  # refused: unchanged
        pe.train()
        assert not torch.equal(pe.embed(x, positions), pe.embed(x, positions))  # still random
    with pytest.raises(PositionSettingError, match="position_override.eval_shift is not"):
        build("sinusoidal").apply_inference_settings(eval_shift=10)
    with pytest.raises(PositionSettingError, match="eval_shift=200: pass 0 to 100"):
        build("sinusoidal_shape", eval_shift=200)


def test_learned_shape_table_holds_the_shifted_range():
    pe = build("learned_shape", max_positions=16)
    assert pe.table.shape == (16 + 100, 32)
    pe.check_length(16)
    with pytest.raises(PositionRangeError):
        pe.check_length(17)  # evaluation encodes from 0: the cap stays max_positions
    pe.train()
    for _ in range(20):  # the longest sequence at any shift indexes inside the table
        pe.embed(torch.zeros(8, 16, 32), torch.arange(16))


def test_rope_scaling_needs_a_factor_above_one():
    """A scaling by factor 1 would rotate as the unscaled model, named as scaled (probe p-2)."""
    q, k = torch.randn(2, 4, 50, 8), torch.randn(2, 4, 50, 8)
    positions = torch.arange(50)
    plain = build("rope").rotate(q, k, positions, positions)
    for scaling in ("linear", "ntk"):
        with pytest.raises(PositionSettingError, match="with factor 1 scales nothing"):
            build("rope", scaling=scaling, factor=1.0)
        doubled = build("rope", scaling=scaling, factor=2.0).rotate(q, k, positions, positions)
        assert not torch.allclose(doubled[0], plain[0], atol=1e-3)


def test_rope_scalings_follow_their_formulas():
    x = torch.randn(1, 1, 1, 8)
    plain = build("rope")
    linear = build("rope", scaling="linear", factor=4.0)
    # position interpolation: position 4p is rotated as p was
    got = linear._rotate_one(x, torch.tensor([12]))
    assert torch.allclose(got, plain._rotate_one(x, torch.tensor([3])), atol=1e-6)
    # NTK-aware: the base grows by factor^(d / (d - 2)); the fastest pair turns as before
    ntk = build("rope", scaling="ntk", factor=4.0)
    bigger_base = build("rope", base=10000.0 * 4.0 ** (8 / 6))
    position = torch.tensor([37])
    assert torch.allclose(ntk._rotate_one(x, position), bigger_base._rotate_one(x, position))
    assert torch.allclose(
        ntk._rotate_one(x, position)[..., :2], plain._rotate_one(x, position)[..., :2]
    )


def test_inference_settings_are_checked_and_refused_one_line():
    rope = build("rope")
    rope.apply_inference_settings(scaling="ntk", factor=2)
    assert rope.inference_state() == {"scaling": "ntk", "factor": 2.0}
    with pytest.raises(PositionSettingError, match="position_override.base is not an inference"):
        rope.apply_inference_settings(base=500.0)
    with pytest.raises(PositionSettingError, match="scaling=yarn"):
        rope.apply_inference_settings(scaling="yarn")
    with pytest.raises(PositionSettingError, match="factor=0.5"):
        rope.apply_inference_settings(factor=0.5)
    with pytest.raises(PositionSettingError, match="factor=inf: pass a finite number"):
        rope.apply_inference_settings(factor=math.inf)  # every position would collapse to 0
    assert rope.inference_state() == {"scaling": "ntk", "factor": 2.0}  # refused: unchanged
    with pytest.raises(PositionSettingError, match="inference-only settings: none"):
        build("relative").apply_inference_settings(max_distance=32)
    with pytest.raises(PositionSettingError, match="scaling=yarn"):  # the YAML is checked alike
        build("rope", scaling="yarn")
    with pytest.raises(PositionSettingError, match="factor=4 scales nothing without a scaling"):
        build("rope", factor=4)  # probe 16-9: trained unscaled, factor 4 recorded
    with pytest.raises(PositionSettingError, match="scaling=linear with factor 1 scales nothing"):
        build("rope", scaling="linear")  # probe p-2: trained unscaled, recorded as linear
    with pytest.raises(PositionSettingError, match="scaling=ntk with factor 1 scales nothing"):
        build("rope").apply_inference_settings(scaling="ntk")  # p-11: named -ntk-factor1


def test_each_yaml_names_its_own_class():
    """Runs record their position class: two YAML files on one class would mix in comparisons."""
    from tests.conftest import POSITION_CONFIGS

    targets = [OmegaConf.load(path)._target_ for path in POSITION_CONFIGS]
    assert len(set(targets)) == len(targets)


@pytest.mark.parametrize("variant", ["sinusoidal", "rope"])
@pytest.mark.parametrize("base", [math.inf, "inf", math.nan])
def test_a_non_finite_base_is_refused(variant, base):
    """base=inf leaves only the first pair of sinusoid dimensions varying with position."""
    with pytest.raises(PositionSettingError, match=r"position.base=\S+: pass a finite number"):
        build(variant, base=base)
