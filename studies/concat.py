"""The concatenation test's tables: k sentences joined a line, per condition and variant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evaluation.plots import figure, save, variant_colours, variant_rank
from evaluation.statistics import (
    EQUIVALENCE_MARGIN,
    Power,
    difference_over_seeds,
    paired_equivalence,
    paired_power,
)
from studies.cells import (
    POWER_NOTE,
    SURVIVORS_NOTE,
    Interval,
    cell,
    equivalence_cell,
    holm_by_family,
    holm_survivors,
    interval,
    power_cell,
    seeds_cell,
    signed_cell,
)
from studies.plan import CONCAT_SPLITS, KS, POOLED, SEARCH
from studies.records import StudyRecord
from studies.reported import Pair

CONCAT_KEYS = ("bleu", "chrf", "bp", "length_ratio", "unigram_precision", "lines", "left_out")
CONCAT_DIFFERENCES = ("bleu", "length_ratio", "bleu_ratio_to_k1")
# each Holm family adjusts the t-tests' p of CONCAT_DIFFERENCES and the Δ BLEU's TOST p
HOLM_KEYS = (*CONCAT_DIFFERENCES, "equivalence")
EQUIVALENCE_NOTE = (
    f"TOST: two one-sided paired t-tests of -{EQUIVALENCE_MARGIN:g} < Δ BLEU < "
    f"+{EQUIVALENCE_MARGIN:g} (row (E)'s margin), Holm within the family; the smallest margin "
    "its 90% interval shows equivalent."
)
EQUIVALENCE_HEADER = f"Δ BLEU within ±{EQUIVALENCE_MARGIN:g}: TOST p (Holm), smallest margin"


@dataclass(frozen=True)
class ConcatRun:
    """One run's pooled scores at one k (concat.json "runs"), with BLEU(k)/BLEU(1) of its seed."""

    condition: str
    variant: str
    seed: int
    step: int
    k: int
    bleu: float
    chrf: float
    bp: float
    length_ratio: float
    unigram_precision: float
    lines: int
    left_out: int
    bleu_ratio_to_k1: float | None


@dataclass(frozen=True)
class ConcatSummary:
    """A condition, variant and k over its seeds: each score's mean, std and 95% interval."""

    condition: str
    variant: str
    k: int
    seeds: list[int]
    lines: int
    left_out: int
    bleu: Interval
    chrf: Interval
    bp: Interval
    length_ratio: Interval
    bleu_ratio_to_k1: Interval


@dataclass(frozen=True)
class ConcatDifference:
    """A variant minus a baseline at one condition and k, paired by seed: each of
    CONCAT_DIFFERENCES (evaluation.statistics' dicts, Holm p added), power and TOST of Δ BLEU."""

    condition: str
    variant: str
    baseline: str
    k: int
    bleu: dict
    length_ratio: dict
    bleu_ratio_to_k1: dict
    power: Power
    equivalence: dict


@dataclass(frozen=True)
class Remedy:
    """A variant trained on joined lines minus its all-lengths control at one k, and the ratio of
    their BLEU per seed (concat.json "joined_minus_all")."""

    variant: str
    k: int
    bleu: dict
    length_ratio: dict
    bleu_ratio_to_k1: dict
    power: Power
    equivalence: dict
    bleu_over_control: Interval


@dataclass(frozen=True)
class ConcatTable:
    """concat.json: the splits, ks and search; every run's scores, summaries and differences."""

    splits: list[str]
    ks: list[int]
    beam: int
    lenpen: float
    min_len: int
    runs: list[ConcatRun]
    summary: list[ConcatSummary]
    differences: list[ConcatDifference]
    joined_minus_all: list[Remedy]


def seed_scores(runs: list[ConcatRun], key: str) -> dict[int, float]:
    """seed -> a score of the runs (those that have it)."""
    return {r.seed: getattr(r, key) for r in runs if getattr(r, key) is not None}


def concat_differences(base: list[ConcatRun], other: list[ConcatRun]) -> dict:
    """other - base for each of CONCAT_DIFFERENCES, by seed (evaluation.statistics), the BLEU
    difference 80% power detects over the paired seeds ("power") and its TOST ("equivalence"):
    a difference row's tests, by field."""
    tests = {
        key: difference_over_seeds(seed_scores(base, key), seed_scores(other, key))
        for key in CONCAT_DIFFERENCES
    }
    bleu = seed_scores(base, "bleu"), seed_scores(other, "bleu")
    return tests | {
        "power": paired_power(*bleu),
        "equivalence": asdict(paired_equivalence(*bleu)),
    }


def ratio_to_control(control: list[ConcatRun], group: list[ConcatRun]) -> Interval:
    """BLEU over its control's at the same k, per seed both ran (mean, std, 95% interval)."""
    base = {r.seed: r.bleu for r in control}
    shared = [r for r in group if r.bleu is not None and base.get(r.seed)]
    return interval([r.bleu / base[r.seed] for r in shared])


def concat_comparisons(
    groups: dict[tuple, list[ConcatRun]], baselines: Sequence[str], joined: Pair | None
) -> tuple[list[ConcatDifference], list[Remedy]]:
    """Every variant minus each baseline per condition and k, a pair of baselines once, and
    each variant's joined runs minus its all-lengths control per k (joined: those two
    conditions); Holm within each family."""
    differences, remedy = [], []
    for number, baseline in enumerate(baselines):
        for (condition, variant, k), group in sorted(groups.items()):
            base = groups.get((condition, baseline, k))
            if variant not in baselines[: number + 1] and base:
                differences.append(
                    ConcatDifference(
                        condition, variant, baseline, k, **concat_differences(base, group)
                    )
                )
    for (condition, variant, k), group in sorted(groups.items()):
        control = groups.get((joined[1], variant, k)) if joined else None
        if joined and condition == joined[0] and control:
            remedy.append(
                Remedy(
                    variant,
                    k,
                    **concat_differences(control, group),
                    bleu_over_control=ratio_to_control(control, group),
                )
            )
    holm_by_family(differences, lambda d: (d.baseline, d.condition, d.k), HOLM_KEYS)
    holm_by_family(remedy, lambda d: (d.k,), HOLM_KEYS)
    return differences, remedy


def pooled_runs(records: list[StudyRecord]) -> list[ConcatRun]:
    """Each run's pooled scores per k, with BLEU(k)/BLEU(1) of its seed (None without BLEU(1))."""
    pooled = [(record, row) for record in records for row in record.concat if row.split == POOLED]
    k1 = {(r.condition, r.variant, r.seed): row.bleu for r, row in pooled if row.k == 1}
    runs = []
    for record, row in pooled:
        base = k1.get((record.condition, record.variant, record.seed))
        scores = {key: getattr(row, key) for key in CONCAT_KEYS}
        runs.append(
            ConcatRun(
                record.condition, record.variant, record.seed, record.step, row.k, **scores,
                bleu_ratio_to_k1=round(row.bleu / base, 4) if base else None,
            )
        )  # fmt: skip
    return runs


def concat_table(
    records: list[StudyRecord], baselines: Sequence[str], joined: Pair | None
) -> ConcatTable:
    """concat.json: per condition, variant, k and seed the concatenation scores, and summaries;
    baselines and joined (the joined condition, its control) from the study's config.

    Scores are on test + validation pooled (per split in each run's study.json). BLEU(k)/BLEU(1)
    is taken per seed, then summarized; "differences" holds every variant minus each baseline
    (row E's two absolute encodings: a condition may leave one of them undertrained) within a
    condition, per k, paired by seed (BLEU, length ratio, BLEU(k)/BLEU(1)), a pair of baselines
    once; "joined_minus_all" the same for each variant trained on joined lines minus its control.
    """
    rows = pooled_runs(records)
    summary = []
    groups: dict[tuple, list[ConcatRun]] = {}
    for row in rows:
        groups.setdefault((row.condition, row.variant, row.k), []).append(row)
    for (condition, variant, k), group in sorted(groups.items()):
        summary.append(
            ConcatSummary(
                condition, variant, k, sorted(r.seed for r in group), group[0].lines,
                group[0].left_out,
                **{
                    key: interval([getattr(r, key) for r in group])
                    for key in ("bleu", "chrf", "bp", "length_ratio", "bleu_ratio_to_k1")
                },
            )
        )  # fmt: skip
    differences, remedy = concat_comparisons(groups, baselines, joined)
    return ConcatTable(
        splits=list(CONCAT_SPLITS),
        ks=list(KS),
        **SEARCH,
        runs=sorted(rows, key=lambda r: (r.condition, r.variant, r.k, r.seed)),
        summary=summary,
        differences=differences,
        joined_minus_all=remedy,
    )


def concat_markdown(table: ConcatTable) -> str:
    """concat.md: per condition and variant, the scores at each k (mean ± std over seeds)."""
    lines = [
        f"# Concatenation test: {' + '.join(table.splits)} lines joined k at a time",
        "",
        "sacreBLEU, chrF, brevity penalty (BP), hypothesis/reference length ratio and "
        "BLEU(k)/BLEU(1), mean ± std over seeds [95% interval]; beam "
        f"{table.beam}, alpha {table.lenpen}, last checkpoint.",
        "",
        "| condition | variant | k | lines (left out) | seeds | BLEU | chrF | BP | length ratio "
        "| BLEU(k)/BLEU(1) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines[4:4] = survivor_lines(table)
    for row in table.summary:
        lines.append(
            f"| {row.condition} | {row.variant} | {row.k} | {row.lines} ({row.left_out}) "
            f"| {', '.join(map(str, row.seeds))} | {cell(row.bleu)} | {cell(row.chrf)} "
            f"| {cell(row.bp, 3)} | {cell(row.length_ratio, 3)} "
            f"| {cell(row.bleu_ratio_to_k1, 3)} |"
        )
    lines += difference_lines(table.differences) + remedy_lines(table.joined_minus_all)
    return "\n".join(lines) + "\n"


def difference_lines(differences: list[ConcatDifference]) -> list[str]:
    """concat.md's tables of each variant minus each baseline, per condition and k."""
    lines: list[str] = []
    baseline = None
    for diff in differences:
        if diff.baseline != baseline:
            baseline = diff.baseline
            lines += [
                "",
                f"## Each variant minus {baseline}, per condition and k",
                "",
                "Paired by seed over the seeds both ran, with the 95% t-interval (Welch over all "
                "seeds where fewer than two are shared); Holm p: the t-test's p adjusted by Holm "
                "within the family of every variant at one condition and k, per column. "
                + POWER_NOTE
                + " "
                + EQUIVALENCE_NOTE,
                "",
                "| condition | variant | k | seeds | Δ BLEU | Δ length ratio | Δ BLEU(k)/BLEU(1) "
                f"| 80% power detects (Δ BLEU) | {EQUIVALENCE_HEADER} |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
        lines.append(
            f"| {diff.condition} | {diff.variant} | {diff.k} "
            f"| {seeds_cell(diff.bleu)} | {signed_cell(diff.bleu)} "
            f"| {signed_cell(diff.length_ratio, 3)} "
            f"| {signed_cell(diff.bleu_ratio_to_k1, 3)} | {power_cell(diff.power)} "
            f"| {equivalence_cell(diff.equivalence)} |"
        )
    return lines


def remedy_lines(remedy: list[Remedy]) -> list[str]:
    """concat.md's table of joined minus all, per variant and k (Variš & Bojar's remedy)."""
    if not remedy:
        return []
    lines = [
        "",
        "## Trained on joined lines minus trained on single sentences, per variant and k",
        "",
        "What the joined condition (Variš & Bojar's remedy) gives back, paired by seed as "
        "above (Holm within each k); what is left of the drop under it is what the position "
        "encoding owes. BLEU joined / all: each seed's joined BLEU over its all-lengths "
        "control's at that k (the ratio to the control), mean ± std [95% interval]. "
        + EQUIVALENCE_NOTE,
        "",
        "| variant | k | seeds | BLEU joined / all | Δ BLEU | Δ length ratio "
        f"| Δ BLEU(k)/BLEU(1) | 80% power detects (Δ BLEU) | {EQUIVALENCE_HEADER} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for diff in remedy:
        lines.append(
            f"| {diff.variant} | {diff.k} | {seeds_cell(diff.bleu)} "
            f"| {cell(diff.bleu_over_control, 3)} "
            f"| {signed_cell(diff.bleu)} | {signed_cell(diff.length_ratio, 3)} "
            f"| {signed_cell(diff.bleu_ratio_to_k1, 3)} | {power_cell(diff.power)} "
            f"| {equivalence_cell(diff.equivalence)} |"
        )
    return lines


SURVIVOR_COLUMNS = (
    ("bleu", "Δ BLEU", 2),
    ("length_ratio", "Δ length ratio", 3),
    ("bleu_ratio_to_k1", "Δ BLEU(k)/BLEU(1)", 3),
    ("equivalence", f"Δ BLEU within ±{EQUIVALENCE_MARGIN:g}", 2),
)


def survivor_lines(table: ConcatTable) -> list[str]:
    """concat.md's summary: which differences and equivalences survive Holm, per table."""
    groups = [
        (
            f"each variant minus {baseline}, per condition and k",
            [d for d in table.differences if d.baseline == baseline],
            lambda d: f"{d.condition} {d.variant} at k = {d.k}",
        )
        for baseline in dict.fromkeys(d.baseline for d in table.differences)
    ]
    if table.joined_minus_all:
        groups.append(
            (
                "joined minus all, per variant and k",
                table.joined_minus_all,
                lambda d: f"{d.variant} at k = {d.k}",
            )
        )
    if not groups:
        return []
    lines = ["**What survives Holm's correction** (the tables below). " + SURVIVORS_NOTE, ""]
    for title, diffs, label in groups:
        lines += [f"{title.capitalize()}:", "", *holm_survivors(diffs, label, SURVIVOR_COLUMNS), ""]
    return lines


def plot_bleu_vs_k(table: ConcatTable, path: Path, shown: Sequence[str]) -> None:
    """BLEU against k per variant, the band spanning the seeds; one panel per condition of shown
    that has runs."""
    conditions = [c for c in shown if any(r.condition == c for r in table.runs)]
    panels = max(len(conditions), 1)  # one above the other, one column wide
    fig, axes = figure(panels, 1, height_cm=5.5 * panels + 0.5, squeeze=False)
    axes = list(axes[:, 0])
    variants = sorted({r.variant for r in table.runs}, key=variant_rank)
    colours = variant_colours(variants)
    for ax, condition in zip(axes, conditions, strict=False):
        for variant in variants:
            rows = [r for r in table.runs if r.condition == condition and r.variant == variant]
            if not rows:
                continue
            ks = sorted({r.k for r in rows})
            bleus = [[r.bleu for r in rows if r.k == k] for k in ks]
            colour = colours[variant]
            ax.plot(ks, [sum(b) / len(b) for b in bleus], marker="o", color=colour, label=variant)
            ax.fill_between(
                ks, [min(b) for b in bleus], [max(b) for b in bleus], color=colour, alpha=0.2
            )
        ax.set_xticks(list(KS))
        ax.set_xlabel("k (sentences joined per line)")
        ax.set_ylabel("sacreBLEU (band: seeds' range)")
        ax.set_title(f"Concatenation test, trained on: {condition}")
        ax.legend(ncols=2)
    save(fig, path)
