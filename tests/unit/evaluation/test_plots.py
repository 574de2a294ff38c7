"""The comparison's figures stay readable at a study's size (many variants, many seeds)."""

import pytest
from matplotlib.collections import LineCollection
from matplotlib.colors import to_hex
from PIL import Image

from common.errors import MissingDependencyError
from evaluation.plots import (
    MIN_FONT_PT,
    VARIANTS,
    WIDTH_CM,
    DifferenceBar,
    RateCurve,
    bleu_by_variant_figure,
    dev_ppl_figure,
    differences_figure,
    plot_bleu_by_length,
    plot_bleu_by_variant,
    plot_dev_ppl_curves,
    plot_differences,
    plot_rate_curves,
    pyplot,
    rate_curves_figure,
    save,
    variant_colours,
)
from tests.conftest import CONFIG_DIR, ROOT
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


def test_bleu_by_variant_is_sorted_with_intervals_and_the_baseline_dashed(figures):
    result = comparison({"sinusoidal": 8, "rope": 3, "none": 1})
    result["variants"][1]["bleu_mean"] = 40.0  # rope best, none (31) between
    (ax,) = bleu_by_variant_figure(result).axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["sinusoidal (8)", "none (1)", "rope (3)"]  # ascending BLEU, bottom up
    assert not ax.texts  # no seed labels to overprint
    (dashed,) = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert dashed.get_xdata()[0] == 30.0  # sinusoidal's mean: the line read against
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    widths = sorted(round(float(abs(s[1][0] - s[0][0])), 3) for b in bars for s in b.get_segments())
    assert widths[0] == 0.0 and widths[-1] > 0  # one seed: no interval; 8 seeds: one


def test_the_headline_sorts_differences_with_intervals_and_a_zero_line(figures):
    rows = [
        DifferenceBar("rope", 1.3, 0.9, 1.7, 5),
        DifferenceBar("none", -8.0, -9.5, -6.5, 3),
        DifferenceBar("learned", -1.0, -1.2, -0.8, 8),
    ]
    (ax,) = differences_figure(rows, "sinusoidal", "test").axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["none (3)", "learned (8)", "rope (5)"]
    (zero,) = [line for line in ax.get_lines() if list(line.get_xdata()) == [0.0, 0.0]]
    assert "95% CI" in ax.get_xlabel() and "sinusoidal" in ax.get_xlabel()


def test_the_rate_grid_is_log_log_with_the_choice_ringed(figures, tmp_path):
    curves = [RateCurve("rope", "rope", (0.25, 0.5, 1.0, 2.0), (13.0, 9.5, 9.6, 48.0), 0.5)]
    (ax,) = rate_curves_figure(curves, 2000).axes
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log") and "2,000 steps" in ax.get_title()
    (ring,) = ax.collections  # one ring, at the chosen rate's mean, hollow
    assert ring.get_offsets().tolist() == [[0.5, 9.5]] and ring.get_facecolor().size == 0
    plot_rate_curves(curves, 2000, tmp_path / "grid.png")
    assert saved_width_cm(tmp_path / "grid.png") == pytest.approx(WIDTH_CM, abs=0.05)


def saved_width_cm(path) -> float:
    """A PNG's printed width: its pixels over the dots per inch it records."""
    with Image.open(path) as image:
        return image.width / image.info["dpi"][0] * 2.54


def every_figure(tmp_path):
    """Each figure function of this module, saved from a small input: {name: path}."""
    result = comparison({"sinusoidal": 2, "rope": 2})
    for row in result["variants"]:
        row["by_length"] = [{"bucket": "1-10", "bleu_mean": 30.0, "bleu_std": 1.0}]
    bars = [DifferenceBar("rope", 1.0, 0.5, 1.5, 2)]
    drawn = {
        "bleu_by_variant": lambda p: plot_bleu_by_variant(result, p),
        "bleu_by_length": lambda p: plot_bleu_by_length(result, p),
        "dev_ppl_curves": lambda p: plot_dev_ppl_curves(result, p),
        "differences": lambda p: plot_differences(bars, "sinusoidal", "t", p),
    }
    for name, draw in drawn.items():
        draw(tmp_path / f"{name}.png")
    return {name: tmp_path / f"{name}.png" for name in drawn}


def test_every_figure_is_saved_one_column_wide(figures, tmp_path):
    for name, path in every_figure(tmp_path).items():
        assert saved_width_cm(path) == pytest.approx(WIDTH_CM, abs=0.05), name


def test_a_text_under_the_smallest_font_is_refused(figures, tmp_path):
    fig = bleu_by_variant_figure(comparison({"sinusoidal": 2}))
    fig.axes[0].set_title("tiny", fontsize=MIN_FONT_PT - 1)
    with pytest.raises(ValueError, match="tiny"):
        save(fig, tmp_path / "tiny.png")
    assert not (tmp_path / "tiny.png").exists()


def test_every_figure_under_results_is_one_column_wide():
    """No stale figure is left under results/: each was drawn in today's style."""
    stale = {
        str(path.relative_to(ROOT)): round(saved_width_cm(path), 1)
        for path in sorted((ROOT / "results").rglob("*.png"))
        if abs(saved_width_cm(path) - WIDTH_CM) > 0.05
    }
    assert not stale, f"figures not {WIDTH_CM} cm wide (redraw or remove them): {stale}"


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


def test_a_text_cut_at_the_figures_edge_is_refused(figures, tmp_path):
    fig = bleu_by_variant_figure(comparison({"sinusoidal": 2}))
    fig.axes[0].set_xlabel("a label far too long for one column " * 3)
    with pytest.raises(ValueError, match="beyond the figure's edge: .*a label far too long"):
        save(fig, tmp_path / "cut.png")
    assert not (tmp_path / "cut.png").exists()
