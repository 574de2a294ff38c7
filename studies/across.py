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
    signs_agree: bool | None  # None: a study has no difference here
    difference: float | None  # the inverse-variance weighted mean
    low: float | None
    high: float | None
    p: float | None  # two-sided, normal
    p_holm: float | None  # within the pooled comparisons of this baseline

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
        signs = None if None in values else len({v > 0 for v in values}) == 1
        rows.append((key, by_study, signs, pool(list(by_study.values()))))
    out = []
    for baseline in sorted({key[2] for key, *_ in rows}):
        family = [r for r in rows if r[0][2] == baseline]
        adjusted = holm([r[3][3] for r in family])
        out += [
            Pooled(key[0], key[1], key[2], key[3], by_study, signs, *pooled, p_holm)
            for (key, by_study, signs, pooled), p_holm in zip(family, adjusted, strict=True)
        ]
    return out


POOL_NOTE = (
    "Pooled: a fixed-effect inverse-variance mean of the studies' paired differences (it assumes "
    "one common difference; the signs and per-study intervals show whether that holds); the "
    "pooled comparisons of one baseline are one Holm family."
)


def _cell(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def across_markdown(pooled: Sequence[Pooled], names: Sequence[str]) -> list[str]:
    """The table across studies: each study's difference, sign agreement, the pool, Holm p."""
    head = " | ".join(f"{n}: Δ [95% CI] (Holm p)" for n in names)
    lines = [
        f"| condition | steps | variant − baseline | {head} | signs agree | pooled Δ [95% CI] | "
        "pooled p | pooled Holm p |",
        "|---" * (7 + len(names)) + "|",
    ]
    for p in pooled:
        per = " | ".join(
            f"{_cell(d.difference)} [{_cell(d.low)}, {_cell(d.high)}] "
            f"({'–' if d.p_holm is None else f'{d.p_holm:.3f}'})"
            for d in (p.by_study[n] for n in names)
        )
        agree = "–" if p.signs_agree is None else "yes" if p.signs_agree else "no"
        lines.append(
            f"| {p.condition} | {p.steps:,} | {p.variant} − {p.baseline} | {per} | {agree} | "
            f"{_cell(p.difference)} [{_cell(p.low)}, {_cell(p.high)}] | "
            f"{'–' if p.p is None else f'{p.p:.3f}'} | "
            f"{'–' if p.p_holm is None else f'{p.p_holm:.3f}'}{' **held**' if p.shown else ''} |"
        )
    if not pooled:
        lines.append("| no difference is in every study's answer yet |" + " |" * (6 + len(names)))
    lines += ["", POOL_NOTE]
    return lines
