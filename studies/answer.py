"""The answer of a declared study: each variant's finals, and each difference from a baseline.

Per condition and budget (the finals, and the extended finals), each variant's mean test BLEU over
its seeds at its chosen rate, and each difference from every baseline of `statistics.baselines`
paired by seed: its mean, 95% t-interval, p, Holm's adjustment and Benjamini-Hochberg's q within
its family (one condition, budget, checkpoint and baseline), TOST at ±`equivalence_margin`, and
the difference 80% power detects. Claims rest on the last checkpoint; `flips` names every
difference whose sign or Holm decision the average of the last checkpoints changes.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from statsmodels.stats.multitest import multipletests

from evaluation.statistics import difference_over_seeds, holm, paired_equivalence, paired_power
from studies.cells import ALPHA
from studies.finals import FinalScores
from studies.protocol import StudySpec
from studies.store import Point, Record


@dataclass(frozen=True)
class Final:
    """One scored final: its point, record and scores."""

    point: Point
    record: Record
    scores: FinalScores


@dataclass(frozen=True)
class VariantRow:
    """One variant's finals in one condition at one budget."""

    condition: str
    steps: int
    variant: str
    lr_scale: float
    seeds: tuple[int, ...]
    dev_ppl: float | None  # mean over seeds (None: one diverged)
    bleu: dict[str, float]  # checkpoint -> mean test BLEU
    bleu_sd: dict[str, float | None]


@dataclass(frozen=True)
class Difference:
    """variant - baseline, paired by seed, on one split and checkpoint."""

    condition: str
    steps: int
    checkpoint: str
    baseline: str
    variant: str
    n: int
    difference: float | None
    low: float | None
    high: float | None
    p: float | None
    p_holm: float | None
    q_bh: float | None
    tost_p: float | None  # equivalence at ±margin (None: under two seeds)
    detectable: float | None  # the difference 80% power detects with these seeds

    @property
    def shown(self) -> bool:
        """Held after Holm's correction."""
        return self.p_holm is not None and self.p_holm < ALPHA


def bleu_by_seed(finals: Sequence[Final], split: str, checkpoint: str) -> dict[int, float]:
    """{seed: test BLEU} of one variant's finals."""
    found = {f.point.seed: f.scores.score(split, checkpoint) for f in finals}
    return {seed: score.bleu for seed, score in found.items() if score is not None}


def variant_row(group: Sequence[Final], split: str, checkpoints: Sequence[str]) -> VariantRow:
    """One variant's summary at one budget."""
    first = group[0].point
    ppl = [f.record.dev_ppl for f in group]
    bleu = {c: list(bleu_by_seed(group, split, c).values()) for c in checkpoints}
    return VariantRow(
        first.condition,
        first.steps,
        first.variant,
        first.lr_scale,
        tuple(sorted(f.point.seed for f in group)),
        None if None in ppl else statistics.fmean(ppl),
        {c: statistics.fmean(v) for c, v in bleu.items() if v},
        {c: statistics.stdev(v) if len(v) > 1 else None for c, v in bleu.items()},
    )


def differences(
    groups: dict[str, list[Final]], baseline: str, split: str, checkpoint: str, margin: float
) -> list[Difference]:
    """Every variant minus one baseline, one family: Holm and BH over it."""
    base = bleu_by_seed(groups[baseline], split, checkpoint)
    rows = []
    for variant, group in groups.items():
        if variant == baseline:
            continue
        other = bleu_by_seed(group, split, checkpoint)
        diff = difference_over_seeds(base, other)
        tost = paired_equivalence(base, other, margin)
        rows.append((variant, diff, tost.p, paired_power(base, other).detectable))
    ps = [d.get("p") for _, d, _, _ in rows]
    adjusted = holm(ps)
    given = [p for p in ps if p is not None]
    qs = iter(multipletests(given, method="fdr_bh")[1] if given else [])
    first = next(iter(groups.values()))[0].point
    return [
        Difference(first.condition, first.steps, checkpoint, baseline, variant,
                   len(set(base) & set(bleu_by_seed(groups[variant], split, checkpoint))),
                   d.get("difference"), d.get("low"), d.get("high"), d.get("p"), p_holm,
                   None if d.get("p") is None else float(next(qs)), tost, detectable)
        for (variant, d, tost, detectable), p_holm in zip(rows, adjusted, strict=True)
    ]  # fmt: skip


def by_group(finals: Sequence[Final]) -> dict[tuple[str, int], dict[str, list[Final]]]:
    """{(condition, steps): {variant: its finals}}, in the order the finals come."""
    out: dict[tuple[str, int], dict[str, list[Final]]] = {}
    for final in finals:
        key = (final.point.condition, final.point.steps)
        out.setdefault(key, {}).setdefault(final.point.variant, []).append(final)
    return out


def answer(study: StudySpec, finals: Sequence[Final], checkpoints: Sequence[str]) -> dict:
    """Every variant row and every difference of a study's scored finals (the first test set)."""
    split, margin = study.test[0], study.statistics.equivalence_margin
    rows, diffs = [], []
    for groups in by_group(finals).values():
        rows += [variant_row(g, split, checkpoints) for g in groups.values()]
        for baseline in study.statistics.baselines:
            if baseline in groups:
                for checkpoint in checkpoints:
                    diffs += differences(groups, baseline, split, checkpoint, margin)
    return {"rows": rows, "differences": diffs, "flips": flips(diffs, checkpoints)}


def flips(diffs: Sequence[Difference], checkpoints: Sequence[str]) -> list[str]:
    """Each difference whose sign or Holm decision the second checkpoint changes."""
    if len(checkpoints) < 2:
        return []
    key = lambda d: (d.condition, d.steps, d.baseline, d.variant)  # noqa: E731
    last = {key(d): d for d in diffs if d.checkpoint == checkpoints[0]}
    out = []
    for d in diffs:
        old = last.get(key(d))
        if d.checkpoint != checkpoints[1] or old is None or None in (d.difference, old.difference):
            continue
        if (d.difference > 0) != (old.difference > 0) or d.shown != old.shown:
            out.append(
                f"{d.condition} {d.steps:,} steps, {d.variant} − {d.baseline}: "
                f"{old.difference:+.2f} ({'held' if old.shown else 'not shown'}) at the last "
                f"checkpoint, {d.difference:+.2f} ({'held' if d.shown else 'not shown'}) "
                f"averaged"
            )
    return out


def _num(value: float | None, digits: int = 2, sign: bool = False) -> str:
    return "–" if value is None else f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def answer_markdown(result: dict, checkpoints: Sequence[str], margin: float) -> list[str]:
    """The answer's tables: variants, then differences, then what averaging changes."""
    head = "| condition | steps | variant | rate | seeds | dev PPL | "
    head += " | ".join(f"BLEU {c}" for c in checkpoints) + " |"
    lines = [head, "|---" * (6 + len(checkpoints)) + "|"]
    for r in result["rows"]:
        cells = [f"{_num(r.bleu.get(c))} ± {_num(r.bleu_sd.get(c))}" for c in checkpoints]
        lines.append(
            f"| {r.condition} | {r.steps:,} | {r.variant} | ×{r.lr_scale:g} | {len(r.seeds)} | "
            f"{_num(r.dev_ppl)} | " + " | ".join(cells) + " |"
        )
    lines += ["", f"| condition | steps | checkpoint | variant − baseline | n | Δ BLEU [95% CI] "
              f"| p | Holm p | BH q | TOST ±{margin:g} p | 80% power detects |",
              "|---" * 11 + "|"]  # fmt: skip
    for d in result["differences"]:
        lines.append(
            f"| {d.condition} | {d.steps:,} | {d.checkpoint} | {d.variant} − {d.baseline} | "
            f"{d.n} | {_num(d.difference, sign=True)} [{_num(d.low, sign=True)}, "
            f"{_num(d.high, sign=True)}] | {_num(d.p, 3)} | {_num(d.p_holm, 3)}"
            f"{' **held**' if d.shown else ''} | {_num(d.q_bh, 3)} | {_num(d.tost_p, 3)} | "
            f"±{_num(d.detectable)} |"
        )
    changed = "; ".join(result["flips"]) or "no difference changes sign or Holm decision"
    lines += ["", f"Averaging the last checkpoints instead: {changed}."]
    return lines
