"""The comparison's figures stay readable at a study's size (many variants, many seeds)."""

import pytest
from matplotlib.collections import LineCollection
from matplotlib.colors import to_hex

from common.errors import MissingDependencyError
from evaluation.plots import (
    SEED_LABELS_UP_TO,
    VARIANTS,
    bleu_by_variant_figure,
    dev_ppl_figure,
    pyplot,
    variant_colours,
)
from tests.conftest import CONFIG_DIR
from tests.unit.common.test_errors import hide_module


def comparison(seeds_per_variant: dict[str, int]) -> dict:
    """A compare result (the keys the figures read) with made-up BLEU and dev PPL curves."""
    variants, runs = [], []
    for i, (variant, n) in enumerate(seeds_per_variant.items()):
        seeds = list(range(1, n + 1))
        variants.append({"variant": variant, "seeds": seeds, "bleu_mean": 30.0 + i})
        for seed in seeds:
            curve = [[step, 20.0 / step**0.3 + seed * 0.01] for step in (500, 1000, 2000)]
            runs.append(
                {
                    "variant": variant,
                    "seed": seed,
                    "bleu": 30 + i + seed / 10,
                    "dev_ppl_curve": curve,
                }
            )
    return {"eval": "test-last-beam4", "variants": variants, "runs": runs}


@pytest.fixture
def figures():
    """Close every figure a test made."""
    yield
    pyplot().close("all")


def test_dev_ppl_legend_has_one_entry_per_variant(figures):
    fig = dev_ppl_figure(comparison({"sinusoidal": 8, "learned": 8, "none": 1}))
    (ax,) = fig.axes
    assert len(ax.get_lines()) == 17  # every run is drawn
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["sinusoidal (8 seeds)", "learned (8 seeds)", "none (1 seed)"]


def test_seeds_are_named_only_where_few(figures):
    many = SEED_LABELS_UP_TO + 1
    fig = bleu_by_variant_figure(comparison({"sinusoidal": many, "rope": SEED_LABELS_UP_TO}))
    (ax,) = fig.axes
    named = [t.get_text() for t in ax.texts]
    assert named == [f"seed {s}" for s in range(1, SEED_LABELS_UP_TO + 1)]  # rope's only
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        f"sinusoidal ({many})",
        f"rope ({SEED_LABELS_UP_TO})",
    ]


def test_the_fixed_colours_name_variants_the_configs_have():
    assert set(VARIANTS) <= {path.stem for path in (CONFIG_DIR / "position").glob("*.yaml")}


def test_a_variant_keeps_its_colour_whatever_else_is_drawn():
    alone = variant_colours(["rope"])
    crowd = variant_colours(["sinusoidal", "learned", "rope", "alibi", "mine", "theirs"])
    assert alone["rope"] == crowd["rope"]
    assert len(set(crowd.values())) == len(crowd)  # two new variants do not share one colour
    assert crowd["mine"] == "C9" and variant_colours(["mine"])["mine"] == "C9"
    assert list(variant_colours(["mine", "sinusoidal", "mine"])) == ["mine", "sinusoidal"]


def test_the_figures_draw_each_variant_in_its_colour(figures):
    result = comparison({"rope": 2, "learned": 1})
    expected = {v: to_hex(c) for v, c in variant_colours(["rope", "learned"]).items()}
    (ax,) = dev_ppl_figure(result).axes
    drawn = [to_hex(line.get_color()) for line in ax.get_lines()]
    assert drawn == [expected["rope"]] * 2 + [expected["learned"]]
    (ax,) = bleu_by_variant_figure(result).axes
    bars = [to_hex(c.get_colors()[0]) for c in ax.collections if isinstance(c, LineCollection)]
    assert bars == [expected["rope"], expected["learned"]]


def test_without_matplotlib_a_figure_is_one_error_naming_the_plots_extra(monkeypatch):
    hide_module(monkeypatch, "matplotlib")
    with pytest.raises(MissingDependencyError, match=r"matplotlib .*pip install -e '\.\[plots\]'$"):
        pyplot()
