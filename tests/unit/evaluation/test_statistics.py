"""evaluation/statistics.py: quantiles, p-values and intervals against closed forms and tables,
Holm by hand, TOST both ways, power, and the bootstraps against sacreBLEU's corpus BLEU."""

import math
import random
import statistics

import numpy as np
import pytest
import sacrebleu
from sacrebleu.significance import PairedTest
from scipy import stats

from common.errors import UserError
from evaluation.statistics import (
    add_holm,
    bleu_from_statistics,
    bootstrap_p_value,
    difference_over_seeds,
    equivalence,
    holm,
    mean,
    paired_bootstrap,
    paired_power,
    paired_t_interval,
    power_statement,
    resampled_difference,
    sentence_statistics,
    stdev,
    t_quantile,
    two_level_bootstrap,
    welch_interval,
)


def test_t_quantile_matches_closed_forms():
    assert t_quantile(0.95, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-9)
    assert t_quantile(0.95, 2) == pytest.approx(math.sqrt(2 * 0.95**2 / (1 - 0.95**2)), rel=1e-9)
    assert t_quantile(0.95, 5000) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-3)
    # printed tables of Student's t, two-sided 95%
    assert t_quantile(0.95, 2) == pytest.approx(4.303, abs=5e-4)
    assert t_quantile(0.95, 10) == pytest.approx(2.228, abs=5e-4)
    assert t_quantile(0.99, 7) == pytest.approx(3.499, abs=5e-4)
    with pytest.raises(ValueError):
        t_quantile(0.95, 0)


def test_mean_and_stdev_are_none_without_enough_values():
    assert mean([]) is None and stdev([1.0]) is None
    assert mean([1.0, 2.0]) == 1.5 and stdev([1.0, 3.0]) == pytest.approx(math.sqrt(2))


def test_paired_t_interval_is_mean_plus_minus_t_times_standard_error():
    diffs = [1.0, 2.0, 4.0]
    got = paired_t_interval(diffs)
    half = t_quantile(0.95, 2) * statistics.stdev(diffs) / math.sqrt(3)
    assert got["df"] == 2 and got["difference"] == pytest.approx(7 / 3)
    assert (got["low"], got["high"]) == pytest.approx((7 / 3 - half, 7 / 3 + half))
    t = (7 / 3) / (statistics.stdev(diffs) / math.sqrt(3))
    assert got["p"] == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)  # df 2 closed form
    assert paired_t_interval([1.5]) == {
        "difference": 1.5,
        "low": None,
        "high": None,
        "df": None,
        "p": None,
    }
    # identical differences (two-decimal records agreeing) have no spread: no interval, no p
    noisy = [58.93 - 60.95, 58.77 - 60.79]  # both -2.02 as recorded; float noise ~5e-15 apart
    for same in ([0.5, 0.5, 0.5], noisy):
        got = paired_t_interval(same)
        assert got["difference"] == pytest.approx(same[0]) and got["df"] == len(same) - 1
        assert got["low"] is got["high"] is got["p"] is None
    assert paired_t_interval([-2.02, -2.03])["p"] is not None  # one hundredth apart: a test
    nothing = paired_t_interval([0.0, 0.0])  # no difference at all: the conservative p 1
    assert nothing["p"] == 1.0 and nothing["low"] is None


def test_welch_interval_uses_welch_satterthwaite_degrees_of_freedom():
    a, b = [10.0, 11.0, 12.0], [13.0, 17.0]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 2
    df = math.floor((va + vb) ** 2 / (va**2 / 2 + vb**2 / 1))
    got = welch_interval(a, b)
    assert got["df"] == df and got["difference"] == pytest.approx(15 - 11)
    assert got["high"] - got["difference"] == pytest.approx(
        t_quantile(0.95, df) * math.sqrt(va + vb)
    )
    assert df == 1  # Cauchy: P(|T| > t) = 1 - 2 atan(t) / pi
    t = 4 / math.sqrt(va + vb)
    assert got["p"] == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-9)
    flat = welch_interval([10.0, 10.0], [12.0, 12.0])  # neither side varies: no interval, no p
    assert flat == {"difference": 2.0, "low": None, "high": None, "df": 2, "p": None}
    assert welch_interval([0.1 + 0.2, 0.3], [1.0, 1.0])["p"] is None  # float noise is no spread
    assert welch_interval([10.0, 10.0], [10.0, 10.0])["p"] == 1.0


def test_difference_over_seeds_pairs_the_shared_seeds_and_falls_back_to_welch():
    """Five baseline seeds against three: paired over seeds 1-3, not Welch over all eight runs."""
    base = {1: 27.0, 2: 26.0, 3: 28.0, 4: 27.5, 5: 26.5}
    other = {1: 29.0, 2: 28.5, 3: 30.5}
    paired = difference_over_seeds(base, other)
    assert paired["method"] == "paired t, shared seeds" and paired["seeds"] == [1, 2, 3]
    assert paired == {"method": paired["method"], "seeds": [1, 2, 3]} | paired_t_interval(
        [2.0, 2.5, 2.5]
    )
    same = difference_over_seeds(base, base | {1: 30.0})
    assert same["method"] == "paired t over seeds" and same["difference"] == pytest.approx(0.6)
    one = difference_over_seeds(base, {3: 30.0})
    assert one["method"].startswith("Welch") and one["seeds"] == [1, 2, 3, 4, 5]
    assert (one["other_seeds"], one["base_seeds"]) == ([3], [1, 2, 3, 4, 5])  # each side's own
    assert one["difference"] == pytest.approx(30.0 - statistics.fmean(base.values()))
    assert difference_over_seeds(base, {})["difference"] is None


def test_paired_bootstrap_of_a_system_against_itself_and_a_worse_one():
    rng = random.Random(0)
    refs = [" ".join(rng.choice("abcdefgh") for _ in range(8)) for _ in range(60)]
    worse = [" ".join(w for w in r.split() if rng.random() > 0.4) for r in refs]
    same = paired_bootstrap(refs, refs, refs, resamples=50)
    assert same["difference"] == 0 and same["low"] == same["high"] == 0
    result = paired_bootstrap(refs, worse, refs, resamples=50)
    assert result["difference"] == pytest.approx(
        sacrebleu.corpus_bleu(worse, [refs]).score - sacrebleu.corpus_bleu(refs, [refs]).score
    )
    assert result["low"] <= result["difference"] <= result["high"] < 0
    assert result["p_value"] < 0.05
    with pytest.raises(UserError, match="do not line up"):
        paired_bootstrap(refs, worse[:-1], refs, resamples=10)


def test_a_bootstrap_without_spread_has_no_p_and_the_p_is_sacrebleus_elsewhere():
    """Every resampled difference alike: n/a (sacreBLEU's count gave 1 / (n + 1), significant)."""
    rng = random.Random(1)
    refs = [" ".join(rng.choice("abcdefgh") for _ in range(8)) for _ in range(60)]
    hyps = [" ".join(w for w in r.split() if rng.random() > 0.3) for r in refs]
    same = paired_bootstrap(hyps, list(hyps), refs, resamples=200)
    assert same["difference"] == same["low"] == same["high"] == 0 and same["p_value"] is None
    assert bootstrap_p_value(np.zeros(999), 0.0) is None
    assert bootstrap_p_value(np.full(999, 5.0), 5.0) is None  # 5 on every resample: no spread
    assert bootstrap_p_value(np.array([0.0, 0.0, 1.0]), 0.0) == 0.5  # (1 + 1) / (3 + 1)
    close = [" ".join(w for w in r.split() if rng.random() > 0.32) for r in refs]
    ours = paired_bootstrap(hyps, close, refs, resamples=200)
    test = PairedTest([("b", hyps), ("o", close)], {"BLEU": sacrebleu.BLEU()}, [refs], "bs", 200)
    theirs = test()[1]["BLEU"][1]
    assert 0.05 < ours["p_value"] == pytest.approx(theirs.p_value)  # no ties: the same count
    assert ours["difference"] == pytest.approx(theirs.score - test()[1]["BLEU"][0].score)
    assert ours["signature"] == str(test()[0]["BLEU"])


def test_holm_by_hand():
    """Holm: the i-th smallest p times (m - i + 1), kept monotone, capped at 1."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.01, None, 0.04]) == [pytest.approx(0.02), None, pytest.approx(0.04)]
    assert holm([0.6, 0.7]) == [1.0, 1.0] and holm([]) == []
    family = [{"p": 0.01}, {"p": None}, {"p": 0.04}, None]  # None: a test not made (no bootstrap)
    add_holm(family)
    assert [t.get("p_holm") for t in family[:3]] == [pytest.approx(0.02), None, 0.04]
    assert family[0]["family_size"] == 2
    boot = [{"p_value": 0.02}, {"p_value": 0.01}]
    add_holm(boot, key="p_value")
    assert [t["p_holm"] for t in boot] == pytest.approx([0.02, 0.02])


def one_sided_p(diffs: list[float], null: float, alternative: str) -> float:
    """scipy's one-sample t-test of the mean against null, one side."""
    return float(stats.ttest_1samp(diffs, null, alternative=alternative).pvalue)


def test_equivalence_holds_for_small_differences_and_not_for_spread_ones():
    close = [0.1, -0.2, 0.3, 0.0, 0.2, -0.1, 0.1, 0.0]
    got = equivalence(close, margin=1.0)
    assert got.equivalent and got.p < 0.05 and got.n == 8
    assert got.p_lower == pytest.approx(one_sided_p(close, -1.0, "greater"))
    assert got.p_upper == pytest.approx(one_sided_p(close, 1.0, "less"))
    assert got.p == pytest.approx(max(got.p_lower, got.p_upper))
    low, high = stats.t.interval(0.90, 7, loc=mean(close), scale=stdev(close) / math.sqrt(8))
    assert (got.ci_low, got.ci_high) == pytest.approx((low, high))
    assert got.smallest_margin == pytest.approx(max(abs(low), abs(high)))
    # the smallest margin is where TOST at alpha 0.05 turns: above it equivalent, below it not
    assert equivalence(close, margin=got.smallest_margin * 1.01).equivalent
    assert not equivalence(close, margin=got.smallest_margin * 0.99).equivalent
    spread = [-1.5, -0.5, 0.8, -2.0]
    far = equivalence(spread, margin=1.0)
    assert not far.equivalent and far.p > 0.05 and far.smallest_margin > 1.0
    assert far.p_upper == pytest.approx(one_sided_p(spread, 1.0, "less"))
    assert equivalence([0.3]).p is None and equivalence([0.3]).equivalent is None
    flat = equivalence([0.3, 0.3, 0.3])  # no spread: nothing decided, the mean alone
    assert flat.difference == pytest.approx(0.3) and flat.n == 3
    assert flat.p is None and flat.equivalent is None and flat.smallest_margin is None
    assert equivalence([58.93 - 60.95, 58.77 - 60.79], margin=3.0).p is None  # float noise


def test_power_statement_is_the_effect_detected_at_that_power():
    """At the effect it names, a two-sided paired t-test over n seeds has 80% power (nct)."""
    got = power_statement(sd=1.1, n=3)
    assert got.n == 3 and got.sd == 1.1 and got.power == 0.8

    def power(effect: float, n: int) -> float:
        crit, nc = stats.t.ppf(0.975, n - 1), effect / 1.1 * math.sqrt(n)
        return stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc)

    assert power(got.detectable, 3) == pytest.approx(0.8, abs=1e-4)
    assert 3.0 < got.detectable < 4.0  # the "3 seeds detect about 3 BLEU" at SD ~1
    assert power(1.0, got.seeds_for_one) >= 0.8 > power(1.0, got.seeds_for_one - 1)
    assert power_statement(sd=1.1, n=8).detectable < got.detectable
    assert power_statement(None, 3).detectable is None
    assert power_statement(1.0, 1).detectable is None
    two = power_statement(sd=1.1, n=2)  # 2 seeds: an effect size past 10
    assert two.detectable > 10 * 1.1 and power(two.detectable, 2) == pytest.approx(0.8, abs=1e-4)
    assert two.seeds_for_one == got.seeds_for_one  # what more seeds need does not depend on n
    assert power_statement(sd=0.02, n=2).seeds_for_one == 2  # 2 seeds already detect 1.0
    assert power_statement(sd=1e4, n=3).seeds_for_one is None  # no count below 10^7 does


def test_paired_power_of_differences_equal_but_for_float_noise_names_no_effect():
    """0.6 - 0.5 and 0.4 - 0.3 differ by float noise alone (an SD of ~3e-17): no spread, so no
    detectable effect is named (the solver would see a nan t), as for exactly equal ones."""
    noisy = paired_power({1: 0.5, 2: 0.3}, {1: 0.6, 2: 0.4})
    assert noisy.n == 2 and noisy.sd == 0.0 and noisy.detectable is None
    spread = paired_power({1: 0.5, 2: 0.3}, {1: 0.6, 2: 0.45})
    assert spread.detectable == pytest.approx(
        power_statement(statistics.stdev([0.1, 0.15]), 2).detectable
    )


def toy_corpus(seed: int, drop: float, n: int = 40) -> tuple[list[str], list[str]]:
    """References and hypotheses that drop each word with probability drop."""
    rng = random.Random(seed)
    refs = [" ".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 12))) for _ in range(n)]
    hyps = [" ".join(w for w in r.split() if rng.random() >= drop) for r in refs]
    return refs, hyps


def drop_words(refs: list[str], rate: float, seed: int) -> list[str]:
    """Each reference with each word dropped with probability rate (a system of one seed)."""
    rng = random.Random(seed)
    return [" ".join(w for w in r.split() if rng.random() >= rate) for r in refs]


def test_sufficient_statistics_sum_to_sacrebleu_corpus_bleu():
    refs, hyps = toy_corpus(0, 0.3)
    sums = sentence_statistics(hyps, refs)  # [N, K]
    assert sums.shape == (40, 10)
    corpus = sacrebleu.corpus_bleu(hyps, [refs]).score
    assert bleu_from_statistics(sums.sum(axis=0)[None])[0] == pytest.approx(corpus, abs=1e-9)
    # a resample that draws sentence 0 twice and sentence 1 never is the corpus that does
    counts = np.ones(40, dtype=np.int64)
    counts[0], counts[1] = 2, 0
    drawn = [hyps[0], *hyps[:1], *hyps[2:]], [refs[0], *refs[:1], *refs[2:]]
    assert bleu_from_statistics((counts @ sums)[None])[0] == pytest.approx(
        sacrebleu.corpus_bleu(drawn[0], [drawn[1]]).score, abs=1e-9
    )
    with pytest.raises(UserError, match="do not line up"):
        sentence_statistics(hyps[:-1], refs)


def test_two_level_bootstrap_is_the_corpus_bleu_difference_under_identity_and_seeded():
    refs, _ = toy_corpus(0, 0.0)
    base = {s: drop_words(refs, 0.1, seed=s) for s in (1, 2, 3)}
    other = {s: drop_words(refs, 0.3, seed=10 + s) for s in (1, 2, 3, 4)}
    per_seed = [
        sacrebleu.corpus_bleu(other[s], [refs]).score - sacrebleu.corpus_bleu(base[s], [refs]).score
        for s in (1, 2, 3)
    ]
    base_stats = np.stack([sentence_statistics(base[s], refs) for s in (1, 2, 3)])
    other_stats = np.stack([sentence_statistics(other[s], refs) for s in (1, 2, 3)])
    identity = np.arange(3), np.ones((3, len(refs)), dtype=np.int64)
    assert resampled_difference(base_stats, other_stats, *identity) == pytest.approx(
        statistics.fmean(per_seed), abs=1e-9
    )
    twice_first = np.array([0, 0, 2]), identity[1]  # seed 1 drawn twice, seed 2 never
    assert resampled_difference(base_stats, other_stats, *twice_first) == pytest.approx(
        (2 * per_seed[0] + per_seed[2]) / 3, abs=1e-9
    )
    got = two_level_bootstrap(base, other, refs, resamples=200, rng_seed=7)
    assert got.seeds == [1, 2, 3] and got.sentences == len(refs) and got.resamples == 200
    assert got.difference == pytest.approx(statistics.fmean(per_seed), abs=1e-9)
    assert got.low < got.difference < got.high < 0  # other drops three times as many words
    assert two_level_bootstrap(base, other, refs, resamples=200, rng_seed=7) == got
    assert two_level_bootstrap(base, other, refs, resamples=200, rng_seed=8) != got
    itself = two_level_bootstrap(base, base, refs, resamples=20)
    assert itself.difference == itself.low == itself.high == 0
    with pytest.raises(ValueError):
        two_level_bootstrap(base, {9: refs}, refs, resamples=10)
