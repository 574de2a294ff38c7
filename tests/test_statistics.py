"""evaluation/statistics.py: the t quantile against closed forms, the intervals, the bootstrap."""

import math
import random
import statistics

import pytest
import sacrebleu

from data.errors import UserError
from evaluation.statistics import (
    difference_over_seeds,
    mean,
    paired_bootstrap,
    paired_t_interval,
    stdev,
    t_quantile,
    welch_interval,
)


def test_t_quantile_matches_closed_forms():
    assert t_quantile(0.95, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-9)
    assert t_quantile(0.95, 2) == pytest.approx(math.sqrt(2 * 0.95**2 / (1 - 0.95**2)), rel=1e-9)
    assert t_quantile(0.95, 5000) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-3)
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
    assert paired_t_interval([1.5]) == {"difference": 1.5, "low": None, "high": None, "df": None}


def test_welch_interval_uses_welch_satterthwaite_degrees_of_freedom():
    a, b = [10.0, 11.0, 12.0], [13.0, 17.0]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 2
    df = math.floor((va + vb) ** 2 / (va**2 / 2 + vb**2 / 1))
    got = welch_interval(a, b)
    assert got["df"] == df and got["difference"] == pytest.approx(15 - 11)
    assert got["high"] - got["difference"] == pytest.approx(
        t_quantile(0.95, df) * math.sqrt(va + vb)
    )


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
