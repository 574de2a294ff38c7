"""benchmarks/variants.py: every variant timed against sinusoidal; the command line."""

import pytest

from benchmarks.variants import (
    position_variants,
    variant_cost_rows,
    variant_step_times,
)
from common.errors import UserError
from tests.conftest import POSITION_CONFIGS, script_main

TINY_DIMS = {"d_model": 32, "n_heads": 4, "d_ff": 64, "max_positions": 64}


def test_every_variant_is_timed_against_sinusoidal():
    fig = variant_step_times(
        ("tiny",),
        batch_size=2,
        length=5,
        vocab_size=50,
        repeats=2,
        num_threads=1,
        echo=lambda message: None,
        **TINY_DIMS,
    )
    entry = fig["models"]["tiny"]
    assert list(entry) == position_variants() and position_variants()[0] == "sinusoidal"
    assert set(entry) == {p.stem for p in POSITION_CONFIGS}
    assert entry["sinusoidal"]["ratio"] == 1.0
    for figures in entry.values():
        assert 0 < figures["min_cpu_s"] <= figures["cpu_seconds"] <= figures["max_cpu_s"]
        baseline = entry["sinusoidal"]
        assert figures["ratio"] == pytest.approx(figures["cpu_seconds"] / baseline["cpu_seconds"])
        wall_ratio = figures["wall_seconds"] / baseline["wall_seconds"]
        assert figures["wall_ratio"] == pytest.approx(wall_ratio)
    d_head, k, layers = 8, 16, 2  # tiny.yaml: 2 + 2 layers
    relative = layers * 2 * (2 * k + 1) * d_head + layers * 2 * (k + 1) * d_head
    assert entry["relative"]["added_parameters"] == relative
    assert entry["t5"]["added_parameters"] == 2 * 32 * 4  # a table per stack
    assert entry["learned"]["added_parameters"] == 2 * 64 * 32
    assert entry["learned_shape"]["added_parameters"] == 2 * (64 + 100) * 32
    assert entry["rope"]["added_parameters"] == entry["alibi"]["added_parameters"] == 0
    assert len(variant_cost_rows(fig)) == len(entry)


def test_unknown_variant_is_refused():
    with pytest.raises(UserError, match="unknown position variant"):
        variant_step_times(("tiny",), ["nope"], echo=lambda message: None)


def test_the_command_line_prints_the_ratios(capsys):
    argv = ["train", "--model", "tiny", "--variants", "relative", "--batch-size", "2"]
    fig = script_main("benchmark")(
        [*argv, "--length", "4", "--vocab-size", "50", "--repeats", "1", "--threads", "1"]
    )
    assert set(fig["models"]["tiny"]) == {"sinusoidal", "relative"}
    out = capsys.readouterr().out
    assert "vs sinusoidal" in out and "relative" in out and "1.00x" in out
