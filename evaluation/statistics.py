"""Statistics for comparing runs, from scipy and statsmodels: t-intervals with their p-values,
Holm's correction within a family, equivalence (TOST), power, and bootstraps over sacreBLEU's
per-sentence sufficient statistics (sacreBLEU's paired test; seeds and sentences resampled)."""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU
from scipy import optimize, stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from common.errors import UserError

# sacreBLEU's default bootstrap seed: the paired bootstrap draws its resamples as sacreBLEU's
# paired test does, and takes both the interval and p from them.
BOOTSTRAP_SEED = 12345
# The equivalence margin of row (E) in BLEU: the paper's 25.8 vs 25.7 read as "nearly identical"
EQUIVALENCE_MARGIN = 1.0
# The same margin for a ratio of BLEU to a control's (the short condition's kept share): ±1 BLEU
# over the all-lengths controls' 32-39 BLEU at 11-20 source words, where most sentences beyond
# the training lengths are (results/pe_multi30k/report/buckets.md)
RATIO_EQUIVALENCE_MARGIN = 0.03


def mean(values: list[float]) -> float | None:
    """Arithmetic mean, None for no values."""
    return statistics.fmean(values) if values else None


def stdev(values: list[float]) -> float | None:
    """Sample standard deviation, None for fewer than two values."""
    return statistics.stdev(values) if len(values) >= 2 else None


def no_spread(values: Sequence[float]) -> bool:
    """True where values agree up to float noise (2-decimal scores subtracted differ ~1e-15)."""
    return statistics.pstdev(values) <= 1e-9 * max(1.0, *map(abs, values))


def t_quantile(level: float, df: float) -> float:
    """t such that P(|T| <= t) = level for Student's T with df degrees of freedom (scipy)."""
    if df < 1:
        raise ValueError(f"a t-interval needs at least 1 degree of freedom, got {df}")
    return float(stats.t.ppf((1 + level) / 2, df))


def t_p_value(estimate: float, standard_error: float, df: float) -> float | None:
    """Two-sided p of estimate / standard_error under Student's T; without spread, 1 at 0 else None.

    Seeds whose differences agree exactly (records keep two decimals) show no spread, not
    certainty: t is undefined there (scipy gives nan), so no p is claimed, except the
    conservative 1 where nothing differs at all.
    """
    if standard_error == 0:
        return 1.0 if estimate == 0 else None
    return float(2 * stats.t.sf(abs(estimate) / standard_error, df))


def paired_t_interval(diffs: list[float], level: float = 0.95) -> dict:
    """Mean of paired differences, its t-interval and two-sided p (low/high/df/p None for one).

    Identical differences have no spread: no interval, and p as t_p_value gives it.
    """
    result = {"difference": mean(diffs), "low": None, "high": None, "df": None, "p": None}
    if len(diffs) < 2:
        return result
    df = len(diffs) - 1
    if no_spread(diffs):  # scipy's ttest_1samp gives nan (or p ~ 0 from float noise) there
        return result | {"df": df, "p": t_p_value(result["difference"], 0.0, df)}
    error = statistics.stdev(diffs) / math.sqrt(len(diffs))
    low, high = stats.ttest_1samp(diffs, 0.0).confidence_interval(level)
    return result | {
        "low": float(low),
        "high": float(high),
        "df": df,
        "p": t_p_value(result["difference"], error, df),
    }


def difference_over_seeds(base: dict[int, float], other: dict[int, float]) -> dict:
    """other - base: paired by seed over the seeds both have (>= 2), else Welch over all seeds.

    Runs of one seed share their data order, so pairing removes what the seed does to both;
    runs of seeds the other side lacks are left out of a paired difference (named in "seeds").
    """
    shared = sorted(set(base) & set(other))
    if len(shared) >= 2:
        method = "paired t over seeds" if set(base) == set(other) else "paired t, shared seeds"
        diffs = [other[s] - base[s] for s in shared]
        return {"method": method, "seeds": shared, **paired_t_interval(diffs)}
    seeds = sorted(set(base) | set(other))
    if not base or not other:
        return {
            "method": "none",
            "seeds": seeds,
            "difference": None,
            "low": None,
            "high": None,
            "df": None,
            "p": None,
        }
    welch = welch_interval(list(base.values()), list(other.values()))
    sides = {"base_seeds": sorted(base), "other_seeds": sorted(other)}  # each side's own
    return {"method": "Welch t (unpaired seeds)", "seeds": seeds, **sides, **welch}


def welch_interval(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """mean(b) - mean(a) with Welch's t-interval and p (low/high/df/p None under two a side;
    where neither side varies, no interval and p as t_p_value gives it)."""
    result = {"difference": mean(b) - mean(a), "low": None, "high": None, "df": None, "p": None}
    if len(a) < 2 or len(b) < 2:
        return result
    if no_spread(a) and no_spread(b):
        df = len(a) + len(b) - 2
        return result | {"df": df, "p": t_p_value(result["difference"], 0.0, df)}
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    # Welch-Satterthwaite degrees of freedom, rounded down (a slightly wider interval; scipy's
    # ttest_ind(equal_var=False) keeps the fraction)
    df = max(1, math.floor((va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))))
    error = math.sqrt(va + vb)
    half = t_quantile(level, df) * error
    return result | {
        "low": result["difference"] - half,
        "high": result["difference"] + half,
        "df": df,
        "p": t_p_value(result["difference"], error, df),
    }


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values of one family (statsmodels); a None p stays None, outside it."""
    known = [i for i, p in enumerate(p_values) if p is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    if known:
        corrected = multipletests([p_values[i] for i in known], method="holm")[1]
        for i, value in zip(known, corrected, strict=True):
            adjusted[i] = float(value)
    return adjusted


def add_holm(family: Sequence[dict | None], key: str = "p") -> None:
    """Set "p_holm" (and "family_size") on each test of one family, Holm over their key."""
    tests = [test for test in family if test is not None]
    size = sum(test.get(key) is not None for test in tests)
    for test, adjusted in zip(tests, holm([test.get(key) for test in tests]), strict=True):
        test["p_holm"] = adjusted
        test["family_size"] = size


@dataclass
class Equivalence:
    """Two one-sided paired t-tests of |mean difference| < margin, and the smallest such margin."""

    n: int
    difference: float | None
    margin: float
    alpha: float
    p: float | None  # the larger of the two one-sided p-values
    p_lower: float | None  # H0: difference <= -margin
    p_upper: float | None  # H0: difference >= +margin
    equivalent: bool | None  # p < alpha
    ci_low: float | None  # the (1 - 2 alpha) t-interval of the mean difference
    ci_high: float | None
    smallest_margin: float | None  # max(|ci_low|, |ci_high|): equivalent at any margin above


def equivalence(
    diffs: list[float], margin: float = EQUIVALENCE_MARGIN, alpha: float = 0.05
) -> Equivalence:
    """TOST on paired per-seed differences at ±margin (statsmodels ttost_paired), alpha each.

    Under two differences, or identical ones (no spread; statsmodels divides by zero), it
    decides nothing: the mean alone, every test field None.
    """
    n, difference = len(diffs), mean(diffs)
    if n < 2 or no_spread(diffs):
        return Equivalence(n, difference, margin, alpha, *[None] * 7)
    values = np.asarray(diffs, dtype=float)
    p, lower, upper = ttost_paired(values, np.zeros(n), -margin, margin)
    low, high = stats.ttest_1samp(values, 0.0).confidence_interval(1 - 2 * alpha)
    return Equivalence(
        n,
        difference,
        margin,
        alpha,
        float(p),
        float(lower[1]),
        float(upper[1]),
        bool(p < alpha),
        float(low),
        float(high),
        float(max(abs(low), abs(high))),
    )


@dataclass
class Power:
    """What a paired t-test over n seeds detects at the given power, from the per-seed SD."""

    n: int
    sd: float | None  # SD of the paired per-seed differences
    power: float
    alpha: float
    detectable: float | None  # the smallest |mean difference| detected at that power
    seeds_for_one: int | None  # seeds needed to detect a difference of 1.0 at that power


def t_power(effect_size: float, nobs: float, alpha: float) -> float:
    """Power of a two-sided one-sample (paired) t-test at that effect size (mean / SD), from
    scipy's noncentral t. Its lower tail is NaN in scipy where the noncentrality is large (as in
    statsmodels' TTestPower, which adds it): there it is below 1e-15 and counts as 0."""
    df, nc = nobs - 1, effect_size * math.sqrt(nobs)
    crit = stats.t.ppf(1 - alpha / 2, df)
    lower = stats.nct.cdf(-crit, df, nc)
    return float(stats.nct.sf(crit, df, nc) + (0.0 if math.isnan(lower) else lower))


def solve_up(short, low: float, most: float) -> float | None:
    """The root of an increasing short() above low (brentq), None where it stays < 0 to most."""
    if short(low) >= 0:
        return low
    high = 2 * low
    while short(high) < 0:
        if high >= most:
            return None
        high = min(2 * high, most)
    return float(optimize.brentq(short, low, high))


def power_statement(sd: float | None, n: int, power: float = 0.8, alpha: float = 0.05) -> Power:
    """The effect a two-sided paired t-test over n seeds detects at that power, and the seeds a
    difference of 1.0 needs (t_power solved by scipy's brentq)."""
    if sd is None or n < 2 or sd == 0:
        return Power(n, sd, power, alpha, None, None)
    effect = solve_up(lambda e: t_power(e, n, alpha) - power, 1e-6, 1e6)
    needed = solve_up(lambda m: t_power(1.0 / sd, m, alpha) - power, 2, 1e7)
    return Power(
        n,
        sd,
        power,
        alpha,
        None if effect is None else effect * sd,
        None if needed is None else math.ceil(needed),
    )


def paired_equivalence(
    base: dict[int, float], other: dict[int, float], margin: float = EQUIVALENCE_MARGIN
) -> Equivalence:
    """equivalence of other - base over the seeds both have, so that "no difference" is
    claimed only where both one-sided tests reject; under two shared seeds it decides nothing."""
    return equivalence([other[s] - base[s] for s in sorted(set(base) & set(other))], margin)


def paired_power(base: dict[int, float], other: dict[int, float]) -> Power:
    """power_statement for other - base over the seeds both have (the pairs a paired t-test
    takes); under two shared seeds, nothing is detectable (detectable None)."""
    diffs = [other[s] - base[s] for s in sorted(set(base) & set(other))]
    if len(diffs) >= 2 and no_spread(diffs):  # float noise as an SD makes the solver's t nan
        return power_statement(0.0, len(diffs))
    return power_statement(stdev(diffs), len(diffs))


def sentence_statistics(hyps: list[str], refs: list[str]) -> np.ndarray:
    """sacreBLEU's sufficient statistics per sentence: [N, 2 + 2 * max_ngram_order] (int64).

    Columns: hypothesis length, reference length, matches per n, totals per n; any subset's
    corpus BLEU is that of the summed rows (sacreBLEU's own significance tests do the same).
    """
    if len(hyps) != len(refs):
        raise UserError(
            f"hypotheses and references do not line up ({len(hyps)} hypotheses, {len(refs)} "
            "references): were sources skipped (long_inputs=skip)?"
        )
    scorer = BLEU(effective_order=True)  # the same counts; no sentence-level warning
    scores = (scorer.sentence_score(hyp, [ref]) for hyp, ref in zip(hyps, refs, strict=True))
    rows = [[s.sys_len, s.ref_len, *s.counts, *s.totals] for s in scores]
    return np.array(rows, dtype=np.int64).reshape(len(hyps), 2 + 2 * scorer.max_ngram_order)


def bleu_from_statistics(sums: np.ndarray) -> np.ndarray:
    """Corpus BLEU of each row of summed sufficient statistics: [R, K] -> [R]."""
    b = BLEU()
    n, how = b.max_ngram_order, (b.smooth_method, b.smooth_value, b.effective_order)
    return np.array(
        [
            BLEU.compute_bleu(row[2 : 2 + n], row[2 + n :], *row[:2], *how, n).score
            for row in sums.tolist()
        ]
    )


def bootstrap_p_value(diffs: np.ndarray, observed: float) -> float | None:
    """sacreBLEU's two-sided paired-bootstrap p, (c + 1) / (n + 1), counting ties (>=, not >);
    None (n/a) where the resamples do not vary: they say nothing of chance."""
    if np.ptp(diffs) == 0:  # sacreBLEU's count would give p = 1 / (n + 1): "significant"
        return None
    # c: the resamples whose centred |difference| is at least the observed |difference|
    spread = np.abs(diffs) - np.abs(diffs).mean()
    return (int(np.sum(spread >= abs(observed))) + 1) / (len(diffs) + 1)


def paired_bootstrap(
    base_hyps: list[str], other_hyps: list[str], refs: list[str], resamples: int
) -> dict:
    """sacreBLEU's paired bootstrap test of other vs base, with a 95% interval of the difference."""
    if not len(base_hyps) == len(other_hyps) == len(refs):
        raise UserError(
            f"hypotheses and references do not line up ({len(base_hyps)}, {len(other_hyps)} "
            f"hypotheses, {len(refs)} references): were sources skipped (long_inputs=skip)?"
        )
    scorer, n = BLEU(), len(refs)
    scores = [scorer.corpus_score(hyps, [refs]).score for hyps in (base_hyps, other_hyps)]
    stats = [sentence_statistics(hyps, refs) for hyps in (base_hyps, other_hyps)]  # 2 x [N, K]
    summed = bleu_from_statistics(np.stack([s.sum(axis=0) for s in stats]))
    if not np.allclose(summed, scores, atol=1e-6):  # the resamples would not be sacreBLEU's
        raise RuntimeError(f"summed sentence statistics give BLEU {summed}, not {scores}")
    # interval and p from the same resamples, drawn as sacreBLEU's test draws them
    indices = np.random.default_rng(BOOTSTRAP_SEED).choice(n, size=(resamples, n), replace=True)
    weights = np.stack([np.bincount(row, minlength=n) for row in indices])  # [resamples, N]
    diffs = bleu_from_statistics(weights @ stats[1]) - bleu_from_statistics(weights @ stats[0])
    low, high = np.percentile(diffs, [2.5, 97.5])
    signature = scorer.get_signature()
    signature.update("seed", str(BOOTSTRAP_SEED))
    signature.update("bs", resamples)
    return {
        "baseline_bleu": scores[0],
        "other_bleu": scores[1],
        "difference": scores[1] - scores[0],
        "low": float(low),
        "high": float(high),
        "p_value": bootstrap_p_value(diffs, scores[1] - scores[0]),
        "resamples": resamples,
        "signature": str(signature),
    }


@dataclass
class TwoLevelBootstrap:
    """other - base corpus BLEU, mean over seeds, with a percentile interval over resamples."""

    seeds: list[int]
    sentences: int
    difference: float  # mean over the seeds of the per-seed corpus BLEU difference
    low: float
    high: float
    level: float
    resamples: int
    rng_seed: int
    method: str = (
        "two-level bootstrap: seeds drawn with replacement, then test sentences with replacement "
        "(the same sentences for both sides of a seed pair); corpus sacreBLEU per resample"
    )


def resampled_difference(
    base: np.ndarray, other: np.ndarray, picked: np.ndarray, counts: np.ndarray
) -> float:
    """Mean over picked seed pairs of other - base corpus BLEU on sentences weighted by counts.

    base, other: [S, N, K] per-seed sentence statistics; picked: [S'] seed indices; counts:
    [S', N] how often each sentence is drawn for each picked seed.
    """
    base_sums = np.einsum("sn,snk->sk", counts, base[picked])  # [S', K]
    other_sums = np.einsum("sn,snk->sk", counts, other[picked])  # [S', K]
    return float(np.mean(bleu_from_statistics(other_sums) - bleu_from_statistics(base_sums)))


def two_level_bootstrap(
    base: dict[int, list[str]],
    other: dict[int, list[str]],
    refs: list[str],
    resamples: int,
    rng_seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> TwoLevelBootstrap:
    """other - base BLEU paired by seed, resampling seeds and then each seed's test sentences.

    base, other: hypotheses per seed (the seeds both have are used). The interval reflects both
    what the seed does to a run and which sentences the test set happens to hold.
    """
    seeds = sorted(set(base) & set(other))
    if not seeds or resamples < 1:
        raise ValueError(f"a two-level bootstrap needs a shared seed and resamples >= 1: {seeds}")
    base_stats = np.stack([sentence_statistics(base[s], refs) for s in seeds])  # [S, N, K]
    other_stats = np.stack([sentence_statistics(other[s], refs) for s in seeds])  # [S, N, K]
    n_seeds, n_sentences = len(seeds), len(refs)
    everything = np.arange(n_seeds), np.ones((n_seeds, n_sentences), dtype=np.int64)
    difference = resampled_difference(base_stats, other_stats, *everything)
    rng = np.random.default_rng(rng_seed)
    uniform = np.full(n_sentences, 1 / n_sentences)
    diffs = np.empty(resamples)
    for b in range(resamples):
        picked = rng.integers(0, n_seeds, size=n_seeds)  # [S]
        counts = rng.multinomial(n_sentences, uniform, size=n_seeds)  # [S, N]
        diffs[b] = resampled_difference(base_stats, other_stats, picked, counts)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return TwoLevelBootstrap(
        seeds, n_sentences, difference, float(low), float(high), level, resamples, rng_seed
    )
