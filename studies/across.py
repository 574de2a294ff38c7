"""Does the answer travel? The same differences in several declared studies (language pairs).

Per study, each difference from a baseline comes from its own answer (studies/answer.py: paired
by seed, Holm and BH within the study). Across the studies, per (condition, baseline, variant):
whether the signs agree (descriptive), and a fixed-effect inverse-variance pool of the studies'
mean differences (weights 1/SE², SE = the paired SD over √n; a normal interval and p), labelled
as such: it assumes one common difference, which the sign agreement and the per-study intervals
let a reader judge. The pooled comparisons of one baseline are a Holm family of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats
from statsmodels.stats.multitest import multipletests

from evaluation.statistics import holm
from studies.answer import Difference
from studies.cells import ALPHA


@dataclass(frozen=True)
class Pooled:
    """One difference across studies: each study's, their sign agreement, the pool."""

    condition: str
    steps: int
    baseline: str
    variant: str
    by_study: dict[str, Difference]
    signs_agree: bool | None  # None: a study has no difference here, or a zero one
    difference: float | None  # the inverse-variance weighted mean
    low: float | None
    high: float | None
    p: float | None  # two-sided, normal
    p_holm: float | None  # within the pooled comparisons of this baseline
    q_bh: float | None  # Benjamini-Hochberg within the same family

    @property
    def shown(self) -> bool:
        return self.p_holm is not None and self.p_holm < ALPHA


def standard_error(d: Difference) -> float | None:
    """The SE of a paired mean difference from its 95% t-interval (None without one)."""
    if d.low is None or d.high is None or d.n < 2:
        return None
    return (d.high - d.low) / (2 * stats.t.ppf(0.975, d.n - 1))


def pool(diffs: Sequence[Difference]) -> tuple[float | None, ...]:
    """(difference, low, high, p) of the fixed-effect inverse-variance pool; Nones where a
    study's SE is missing or zero."""
    errors = [standard_error(d) for d in diffs]
    if any(e is None or e <= 0 for e in errors):
        return None, None, None, None
    weights = [1 / e**2 for e in errors]
    mean = sum(w * d.difference for w, d in zip(weights, diffs, strict=True)) / sum(weights)
    se = 1 / math.sqrt(sum(weights))
    z = stats.norm.ppf(0.975)
    p = 2 * stats.norm.sf(abs(mean) / se)
    return mean, mean - z * se, mean + z * se, float(p)


def across(answers: dict[str, Sequence[Difference]], checkpoint: str = "last") -> list[Pooled]:
    """Every (condition, steps, baseline, variant) difference all studies have, pooled."""
    keyed = {
        name: {(d.condition, d.steps, d.baseline, d.variant): d for d in diffs
               if d.checkpoint == checkpoint}
        for name, diffs in answers.items()
    }  # fmt: skip
    shared = set.intersection(*(set(k) for k in keyed.values())) if keyed else set()
    rows = []
    for key in sorted(shared):
        by_study = {name: keyed[name][key] for name in keyed}
        values = [d.difference for d in by_study.values()]
        signed = None in values or 0 in values  # a zero difference has no sign to agree with
        signs = None if signed else len({v > 0 for v in values}) == 1
        rows.append((key, by_study, signs, pool(list(by_study.values()))))
    out = []
    for baseline in sorted({key[2] for key, *_ in rows}):
        family = [r for r in rows if r[0][2] == baseline]
        ps = [r[3][3] for r in family]
        adjusted = zip(holm(ps), benjamini_hochberg(ps), strict=True)
        out += [
            Pooled(key[0], key[1], key[2], key[3], by_study, signs, *pooled, p_holm, q_bh)
            for (key, by_study, signs, pooled), (p_holm, q_bh) in zip(family, adjusted, strict=True)
        ]
    return out


def benjamini_hochberg(ps: Sequence[float | None]) -> list[float | None]:
    """BH's q of each p of one family (None stays None)."""
    known = [p for p in ps if p is not None]
    qs = iter(multipletests(known, method="fdr_bh")[1] if known else [])
    return [None if p is None else float(next(qs)) for p in ps]


POOL_NOTE = (
    "Pooled: a fixed-effect inverse-variance mean of the studies' paired differences (it assumes "
    "one common difference; the signs and per-study intervals show whether that holds); the "
    "pooled comparisons of one baseline are one Holm family."
)


def _cell(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def study_cell(d: Difference) -> str:
    """One study's difference: Δ [95% CI] (Holm p; BH q; TOST p; what 80% power detects)."""
    detects = "–" if d.detectable is None else f"±{d.detectable:.2f}"
    return (
        f"{_cell(d.difference)} [{_cell(d.low)}, {_cell(d.high)}] ({_p(d.p_holm)}; "
        f"{_p(d.q_bh)}; {_p(d.tost_p)}; {detects})"
    )


def across_markdown(
    pooled: Sequence[Pooled], names: Sequence[str], margin: float = 1.0
) -> list[str]:
    """The table across studies: each study's difference with its Holm p, BH q, TOST p and
    power, the sign agreement, and the pool with its p, Holm p and BH q."""
    head = " | ".join(
        f"{n}: Δ [95% CI] (Holm p; BH q; TOST ±{margin:g} p; 80% power detects)" for n in names
    )
    lines = [
        f"| condition | steps | variant − baseline | {head} | signs agree | pooled Δ [95% CI] | "
        "pooled p | pooled Holm p | pooled BH q |",
        "|---" * (8 + len(names)) + "|",
    ]
    for p in pooled:
        per = " | ".join(study_cell(p.by_study[n]) for n in names)
        agree = "–" if p.signs_agree is None else "yes" if p.signs_agree else "no"
        lines.append(
            f"| {p.condition} | {p.steps:,} | {p.variant} − {p.baseline} | {per} | {agree} | "
            f"{_cell(p.difference)} [{_cell(p.low)}, {_cell(p.high)}] | "
            f"{_p(p.p)} | {_p(p.p_holm)}{' **held**' if p.shown else ''} | {_p(p.q_bh)} |"
        )
    if not pooled:
        lines.append("| no difference is in every study's answer yet |" + " |" * (7 + len(names)))
    lines += ["", POOL_NOTE]
    return lines
