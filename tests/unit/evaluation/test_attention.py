"""evaluation/attention.py: position similarity and mean attention distance, on tiny models."""

import pytest
import torch

from evaluation.attention import (
    attention_distances,
    cosine_similarity_matrix,
    position_vectors,
    uniform_distance,
)
from model.position import sinusoidal_table
from tests.conftest import CONFIG_DIR, tiny_model

CPU = torch.device("cpu")
ABSOLUTE = ("sinusoidal", "learned", "sinusoidal_shape", "learned_shape")
# sources of 4 and 2 subwords and targets of 3 and 1 (EOS last): padding on both sides
SRC = [[5, 6, 7, 3], [8, 3]]
TGT = [[9, 10, 3], [3]]


def model_of(name: str, **overrides) -> torch.nn.Module:
    return tiny_model(CONFIG_DIR / "position" / f"{name}.yaml", **overrides).eval()


def test_even_attention_gives_the_uniform_distance_with_padding_left_out():
    """Zero queries: every head spreads evenly over the keys it may see, so its distance is the
    closed form: encoder (n^2 - 1) / 3n per query of a length-n source, decoder i/2."""
    model = model_of("none")
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        torch.nn.init.zeros_(layer.self_attn.q_proj.weight)
        torch.nn.init.zeros_(layer.self_attn.q_proj.bias)
    distances = attention_distances(model, SRC, TGT, 1000, CPU)
    encoder = (4 * (16 - 1) / 12 + 2 * (4 - 1) / 6) / 6  # 4 + 2 real queries
    decoder = (0 + 0.5 + 1 + 0) / 4  # 3 + 1 real queries
    assert distances["encoder"].shape == (len(model.encoder_layers), 4)
    assert torch.allclose(distances["encoder"], torch.full_like(distances["encoder"], encoder))
    assert torch.allclose(distances["decoder"], torch.full_like(distances["decoder"], decoder))
    assert uniform_distance([4, 2], causal=False) == pytest.approx(encoder)
    assert uniform_distance([3, 1], causal=True) == pytest.approx(decoder)


def test_random_heads_differ_and_none_looks_past_the_farthest_key():
    """Random weights: heads differ, and no head looks farther than the farthest key (3)."""
    model = model_of("alibi")
    distances = attention_distances(model, SRC, TGT, 1000, CPU)
    assert distances["encoder"].std() > 0
    assert (distances["encoder"] > 0).all() and (distances["encoder"] < 3).all()


def test_reading_weights_changes_no_output_and_the_hooks_are_removed():
    model = model_of("rope")
    src, tgt_in = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 9, 10]])
    with torch.no_grad():
        before = model(src, tgt_in)
        attention_distances(model, [[5, 6, 7, 3]], [[9, 10, 3]], 1000, CPU)
        after = model(src, tgt_in)
    assert torch.allclose(before, after, atol=1e-6)
    layers = [*model.encoder_layers, *model.decoder_layers]
    assert all(layer.self_attn.weights_hook is None for layer in layers)


def test_hooks_are_removed_when_the_forward_fails():
    model = model_of("learned", max_positions=3)  # a 4-subword source does not fit
    with pytest.raises(Exception, match="position"):
        attention_distances(model, [[5, 6, 7, 3]], [[3]], 1000, CPU)
    assert all(layer.self_attn.weights_hook is None for layer in model.encoder_layers)


@pytest.mark.parametrize("name", ABSOLUTE)
def test_absolute_encodings_give_their_vectors(name):
    model = model_of(name)
    model.train()  # SHAPE would shift while training: the vectors are read unshifted
    vectors = position_vectors(model.encoder_position, 10)
    if name.startswith("sinusoidal"):
        expected = sinusoidal_table(10, 32)
    else:
        expected = model.encoder_position.table[:10].detach()
    assert torch.allclose(vectors, expected, atol=1e-6)
    assert model.encoder_position.training  # its mode is given back


@pytest.mark.parametrize("name", ["none", "rope", "alibi", "relative", "t5"])
def test_encodings_without_absolute_vectors_give_none(name):
    assert position_vectors(model_of(name).encoder_position, 10) is None


def test_cosine_similarity_is_one_on_the_diagonal_and_symmetric():
    similarity = cosine_similarity_matrix(sinusoidal_table(20, 32))
    assert torch.allclose(similarity.diagonal(), torch.ones(20), atol=1e-6)
    assert torch.allclose(similarity, similarity.T, atol=1e-6)
    assert similarity[0, 1] > similarity[0, 10]  # sinusoids: nearer positions look more alike
