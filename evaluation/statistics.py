"""Statistics for comparing runs: means over seeds, t-intervals and sacreBLEU's paired bootstrap."""

import math
import statistics

from data.errors import UserError

# sacreBLEU's default bootstrap seed: the interval of the difference is taken over the resamples
# its paired test draws (unless SACREBLEU_SEED is set to another seed).
BOOTSTRAP_SEED = 12345


def mean(values: list[float]) -> float | None:
    """Arithmetic mean, None for no values."""
    return statistics.fmean(values) if values else None


def stdev(values: list[float]) -> float | None:
    """Sample standard deviation, None for fewer than two values."""
    return statistics.stdev(values) if len(values) >= 2 else None


def t_quantile(level: float, df: int) -> float:
    """t such that P(|T| <= t) = level for Student's T with integer df (A&S 26.7.3-4)."""
    if df < 1:
        raise ValueError(f"a t-interval needs at least 1 degree of freedom, got {df}")

    def central(t: float) -> float:
        theta = math.atan(t / math.sqrt(df))
        sin, cos = math.sin(theta), math.cos(theta)
        if df % 2:
            term, series = cos, 0.0
            for k in range(1, (df - 1) // 2 + 1):
                series += term
                term *= cos * cos * (2 * k) / (2 * k + 1)
            return 2 / math.pi * (theta + sin * series)
        term, series = 1.0, 0.0
        for k in range(1, df // 2 + 1):
            series += term
            term *= cos * cos * (2 * k - 1) / (2 * k)
        return sin * series

    low, high = 0.0, 1.0
    while central(high) < level:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if central(middle) < level else (low, middle)
    return (low + high) / 2


def paired_t_interval(diffs: list[float], level: float = 0.95) -> dict:
    """Mean of paired differences with its t-interval (low/high/df None for one pair)."""
    result = {"difference": mean(diffs), "low": None, "high": None, "df": None}
    if len(diffs) < 2:
        return result
    df = len(diffs) - 1
    half = t_quantile(level, df) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return result | {
        "low": result["difference"] - half,
        "high": result["difference"] + half,
        "df": df,
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
        }
    welch = welch_interval(list(base.values()), list(other.values()))
    sides = {"base_seeds": sorted(base), "other_seeds": sorted(other)}  # each side's own
    return {"method": "Welch t (unpaired seeds)", "seeds": seeds, **sides, **welch}


def welch_interval(a: list[float], b: list[float], level: float = 0.95) -> dict:
    """mean(b) - mean(a) with Welch's t-interval (low/high/df None under two values a side)."""
    result = {"difference": mean(b) - mean(a), "low": None, "high": None, "df": None}
    if len(a) < 2 or len(b) < 2:
        return result
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    # Welch-Satterthwaite degrees of freedom, rounded down (a slightly wider interval)
    welch = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb else 0
    df = max(1, math.floor(welch)) if va + vb else len(a) + len(b) - 2
    half = t_quantile(level, df) * math.sqrt(va + vb)
    return result | {
        "low": result["difference"] - half,
        "high": result["difference"] + half,
        "df": df,
    }


def paired_bootstrap(
    base_hyps: list[str], other_hyps: list[str], refs: list[str], resamples: int
) -> dict:
    """sacreBLEU's paired bootstrap test of other vs base, with a 95% interval of the difference."""
    import numpy as np
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if not len(base_hyps) == len(other_hyps) == len(refs):
        raise UserError(
            f"hypotheses and references do not line up ({len(base_hyps)}, {len(other_hyps)} "
            f"hypotheses, {len(refs)} references): were sources skipped (long_inputs=skip)?"
        )
    corpus = BLEU()
    test = PairedTest(
        [("baseline", base_hyps), ("other", other_hyps)],
        {"BLEU": corpus},
        [refs],
        test_type="bs",
        n_samples=resamples,
    )
    signatures, results = test()
    base_result, other_result = results["BLEU"]
    # the difference on the same resamples: per-sentence sufficient statistics, summed
    sentence = BLEU(effective_order=True)

    def sufficient_statistics(hyps: list[str]) -> np.ndarray:
        rows = []
        for hyp, ref in zip(hyps, refs, strict=True):
            score = sentence.sentence_score(hyp, [ref])
            rows.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
        return np.array(rows, dtype=np.int64)  # [N, 2 + 2 * max_ngram_order]

    order = corpus.max_ngram_order
    indices = np.random.default_rng(BOOTSTRAP_SEED).choice(
        len(refs), size=(resamples, len(refs)), replace=True
    )  # [resamples, N]
    weights = np.stack([np.bincount(row, minlength=len(refs)) for row in indices])  # [resamples, N]

    def resampled_bleu(stats: np.ndarray) -> np.ndarray:
        sums = weights @ stats  # [resamples, 2 + 2 * order]
        return np.array(
            [
                BLEU.compute_bleu(
                    row[2 : 2 + order].tolist(),
                    row[2 + order :].tolist(),
                    int(row[0]),
                    int(row[1]),
                    smooth_method=corpus.smooth_method,
                    smooth_value=corpus.smooth_value,
                    max_ngram_order=order,
                ).score
                for row in sums
            ]
        )

    diffs = resampled_bleu(sufficient_statistics(other_hyps)) - resampled_bleu(
        sufficient_statistics(base_hyps)
    )
    low, high = np.percentile(diffs, [2.5, 97.5])
    return {
        "baseline_bleu": base_result.score,
        "other_bleu": other_result.score,
        "difference": other_result.score - base_result.score,
        "low": float(low),
        "high": float(high),
        "p_value": other_result.p_value,
        "resamples": resamples,
        "signature": str(signatures["BLEU"]),
    }
