"""Across studies: sign agreement and the fixed-effect inverse-variance pool, Holm per baseline."""

import math

import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from studies.across import across, across_markdown
from studies.answer import Difference


def diff(variant: str, baseline: str, value: float, half: float, n: int = 5) -> Difference:
    """A difference with a symmetric 95% interval of half-width half."""
    return Difference("all", 8000, "last", baseline, variant, n, value, value - half,
                      value + half, 0.01, 0.02, 0.02, None, 0.5)  # fmt: skip


def test_the_pool_weights_each_study_by_its_inverse_variance():
    german = [diff("rope", "sinusoidal", 1.0, 0.5), diff("learned", "sinusoidal", -1.0, 0.5)]
    french = [diff("rope", "sinusoidal", 2.0, 1.0), diff("learned", "sinusoidal", 0.5, 1.0)]
    pooled = {p.variant: p for p in across({"de": german, "fr": french})}
    t = stats.t.ppf(0.975, 4)
    w = [(2 * t / 1.0) ** 2, (2 * t / 2.0) ** 2]  # 1 / SE², SE = half-width / t
    mean = (w[0] * 1.0 + w[1] * 2.0) / sum(w)
    rope = pooled["rope"]
    assert rope.difference == pytest.approx(mean)
    se = 1 / math.sqrt(sum(w))
    assert (rope.low, rope.high) == pytest.approx((mean - 1.959964 * se, mean + 1.959964 * se))
    assert rope.p == pytest.approx(2 * stats.norm.sf(mean / se))
    assert rope.signs_agree and not pooled["learned"].signs_agree
    assert set(rope.by_study) == {"de", "fr"}


def test_the_pooled_comparisons_of_one_baseline_are_one_holm_family():
    german = [diff(v, "sinusoidal", 1.0, 0.9) for v in ("rope", "relative", "learned")]
    french = [diff(v, "sinusoidal", 1.0, 0.9) for v in ("rope", "relative", "learned")]
    german.append(diff("rope", "learned", 1.0, 0.9))
    french.append(diff("rope", "learned", 1.0, 0.9))
    pooled = across({"de": german, "fr": french})
    family = [p for p in pooled if p.baseline == "sinusoidal"]
    assert len(family) == 3 and all(p.p_holm == pytest.approx(min(1, 3 * p.p)) for p in family)
    alone = [p for p in pooled if p.baseline == "learned"]
    assert alone[0].p_holm == pytest.approx(alone[0].p)


def test_a_zero_difference_has_no_sign_to_agree_with():
    """0 beside a negative difference was counted as agreeing (0 > 0 is False, as is -1 > 0)."""
    german = [diff("rope", "sinusoidal", 0.0, 0.5), diff("t5", "sinusoidal", 0.0, 0.5)]
    french = [diff("rope", "sinusoidal", -1.0, 0.5), diff("t5", "sinusoidal", 0.0, 0.5)]
    pooled = {p.variant: p for p in across({"de": german, "fr": french})}
    assert pooled["rope"].signs_agree is None and pooled["t5"].signs_agree is None
    assert "| – |" in across_markdown(list(pooled.values()), ["de", "fr"])[2]


def test_a_difference_one_study_lacks_is_not_pooled():
    german = [diff("rope", "sinusoidal", 1.0, 0.5), diff("t5", "sinusoidal", 1.0, 0.5)]
    french = [diff("rope", "sinusoidal", 2.0, 1.0)]
    assert [p.variant for p in across({"de": german, "fr": french})] == ["rope"]


def test_the_table_has_a_column_per_study_and_marks_what_holds():
    german = [diff("rope", "sinusoidal", 1.0, 0.2)]
    french = [diff("rope", "sinusoidal", 1.2, 0.2)]
    lines = across_markdown(across({"de": german, "fr": french}), ["de", "fr"])
    widths = {line.count("|") for line in lines[:3]}
    assert widths == {11}  # condition, steps, difference, 2 studies, signs, pool, p, Holm, BH
    assert "BH q; TOST ±1 p; 80% power detects" in lines[0]
    study = "+1.00 [+0.80, +1.20] (0.020; 0.020; –; ±0.50)"  # Holm p, BH q, TOST p, power
    assert f"| all | 8,000 | rope − sinusoidal | {study} |" in lines[2]
    assert "| yes |" in lines[2] and "**held**" in lines[2]
    (pooled,) = across({"de": german, "fr": french})
    assert lines[2].endswith(f"**held** | {pooled.q_bh:.3f} |") and pooled.q_bh == pooled.p
    empty = across_markdown([], ["de", "fr"])
    assert empty[2].count("|") == 11


def test_the_pooled_bh_q_is_benjamini_hochbergs_within_the_baselines_family():
    german = [diff(v, "sinusoidal", x, 0.9) for v, x in (("rope", 1.0), ("t5", 0.6))]
    french = [diff(v, "sinusoidal", x, 0.9) for v, x in (("rope", 1.1), ("t5", 0.4))]
    pooled = across({"de": german, "fr": french})
    expected = multipletests([p.p for p in pooled], method="fdr_bh")[1]
    assert [p.q_bh for p in pooled] == pytest.approx(list(expected))
