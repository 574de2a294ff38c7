"""The study's report: Table 3 (E) extended, the concatenation test and length buckets.

``write_report`` turns every scored run of a record store into the tables, JSON and plots of a
report folder (docs/study.md); which conditions, baselines and runs there are it reads from the
study's config (studies/reported.py), named by the records' record.json or by --study.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from common.files import replaced_folder, write_json, write_text
from evaluation.compare import PAPER, compare, hypotheses, read_run, references, variant_names
from evaluation.plots import DifferenceBar, plot_differences
from evaluation.statistics import (
    EQUIVALENCE_MARGIN,
    add_holm,
    difference_over_seeds,
    equivalence,
    paired_equivalence,
    paired_power,
    power_statement,
    stdev,
    two_level_bootstrap,
)
from runs.run import Run
from studies.buckets import BucketTable, bucket_markdown, bucket_table, plot_bucket_ratio
from studies.cells import (
    DifferenceTest,
    cell,
    difference_p_cell,
    equivalence_cell,
    interval,
    interval_cell,
    p_cell,
    power_cell,
    seeds_cell,
)
from studies.compared import (
    BaselineDifference,
    Compared,
    ComparedDifference,
    ComparedVariant,
    PaperRowE,
    RowE,
    SeedDifference,
    StudyNote,
    Table3,
    VariantIntervals,
    VariantRow,
    shallow,
)
from studies.concat import ConcatTable, concat_markdown, concat_table, plot_bleu_vs_k
from studies.plan import SEARCH, STUDY_FILE, TABLE3_EVAL, StudyError
from studies.records import (
    StudyRecord,
    check_one_configuration,
    position_settings,
    retrain_command,
    scored_runs,
)
from studies.reported import Pair, ReportedStudy, load_reported
from studies.rows import from_json
from studies.tuning import Choice, read_choices

NOTE_FILE = "NOTE.md"  # a report folder's note by hand, quoted atop its README


@dataclass(frozen=True)
class RunRow:
    """One scored run in runs.json: its scores, where it trained and its train.py command."""

    condition: str
    variant: str
    seed: int
    step: int
    dev_ppl: float | None
    wall_seconds: float | None
    bleu: float
    chrf: float
    hardware: list[str]
    code: list[str]
    command: str


@dataclass(frozen=True)
class ScoredRuns:
    """runs.json: every scored run, the run folders left out, the plan's runs without a record."""

    runs: list[RunRow]
    unscored: list[str]
    missing: list[str]


@dataclass(frozen=True)
class Report(ScoredRuns):
    """What write_report wrote: runs.json's runs, Table 3 (None: no all-lengths run), the
    concatenation test and the length buckets."""

    table3: Table3 | None
    concat: ConcatTable
    buckets: BucketTable


def rates_of(records: list[StudyRecord], control: str) -> dict[str, float]:
    """Each variant's optim.lr_scale in the control condition's (all-lengths) runs; a variant at
    two rates is refused (its seeds would be pooled into one mean)."""
    rates: dict[str, dict[float, list[str]]] = {}
    for record in records:
        if record.condition == control:
            rate = float(Run(Path(record.run_dir)).config().optim.lr_scale)
            rates.setdefault(record.variant, {}).setdefault(rate, []).append(record.label)
    for variant, by_rate in rates.items():
        if len(by_rate) > 1:
            held = "; ".join(
                f"×{r:g}: {', '.join(labels)}" for r, labels in sorted(by_rate.items())
            )
            raise StudyError(
                f"{variant} is trained at {len(by_rate)} learning rates in one store ({held}): "
                "a variant's seeds are compared at one rate; keep the others in another store"
            )
    return {variant: next(iter(by_rate)) for variant, by_rate in rates.items()}


def chosen_rates(tuning: Path | Sequence[Path] | None) -> dict[str, Choice]:
    """Each variant's choice in tuning.json files (the retired `tune`'s, read_choices)."""
    return {} if not tuning else read_choices(tuning)


def rate_cell(row: VariantRow, checked: bool) -> str:
    """×rate, and against tuning.json's choice (at its budget) where one was given (checked)."""
    rate, chosen, steps = row.lr_scale, row.chosen_lr_scale, row.chosen_at
    text = "—" if rate is None else f"×{rate:g}"
    if not checked:
        return text
    if chosen is None:
        return f"{text} (none chosen yet)"
    word = "chosen" if row.chosen_final else "chosen so far"
    where = f" at {steps} steps" if steps else ""
    return f"{text} ({word}{where})" if chosen == rate else f"{text} (≠ {word} ×{chosen:g}{where})"


def provenance_line(runs: list[RunRow], key: str, what: str) -> str:
    """The report's line on the machines (key "hardware") or code ("code") its runs trained on.

    A run resumed on another machine or code counts under each; the runs with a segment from
    before segments.json recorded it are named.
    """
    counts: dict[str, int] = {}
    for run in runs:
        for name in getattr(run, key):
            counts[name] = counts.get(name, 0) + 1
    parts = [f"{name} ({n})" for name, n in sorted(counts.items()) if name != "unrecorded"]
    unrecorded = [
        f"{r.condition}/{r.variant}/seed-{r.seed}" for r in runs if "unrecorded" in getattr(r, key)
    ]
    if unrecorded:
        parts.append(
            f"unrecorded ({len(unrecorded)}: {', '.join(unrecorded)}, with a segment trained "
            f"before segments.json recorded its {key})"
        )
    return (
        f"Trained {what} (runs; one resumed on other {key} counts under each): {'; '.join(parts)}."
    )


def table3(
    records: list[StudyRecord],
    out: Path,
    resamples: int,
    study: ReportedStudy,
    rates: dict[str, float] | None = None,
    chosen: dict[str, Choice] | None = None,
) -> Table3 | None:
    """compare.json / compare.md of the control condition's runs, with the study's intervals.

    Per variant: dev PPL, sacreBLEU and chrF mean ± std and 95% interval over seeds; every
    variant minus the baseline and every variant minus learned, paired by seed (BLEU and chrF,
    each column a family with Holm-adjusted p), with the effect 80% power detects; row (E) with
    its equivalence test and two-level bootstrap (``row_e``); the steps of every run; each
    variant's learning rate (rates, from ``rates_of``) and, given tuning.json's choices
    (chosen), whether it is the chosen one. The baselines and row (E): the study's.
    """
    baseline, pair = study.baseline, study.row_e
    rates = rates_of(records, study.control) if rates is None else rates
    runs = [r for r in records if r.condition == study.control]
    if not runs:
        return None
    compared = Compared.from_json(
        compare([Path(r.run_dir) for r in runs], TABLE3_EVAL, out, resamples=resamples,
                baseline=baseline)
    )  # fmt: skip
    by_variant: dict[str, list[StudyRecord]] = {}
    for run in runs:
        by_variant.setdefault(run.variant, []).append(run)
    variants = [
        variant_row(row, by_variant.get(row.variant, []), rates, chosen or {})
        for row in compared.variants
    ]
    differences = paired_tests(compared.differences, by_variant, baseline)
    row = row_e(by_variant, resamples, pair) if pair else None
    in_family = [d for d in differences if (d.baseline, d.variant) == pair]
    if row and in_family:  # its Holm p within "each variant minus sinusoidal"
        row.bleu["p_holm"] = from_json(DifferenceTest, in_family[0].across_seeds).p_holm
    steps = sorted({r.step for r in runs})
    result = Table3(
        **shallow(compared) | {"variants": variants, "differences": differences},
        differences_to_learned=differences_to(by_variant, pair[1]) if pair else [],
        row_e=row,
        study=StudyNote(study.control, steps, len(steps) == 1, bool(chosen)),
    )
    write_json(out / "compare.json", asdict(result))
    write_text(out / "table3.md", table3_markdown(result))
    title = f"test BLEU, {', '.join(f'{s:,}' for s in steps)} steps, each at its rate"
    plot_differences(headline_bars(result), baseline, title, out / HEADLINE)
    write_text(out / GLANCE, glance_markdown(result))
    return result


HEADLINE = "bleu_minus_baseline.png"  # the report's one figure: the README shows it
GLANCE = "glance.md"  # the report's one table: the README shows it


@dataclass(frozen=True)
class GlanceRow:
    """One variant in the README's table: its finals, and its difference from the baseline."""

    variant: str
    seeds: int
    lr_scale: float
    dev_ppl: float
    bleu: float
    bleu_sd: float | None
    difference: float | None  # variant - baseline over paired seeds (None: the baseline)
    low: float | None
    high: float | None
    p_holm: float | None


def glance_rows(result: Table3) -> list[GlanceRow]:
    """The table's rows of a compare result (table3's), the highest BLEU first."""
    diffs = {d.variant: from_json(DifferenceTest, d.across_seeds) for d in result.differences}
    rows = []
    for v in result.variants:
        d = diffs.get(v.variant, DifferenceTest())
        rows.append(GlanceRow(
            v.variant, len(v.seeds), v.lr_scale, v.dev_ppl_mean, v.bleu_mean,
            v.bleu_std, d.difference, d.low, d.high, d.p_holm,
        ))  # fmt: skip
    return sorted(rows, key=lambda r: -r.bleu)


def glance_markdown(result: Table3) -> str:
    """The README's table: variant, seeds, rate, dev PPL, BLEU, and minus the baseline with
    its 95% interval and Holm p."""
    base = result.baseline
    lines = [
        f"| variant | seeds | rate | dev PPL | BLEU (mean ± SD) | minus {base} [95% CI] | Holm p |",
        "|---|---:|---|---:|---|---|---:|",
    ]
    for r in glance_rows(result):
        sd = "" if r.bleu_sd is None else f" ± {r.bleu_sd:.2f}"
        diff, p = "—", "—"
        if r.difference is not None:
            interval = "" if r.low is None else f" [{r.low:+.2f}, {r.high:+.2f}]"  # >= 2 seeds
            diff = f"{r.difference:+.2f}{interval}".replace("-", "−")
            p = "—" if r.p_holm is None else "< 0.001" if r.p_holm < 0.001 else f"{r.p_holm:.3f}"
        lines.append(f"| {r.variant} | {r.seeds} | ×{r.lr_scale:g} | {r.dev_ppl:.2f} "
                     f"| {r.bleu:.2f}{sd} | {diff} | {p} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def headline_bars(result: Table3) -> list[DifferenceBar]:
    """Each variant minus the baseline across seeds (paired t), as the headline draws it."""
    tests = [(d.variant, from_json(DifferenceTest, d.across_seeds)) for d in result.differences]
    return [
        DifferenceBar(variant, t.difference, t.low, t.high, len(t.seeds))
        for variant, t in tests
        if t.difference is not None
    ]


def variant_row(
    row: ComparedVariant,
    mine: list[StudyRecord],
    rates: dict[str, float],
    chosen: dict[str, Choice],
) -> VariantRow:
    """A Table 3 row: compare's, then intervals over seeds, steps, learning rate and its tuning
    choice."""
    choice = chosen.get(row.variant)
    return VariantRow(
        **shallow(row),
        intervals=VariantIntervals(
            dev_ppl=interval([r.dev_ppl for r in mine]),
            bleu=interval([r.test.bleu for r in mine]),
            chrf=interval([r.test.chrf for r in mine]),
            tok_bleu=interval([r.test.tok_bleu for r in mine]),
        ),
        steps_by_seed={str(r.seed): r.step for r in mine},
        lr_scale=rates.get(row.variant),
        position_settings=position_settings(mine[0]) if mine else [],
        chosen_lr_scale=None if choice is None else choice.lr_scale,
        chosen_at=None if choice is None else choice.max_steps,  # the grid's budget
        chosen_final=choice is not None and choice.complete,
    )


def paired_tests(
    differences: list[ComparedDifference], by_variant: dict[str, list[StudyRecord]], baseline: str
) -> list[BaselineDifference]:
    """Each variant minus the baseline: chrF by seed, the BLEU difference 80% power detects and
    its TOST at ±1 BLEU; chrF's and TOST's p Holm-adjusted within the family."""
    base = by_variant.get(baseline, [])
    rows = []
    for diff in differences:
        other = by_variant[diff.variant]
        bleu = scores_by_seed(base, "bleu"), scores_by_seed(other, "bleu")
        rows.append(
            BaselineDifference(
                **shallow(diff),
                chrf_across_seeds=difference_over_seeds(
                    scores_by_seed(base, "chrf"), scores_by_seed(other, "chrf")
                ),
                power=paired_power(*bleu),
                equivalence=asdict(paired_equivalence(*bleu)),
            )
        )
    add_holm([diff.chrf_across_seeds for diff in rows])
    add_holm([diff.equivalence for diff in rows])
    return rows


def scores_by_seed(runs: list[StudyRecord], key: str) -> dict[int, float]:
    """seed -> the Table 3 evaluation's key (bleu, chrf, tok_bleu) of each run."""
    return {r.seed: getattr(r.test, key) for r in runs}


def differences_to(by_variant: dict[str, list[StudyRecord]], baseline: str) -> list[SeedDifference]:
    """Each variant minus baseline by seed (sacreBLEU, chrF), each column one Holm family."""
    base = by_variant.get(baseline, [])
    if not base:
        return []
    diffs = []
    for variant, runs in sorted(by_variant.items()):
        if variant == baseline:
            continue
        bleu = scores_by_seed(base, "bleu"), scores_by_seed(runs, "bleu")
        chrf = scores_by_seed(base, "chrf"), scores_by_seed(runs, "chrf")
        diffs.append(
            SeedDifference(
                variant, baseline, difference_over_seeds(*bleu), difference_over_seeds(*chrf),
                paired_power(*bleu), asdict(paired_equivalence(*bleu)),
            )
        )  # fmt: skip
    add_holm([d.across_seeds for d in diffs])
    add_holm([d.chrf_across_seeds for d in diffs])
    add_holm([d.equivalence for d in diffs])
    return diffs


def row_e(by_variant: dict[str, list[StudyRecord]], resamples: int, pair: Pair) -> RowE | None:
    """Row (E), pair's second minus its first (learned minus sinusoidal) by seed: t-interval,
    TOST at ±1 BLEU, power, two-level bootstrap.

    The bootstrap (resamples > 0) resamples the shared seeds, then each seed's test sentences,
    from the runs' Table 3 hypotheses; the paper's single-run numbers stand beside.
    """
    base_runs, other_runs = by_variant.get(pair[0], []), by_variant.get(pair[1], [])
    if not base_runs or not other_runs:
        return None
    base, other = scores_by_seed(base_runs, "bleu"), scores_by_seed(other_runs, "bleu")
    seeds = sorted(set(base) & set(other))
    diffs = [other[s] - base[s] for s in seeds]
    bootstrap = None
    if resamples > 0 and seeds:
        names = variant_names()
        read = {
            (r.variant, r.seed): read_run(Path(r.run_dir), TABLE3_EVAL, names)
            for r in base_runs + other_runs
            if r.seed in seeds
        }
        refs = references(read[pair[0], seeds[0]], None)
        bootstrap = two_level_bootstrap(
            {s: hypotheses(read[pair[0], s]) for s in seeds},
            {s: hypotheses(read[pair[1], s]) for s in seeds},
            refs,
            resamples,
        )
    paper_base, paper_other = PAPER[pair[0]][1], PAPER[pair[1]][1]
    return RowE(
        variant=pair[1],
        baseline=pair[0],
        seeds=seeds,
        bleu=difference_over_seeds(base, other),
        tok_bleu=difference_over_seeds(
            scores_by_seed(base_runs, "tok_bleu"), scores_by_seed(other_runs, "tok_bleu")
        ),
        equivalence=equivalence(diffs),
        power=power_statement(stdev(diffs), len(diffs)),
        two_level_bootstrap=bootstrap,
        paper=PaperRowE(
            **{pair[0]: paper_base, pair[1]: paper_other},
            difference=round(paper_other - paper_base, 2),
            note="tokenized BLEU on newstest2013, one run each, Vaswani et al. 2017 Table 3",
        ),
    )


def table3_markdown(result: Table3) -> str:
    """Table 3 (E) extended: per variant mean ± std [95% interval] and the paired differences."""
    lines = [
        f"# Table 3 (E) extended: test_2016_flickr, beam {SEARCH['beam']}, alpha "
        f"{SEARCH['lenpen']}, last checkpoint",
        "",
        "| variant | seeds | steps | lr | dev PPL | sacreBLEU | chrF | tok. BLEU | paper PPL "
        "| paper BLEU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result.variants:
        iv = row.intervals
        steps = ", ".join(sorted(set(map(str, row.steps_by_seed.values()))))
        paper_ppl = "—" if row.paper_ppl is None else f"{row.paper_ppl:.2f}"
        paper_bleu = "—" if row.paper_bleu is None else f"{row.paper_bleu:.1f}"
        rate = rate_cell(row, result.study.rates_checked_against_tuning)
        settings = ", ".join(row.position_settings)
        variant = f"{row.variant} ({settings})" if settings else row.variant
        lines.append(
            f"| {variant} | {', '.join(map(str, row.seeds))} | {steps} | {rate} "
            f"| {cell(iv.dev_ppl)} | {cell(iv.bleu)} | {cell(iv.chrf)} "
            f"| {cell(iv.tok_bleu)} | {paper_ppl} | {paper_bleu} |"
        )
    lines += [
        "",
        "mean ± std over seeds [95% t-interval of the mean]; dev PPL per subword at the last "
        "step; lr: optim.lr_scale (×1 = the paper's schedule), against the rate `study.py tune` "
        "chose on dev (at the budget of the grid that chose it) where its tuning.json was given "
        "(--tuning); in brackets after a variant, "
        "the position settings its runs trained with other than configs/position's (SHAPE's "
        f"K: max_shift). {result.paper_note}",
    ]
    lines += difference_section(result.baseline, result.differences, True)
    second = result.differences_to_learned
    lines += difference_section(second[0].baseline if second else "", second, False)
    if result.row_e:
        lines += row_e_markdown(result.row_e)
    study = result.study
    same = "every run" if study.equal_steps else "NOT every run (steps differ)"
    lines += ["", f"Steps: {', '.join(map(str, study.steps))} ({same} at one budget)."]
    return "\n".join(lines) + "\n"


def difference_section(
    baseline: str, diffs: list[BaselineDifference] | list[SeedDifference], bootstrap: bool
) -> list[str]:
    """One family's table: each variant minus baseline by seed, p and Holm p by each interval;
    bootstrap: with compare's paired bootstrap (BaselineDifference)."""
    if not diffs:
        return []
    lines = [
        "",
        f"## Each variant minus {baseline}, paired by seed",
        "",
        "p: two-sided t-test over seeds; Holm: adjusted within this family (one per column). "
        "80% power: the difference the seeds detect, from the SD of the paired differences. "
        f"Equivalence: two one-sided paired t-tests of -{EQUIVALENCE_MARGIN:g} < Δ sacreBLEU < "
        f"+{EQUIVALENCE_MARGIN:g} "
        "(TOST, α 0.05; shown where its Holm p < 0.05), and the smallest margin the 90% "
        'interval shows; without it, a difference not shown is not "no difference".',
        "",
        "| variant | seeds | Δ sacreBLEU [95%] | p (Holm) | Δ chrF [95%] | p (Holm) "
        f"| 80% power detects | equivalence ±{EQUIVALENCE_MARGIN:g}: p (Holm), smallest margin |"
        + (" bootstrap Δ BLEU [95%], p (Holm) |" if bootstrap else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|" if bootstrap else ""),
    ]
    for diff in diffs:
        bleu, chrf = diff.across_seeds, diff.chrf_across_seeds
        line = (
            f"| {diff.variant} | {seeds_cell(bleu)} | {interval_cell(bleu)} "
            f"| {difference_p_cell(bleu)} | {interval_cell(chrf)} | {difference_p_cell(chrf)} "
            f"| {power_cell(diff.power)} | {equivalence_cell(diff.equivalence)} |"
        )
        if bootstrap:
            boot = diff.bootstrap
            line += (
                " — |"
                if not boot
                else (
                    f" {boot.difference:+.2f} [{boot.low:+.2f}, {boot.high:+.2f}], "
                    f"p {p_cell(boot.p_value, boot.p_holm, 'n/a')} (seed {boot.seeds[0]} vs "
                    f"{boot.seeds[1]}) |"
                )
            )
        lines.append(line)
    return lines


def row_e_markdown(row: RowE) -> list[str]:
    """Row (E): the t-interval, the two-level bootstrap, TOST at ±margin, power and the paper."""
    eq, power = row.equivalence, row.power
    boot, paper = row.two_level_bootstrap, row.paper
    title = f"{row.variant} minus {row.baseline}"
    lines = ["", f"## Row (E): {title}, paired by seed ({', '.join(map(str, row.seeds))})", ""]
    lines += ["| measure | value |", "|---|---|"]
    bleu = f"{interval_cell(row.bleu)}, p {difference_p_cell(row.bleu)}"
    lines.append(f"| Δ sacreBLEU, t-interval over seeds [95%], p | {bleu} |")
    if boot:
        lines.append(
            f"| Δ sacreBLEU, two-level bootstrap (seeds, then test sentences; "
            f"{boot.resamples} resamples) [95%] | {boot.difference:+.2f} "
            f"[{boot.low:+.2f}, {boot.high:+.2f}] |"
        )
    lines.append(f"| Δ tok. BLEU, t-interval over seeds [95%] | {interval_cell(row.tok_bleu)} |")
    if eq.p is not None:
        verdict = "equivalent" if eq.equivalent else "equivalence not shown"
        lines += [
            f"| Equivalence at ±{eq.margin:.1f} BLEU (two one-sided paired t-tests, α "
            f"{eq.alpha}) | p {eq.p:.3f}: {verdict} |",
            f"| Smallest margin shown equivalent (90% interval [{eq.ci_low:+.2f}, "
            f"{eq.ci_high:+.2f}]) | ±{eq.smallest_margin:.2f} BLEU |",
        ]
    if power.detectable is not None:
        lines.append(
            f"| 80% power (α {power.alpha}, SD of paired differences {power.sd:.2f}) "
            f"| detects ±{power.detectable:.2f} BLEU with {power.n} seeds; ±1.0 needs "
            f"{power.seeds_for_one} |"
        )
    lines.append(
        f"| Paper: {paper.note} | {getattr(paper, row.variant)} vs "
        f"{getattr(paper, row.baseline)} ({paper.difference:+.1f}) |"
    )
    if boot:
        lines += [
            "",
            "The t-interval reads the spread over seeds on this one test set; the two-level "
            "bootstrap adds which test sentences were drawn, but a resample of "
            f"{len(boot.seeds)} seeds keeps only (n - 1)/n of their variance and takes few "
            "distinct values, so with few seeds it understates the seed spread.",
        ]
    return lines


def missing_runs(records: list[StudyRecord], study: ReportedStudy) -> list[str]:
    """Labels of the study's planned finals (its config's conditions, variants and seeds) with
    no scored record."""
    done = {(r.condition, r.variant, r.seed) for r in records}
    return [f"{c}/{v}/seed-{s}" for c, v, s in study.plan if (c, v, s) not in done]


def note_lines(out: Path) -> list[str]:
    """The README's opening note: NOTE.md of the report folder (written by hand, e.g. why a
    study was superseded; the report never writes it), quoted whole."""
    path = out / NOTE_FILE
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8").strip()
    return [*(f"> {line}".rstrip() for line in text.splitlines()), ""]


def pictures_line(folder: Path, out: Path) -> str:
    """The README's line on the pictures of trained runs (made apart: they need the weights)."""
    if (folder / "pictures.md").is_file():
        return (
            "- [What the trained models do with positions](pictures.md) (pictures.json, "
            "position_similarity.png, attention_distance.png)"
        )
    return (
        "- Pictures of trained runs: not made yet (`python scripts/study.py pictures --runs "
        f"<run folders> --out {out}`; they read the weights, which the record store does not keep)"
    )


def write_extrapolation(
    records: list[StudyRecord], out: Path, study: ReportedStudy
) -> tuple[ConcatTable, BucketTable]:
    """The concatenation test and the per-bucket table (short vs all), with their plots; the
    conditions of each analysis and the baselines: the study's."""
    concat = concat_table(records, study.baselines[:2], study.concat)
    write_json(out / "concat.json", asdict(concat))
    write_text(out / "concat.md", concat_markdown(concat))
    shown = study.concat[::-1] if study.concat else (study.control,)  # the control first
    plot_bleu_vs_k(concat, out / "bleu_vs_k.png", shown)
    # without a buckets analysis, every row is empty: buckets.md says so
    buckets = bucket_table(records, study.buckets or ("", ""), study.baseline)
    write_json(out / "buckets.json", asdict(buckets))
    write_text(out / "buckets.md", bucket_markdown(buckets))
    if buckets.rows:
        plot_bucket_ratio(buckets, out / "bucket_ratio.png")
    return concat, buckets


def readme_lines(folder: Path, runs: ScoredRuns, out: Path) -> list[str]:
    """The report's README (written in folder, read in out): its note, links to each table,
    and where the runs came from."""
    scored, missing, unscored = runs.runs, runs.missing, runs.unscored
    return [
        f"# The position-encoding study: {len(scored)} scored runs",
        "",
        *note_lines(folder),
        f"- [Table 3 (E) extended](table3.md) (compare.json, compare.md, {GLANCE}, {HEADLINE}, "
        "bleu_by_variant.png)",
        "- [Concatenation test](concat.md) (concat.json, bleu_vs_k.png)",
        "- [Short vs all lengths per bucket](buckets.md) (buckets.json, bucket_ratio.png)",
        pictures_line(folder, out),
        "",
        f"Missing runs of the plan ({len(missing)}){listed(missing)}.",
        f"Unfinished or unscored run folders ({len(unscored)}){listed(unscored)}.",
        "",
        provenance_line(scored, "hardware", "on")
        + " One seed on two machines agrees only up to float32 rounding, then drifts apart.",
        provenance_line(scored, "code", "with"),
        "",
        "Each run's `train.py` command, which composes to the config it trained with (paths "
        "and Multi30k's source aside), is its `command` in runs.json; e.g. "
        f"`{scored[0].command}`."
        if scored
        else "",
    ]


def listed(labels: list[str]) -> str:
    """': a, b' after a README line's count, or nothing where there are none."""
    return f": {', '.join(labels)}" if labels else ""


def write_report(
    root: Path,
    out: Path,
    resamples: int = 1000,
    echo: Callable[[str], None] = print,
    tuning: Path | Sequence[Path] | None = None,
    study: str | None = None,
) -> Report:
    """Write a report folder: the tables (Markdown + JSON) and plots of every scored run of the
    store root; tuning: tuning.json files whose chosen rates the runs' rates are checked
    against; study: the configs/study name of a store whose records have no record.json."""
    if resamples < 0:  # before anything is written (a negative count would mean no bootstrap)
        raise StudyError(f"--resamples {resamples}: pass 0 (no bootstrap) or more")
    if not any(Path(root).glob(f"**/{STUDY_FILE}")):
        raise StudyError(
            f"no scored runs under {root} (no {STUDY_FILE}, the records the German study's "
            "tools kept): pass --root such a store; a store scripts/run_study.py wrote is "
            "reported by `python scripts/run_study.py <study> --report`"
        )
    chosen = chosen_rates(tuning)
    reported = load_reported(root, study)
    records, unscored = scored_runs(root, reported.conditions)
    if not records:
        raise StudyError(
            f"no scored runs of {reported.name}'s conditions ({', '.join(reported.conditions)}) "
            f"under {root}: pass --root its record store"
        )
    rates_of(records, reported.control)  # a variant at two rates is refused before any write
    check_one_configuration(records)  # as is a store of runs trained with other settings
    out = Path(out)
    with replaced_folder(out) as folder:  # swapped in whole: a kill leaves the old report
        files = ReportFiles(reported, folder, out, resamples, echo, chosen)
        return write_report_files(records, unscored, files)


@dataclass(frozen=True)
class ReportFiles:
    """Where and how write_report writes: the study, the folder (out once all are written)."""

    study: ReportedStudy
    folder: Path
    out: Path
    resamples: int
    echo: Callable[[str], None]
    chosen: dict[str, Choice]


def write_report_files(
    records: list[StudyRecord], unscored: list[str], files: ReportFiles
) -> Report:
    """write_report's files into files.folder, which becomes files.out once all are written."""
    study, folder, out, echo = files.study, files.folder, files.out, files.echo
    rates = rates_of(records, study.control)
    missing = missing_runs(records, study)
    echo(f"report: {len(records)} scored runs; {len(missing)} planned runs missing")
    if unscored:
        echo(
            f"report: {len(unscored)} run folders left out, unfinished or not scored at their "
            f"last step with the study's search {SEARCH}: {', '.join(unscored)}"
        )
    table = table3(records, folder, files.resamples, study, rates=rates, chosen=files.chosen)
    if table:  # where it will be, not where it was written
        table = replace(table, out_dir=str(out))
        write_json(folder / "compare.json", asdict(table))
    concat, buckets = write_extrapolation(records, folder, study)
    rows = [run_row(r, study.experiments[r.condition]) for r in records]
    runs = ScoredRuns(rows, unscored, missing)
    write_json(folder / "runs.json", asdict(runs))
    write_text(folder / "README.md", "\n".join(readme_lines(folder, runs, out)) + "\n")
    if table:
        echo(table3_markdown(table))
    echo(f"written: {out}/ (README.md, table3.md, compare.json, concat.json, buckets.json, plots)")
    return Report(**shallow(runs), table3=table, concat=concat, buckets=buckets)


def run_row(record: StudyRecord, experiment: Sequence[str]) -> RunRow:
    """A scored run's line of runs.json, with the train.py command that trains it again."""
    return RunRow(
        record.condition, record.variant, record.seed, record.step, record.dev_ppl,
        record.wall_seconds, record.test.bleu, record.test.chrf, record.hardware, record.code,
        retrain_command(record, experiment),
    )  # fmt: skip
