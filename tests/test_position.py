"""Position encodings: the §3.5 formula, its relative-position property, and each hook."""

import math

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from model.position import (
    LearnedPositionEncoding,
    PositionRangeError,
    SinusoidalPositionEncoding,
    alibi_slopes,
    sinusoidal_table,
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
