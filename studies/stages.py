"""The stages of a declared study, in order: settings, grid, check, finals (studies/pipeline.py).

Each stage is a function of the study run and the earlier stages' choices; a key is one
(condition, variant) pair. A stage returns what it decided so far: a pair whose choice is not
complete waits, and the stages after it leave that pair out until a later call.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from omegaconf import OmegaConf

from common.errors import UserError
from common.files import replaced_folder, write_json, write_text
from data.corpus import load_split
from evaluation.plots import RateCurve, plot_differences, plot_rate_curves
from studies.answer import Difference, Final, answer, answer_markdown
from studies.finals import FinalScores, is_scored, score_final, wanted_evaluations
from studies.pipeline import StudyRun, choice_line, dev_results
from studies.protocol import StudySpec
from studies.rules import Choice, check_candidates, check_rule, choose_on_grid, choose_value
from studies.store import Point, Record, record_dir, work_dir

Key = tuple[str, str]  # (condition, variant)


def settle(
    run: StudyRun,
    start: dict[Key, Sequence[float]],
    points_of: Callable[[Key, Sequence[float]], list[Point]],
    decide: Callable[[Key, dict[Point, Record]], Choice],
) -> dict[Key, Choice]:
    """Train each key's points at its rates, decide, and go on while a rule asks for more rates."""
    rates = {k: tuple(sorted(v)) for k, v in start.items()}
    choices: dict[Key, Choice] = {}
    for _ in range(run.study.grid.edge_steps + 2):
        points = {k: points_of(k, rates[k]) for k in rates}
        records = run.ensure([p for ps in points.values() for p in ps])
        choices = {k: decide(k, {p: records[p] for p in points[k] if p in records}) for k in rates}
        grow = {k: c.required for k, c in choices.items() if not set(c.required) <= set(rates[k])}
        if not grow:
            break
        rates.update(grow)
    return choices


def settings_stage(run: StudyRun) -> dict[Key, tuple[str, ...]]:
    """Each tuned pair's chosen settings: () without a `choose`; left out until chosen."""
    study, chosen = run.study, {}
    for condition, variant in study.tuned_pairs():
        spec = study.variants[variant].choose
        if spec is None:
            chosen[(condition, variant)] = ()
            continue
        points = {
            value: [
                Point(
                    "settings",
                    condition,
                    variant,
                    spec.rate,
                    seed,
                    study.grid.steps,
                    (f"{spec.key}={value}",),
                )
                for seed in study.grid.seeds
            ]  # fmt: skip
            for value in spec.values
        }
        records = run.ensure([p for ps in points.values() for p in ps])
        means = {
            value: sum(r.dev_ppl or float("inf") for r in rs) / len(rs)
            for value, ps in points.items()
            if len(rs := [records[p] for p in ps if p in records]) == len(ps)
        }
        if (best := choose_value(spec.values, means)) is not None:
            chosen[(condition, variant)] = (f"{spec.key}={best}",)
            run.say(f"study: settings {condition}/{variant}: {spec.key}={best}")
    return chosen


def grid_stage(run: StudyRun, settings: dict[Key, tuple[str, ...]]) -> dict[Key, Choice]:
    """Each pair's rate by the grid rule at the grid's budget and seeds."""
    grid = run.study.grid

    def points_of(key: Key, rates: Sequence[float]) -> list[Point]:
        return [
            Point("grid", *key, rate, seed, grid.steps, settings[key])
            for rate in rates
            for seed in grid.seeds
        ]

    def decide(key: Key, records: dict[Point, Record]) -> Choice:
        return choose_on_grid(dev_results(records), grid.rates, grid.seeds, grid.edge_steps)

    return settle(run, {k: grid.rates for k in settings}, points_of, decide)


def check_stage(
    run: StudyRun, settings: dict[Key, tuple[str, ...]], grid: dict[Key, Choice]
) -> dict[Key, Choice]:
    """Each pair's final rate by the check rule at the final budget and the check's seeds."""
    study = run.study
    ready = {k: c for k, c in grid.items() if c.complete and c.rate is not None}

    def points_of(key: Key, rates: Sequence[float]) -> list[Point]:
        return [
            Point("check", *key, rate, seed, study.final.steps, settings[key])
            for rate in rates
            for seed in study.check.seeds
        ]

    def decide(key: Key, records: dict[Point, Record]) -> Choice:
        return check_rule(ready[key], dev_results(records), study.check.within, study.check.seeds)

    start = {
        k: [c.rate, *check_candidates(c, c.rate, study.check.within)] for k, c in ready.items()
    }
    return settle(run, start, points_of, decide)


def final_points(
    run: StudyRun, settings: dict[Key, tuple[str, ...]], check: dict[Key, Choice]
) -> list[Point]:
    """Every final of every condition whose rate is decided: the check's choice, or that of the
    condition it reuses rates from (rates_from, a stated deviation)."""
    study, points = run.study, []
    for condition, spec in study.conditions.items():
        source = spec.rates_from or condition
        for variant in study.condition_variants(condition):
            choice = check.get((source, variant))
            if choice is None or not choice.complete or choice.rate is None:
                continue
            tuned = settings[(source, variant)]
            points += [
                Point("final", condition, variant, choice.rate, seed, study.final.steps, tuned)
                for seed in study.final_seeds(condition, variant)
            ]
    return points


def recorded_finals(run: StudyRun, condition: str, variant: str, besides: Sequence[int]) -> int:
    """How many finals of a pair the store already records, beside the check's seeds."""
    folder = Path(run.results) / run.study.name / "final" / "runs" / condition / variant
    seeds = {int(p.parent.name.split("-")[1]) for p in folder.glob("**/seed-*/record.json")}
    return len(seeds - set(besides))


def planned_estimate(run: StudyRun, grid: dict[Key, Choice], check: dict[Key, Choice]) -> list[str]:
    """Lines of the dry run: the points to train now, and the later stages' most."""
    study, planned = run.study, run.planned
    waiting = [k for k in grid if not (k in check and check[k].complete)]
    later_check = sum(
        3 * len(study.check.seeds) for k in waiting if not grid[k].complete
    )  # the grid's choice and up to two neighbours, when the grid is still open
    later_final = sum(  # the check's seeds at the chosen rate are finals already
        len(study.final_seeds(c, v))
        - (0 if spec.rates_from else len(study.check.seeds))
        - recorded_finals(run, c, v, study.check.seeds if not spec.rates_from else ())
        for c, spec in study.conditions.items()
        for v in study.condition_variants(c)
        if (spec.rates_from or c, v) in waiting
    )
    extend = study.final.extend
    later_extend = len(extend.seeds) * len(waiting) if extend.steps else 0
    steps = sum(p.steps for p in planned)
    steps += (later_check + later_final) * study.final.steps
    steps += later_extend * ((extend.steps or 0) - study.final.steps)
    hours = steps * run.cost / 3600
    lines = [f"to train now: {p.label}" for p in planned]
    lines.append(
        f"study {study.name}: {len(planned)} runs to train now; after them at most "
        f"{later_check} check, {later_final} final and {later_extend} extended runs wait on "
        f"choices not made yet; about "
        f"{hours:.1f} CPU-hours at {run.cost:.3f} CPU-s a step"
    )
    return lines


def reference_loader(run: StudyRun) -> Callable[[Point, str], list[str] | None]:
    """A point's test references as its finals were scored (None, said once: not loadable)."""
    loaded: dict[str, list[str] | None] = {}

    def references(point: Point, split: str) -> list[str] | None:
        data = run.wanted(point)["data"]
        key = json.dumps([split, data], sort_keys=True, default=str)
        if key not in loaded:
            try:
                loaded[key] = list(load_split(OmegaConf.create(data), split)["tgt"])
            except (UserError, OSError, ValueError) as e:
                loaded[key] = None
                run.say(
                    f"study: the {split} references of {point.label} cannot be loaded "
                    f"({str(e).splitlines()[0] if str(e) else type(e).__name__}): its BLEU and "
                    "chrF are not recomputed; pass the data it was scored on (-- data.path=...)"
                )
        return loaded[key]

    return references


def score_finals(run: StudyRun, finals: dict[Point, Record]) -> dict[Point, FinalScores]:
    """Every recorded final scored on the test sets (not in a dry run: listed as to score)."""
    scored, references = {}, reference_loader(run)
    for point in finals:
        folder = record_dir(run.results, run.study, point)
        if not run.trains(point.stage) and not is_scored(run.study, folder):
            run.say(f"to score: {point.label}")
            continue
        where = work_dir(run.work, run.study, point)
        scored[point] = score_final(
            run.study, where, folder, run.work / run.study.name, run.say,
            functools.partial(references, point),
        )  # fmt: skip
    return scored


def extend_stage(run: StudyRun, scored: dict[Point, FinalScores]) -> dict[Point, Record]:
    """The finals of final.extend.seeds trained on to final.extend.steps, each continuing its
    scored final run (a copy of its folder: the schedule does not depend on max_steps)."""
    extend = run.study.final.extend
    if not extend.steps:
        return {}
    points = {
        replace(p, stage="extend", steps=extend.steps): p for p in scored if p.seed in extend.seeds
    }
    for point, final in points.items():
        target = work_dir(run.work, run.study, point)
        if not target.exists() and run.trains(point.stage):
            shutil.copytree(
                work_dir(run.work, run.study, final), target, ignore=shutil.ignore_patterns("eval")
            )
    return run.ensure(list(points))


def run_stages(run: StudyRun) -> dict:
    """Every stage in order, as far as the records allow; what each decided."""
    settings = settings_stage(run)
    grid = grid_stage(run, settings)
    check = check_stage(run, settings, grid)
    finals = run.ensure(final_points(run, settings, check))
    scored = score_finals(run, finals)
    extended = extend_stage(run, scored)
    scored_extended = score_finals(run, extended)
    kept = [
        Final(point, records[point], scores)
        for records, group in ((finals, scored), (extended, scored_extended))
        for point, scores in group.items()
    ]
    return {"settings": settings, "grid": grid, "check": check, "finals": kept}


def answer_checkpoints(study: StudySpec) -> list[str]:
    """The checkpoints an answer compares: the last, then the average where declared."""
    return [c for _, c in wanted_evaluations(study)[: 1 + bool(study.final.average_last)]]


def spent_hours(records: Sequence[Record]) -> float:
    """CPU-hours the records' trainings took, each training once (a check run that is also a
    final is one training)."""
    seen = {}
    for r in records:
        key = (r.condition, r.variant, tuple(r.settings), r.lr_scale, r.steps, r.seed)
        seen[key] = r.cpu_seconds
    return sum(seen.values()) / 3600


def status_markdown(run: StudyRun, decided: dict, committed: str, declared: str) -> str:
    """results/<study>/summary/README.md: each stage's choices so far, its records and the
    CPU-hours spent, then the answer."""
    study = run.study
    lines = [
        f"# Study {study.name}",
        "",
        study.description.strip(),
        "",
        f"Declared in `{declared}`, committed in {committed}. Written by "
        f"`python scripts/run_study.py {by_name(study, declared)}`; each stage's records are in "
        f"`results/{study.name}/<stage>/runs/`.",
        "",
        f"CPU-hours spent so far: {spent_hours(run.records()):.1f}.",
        "",
    ]
    moves = moved(decided["grid"], decided["check"])
    for stage in ("grid", "check"):
        lines += [f"## {stage}", ""]
        for key, choice in decided[stage].items():
            line = f"- {choice_line('/'.join(key), choice)}"
            if stage == "check" and key in moves:
                line += f"; moved from the grid's ×{moves[key]:g}"
            lines.append(line)
        if decided[stage] and (Path(run.results) / study.name / stage).is_dir():  # drawn
            lines += ["", f"![mean dev PPL against the rate]({stage}_{RATE_FIGURE})"]
        lines.append("")
    lines += stage_lines(run)
    reused = [
        f"{c} reuses {s.rates_from}'s rates" for c, s in study.conditions.items() if s.rates_from
    ]
    if reused:
        lines += ["Deviation: " + "; ".join(reused) + " (declared, not tuned).", ""]
    if line := analyses_line(study):
        lines += [line, ""]
    lines += ["## The answer", "", *left_out_lines(study, recorded_final_points(run), decided)]
    if decided["finals"]:
        checkpoints = answer_checkpoints(study)
        result = answer(study, decided["finals"], checkpoints)
        lines += answer_markdown(result, checkpoints, study.statistics.equivalence_margin)
        for name, _, _ in headlines(study, result):
            lines += ["", f"![each variant minus {study.statistics.baselines[0]}]({name})"]
    else:
        lines.append("No final is scored yet.")
    return "\n".join(lines) + "\n"


def moved(grid: dict[Key, Choice], check: dict[Key, Choice]) -> dict[Key, float]:
    """{pair: the grid's rate} of each pair whose rate the check moved at the final budget."""
    return {
        key: grid[key].rate
        for key, choice in check.items()
        if choice.complete and choice.rate is not None and grid[key].rate != choice.rate
    }


def left_out_lines(study: StudySpec, finals: Sequence[Record], decided: dict) -> list[str]:
    """What the answer says of the recorded finals it leaves out: those of a pair whose check
    has not decided, and those at a rate other than the check's choice (the finals at the
    chosen rate are the next step)."""
    answered = {(f.point.condition, f.point.variant) for f in decided["finals"]}
    undecided, other = set(), {}
    for record in finals:
        key = (record.condition, record.variant)
        spec = study.conditions.get(record.condition)
        choice = decided["check"].get(((spec and spec.rates_from) or record.condition, key[1]))
        if choice is not None and choice.complete and choice.rate is not None:
            if record.lr_scale != choice.rate:
                other.setdefault(key, (set(), choice.rate))[0].add(record.lr_scale)
        elif key not in answered:
            undecided.add(key)
    lines = []
    if undecided:
        names = ", ".join(f"{c}/{v}" for c, v in sorted(undecided))
        lines += [f"Finals recorded but not in this answer until the check decides their rate: "
                  f"{names}.", ""]  # fmt: skip
    if other:
        names = "; ".join(
            f"{c}/{v} at ×{', ×'.join(f'{r:g}' for r in sorted(rates))} (the check chose "
            f"×{chosen:g})"
            for (c, v), (rates, chosen) in sorted(other.items())
        )
        lines += [f"Finals recorded at a rate the check did not choose, not in this answer (the "
                  f"finals at the chosen rate are the next step): {names}.", ""]  # fmt: skip
    return lines


def by_name(study: StudySpec, declared: str) -> str:
    """How run_study.py names the study: by name where it is configs/study/<name>.yaml."""
    return study.name if declared == f"configs/study/{study.name}.yaml" else declared


def analyses_line(study: StudySpec) -> str | None:
    """What the README says of the analyses the conditions declare: not made by these stages
    (docs/declare-a-study.md, "Not yet"); None where none are declared."""
    declared = [f"{c}: {', '.join(s.analyses)}" for c, s in study.conditions.items() if s.analyses]
    if not declared:
        return None
    return (
        f"Not made by these stages yet: the declared analyses ({'; '.join(declared)}); "
        "`scripts/study.py report` makes them from records kept as the German study's were "
        '(docs/declare-a-study.md, "Not yet").'
    )


STAGE_FOLDERS = {  # what each stage's folder holds (docs/declare-a-study.md)
    "settings": "a variant setting chosen on dev at the grid's budget (e.g. SHAPE's K)",
    "grid": "the learning-rate grid at the short budget; the lowest mean dev PPL wins",
    "check": "the grid's choice and its neighbours within the factor, at the final budget",
    "final": "each variant at its chosen rate, every final seed, scored on the test sets",
    "extend": "finals trained on past the final budget (the schedule ignores max_steps)",
}


def recorded_final_points(run: StudyRun) -> list[Record]:
    """Every final record the store keeps, decided or not."""
    return [r for r in run.records() if r.stage == "final"]


def runs_json(run: StudyRun) -> list[dict]:
    """runs.json: every record's point, dev PPL, CPU-seconds, command and commit."""
    return [{k: v for k, v in asdict(r).items() if k != "fingerprints"} for r in run.records()]


HEADLINE_PREFIX = "bleu_minus_"  # summary/bleu_minus_<baseline>_<condition>_<steps>.png
RATE_FIGURE = "dev_ppl_vs_lr.png"  # summary/<stage>_<this>: mean dev PPL by rate


def headlines(study: StudySpec, result: dict) -> list[tuple[str, str, list[Difference]]]:
    """The answer's figures: per condition and budget, each variant minus the first baseline
    at the last checkpoint: (file name, title, differences)."""
    baseline, last = study.statistics.baselines[0], answer_checkpoints(study)[0]
    groups: dict[tuple[str, int], list[Difference]] = {}
    for d in result["differences"]:
        if (d.baseline, d.checkpoint) == (baseline, last) and d.difference is not None:
            groups.setdefault((d.condition, d.steps), []).append(d)
    return [
        (f"{HEADLINE_PREFIX}{baseline}_{condition}_{steps}.png",
         f"{condition}: test BLEU, {steps:,} steps, {last} checkpoint", diffs)
        for (condition, steps), diffs in groups.items()
    ]  # fmt: skip


def rate_curves(choices: dict[tuple[str, str], Choice]) -> list[RateCurve]:
    """The figure's rows of one stage's choices (labelled by condition where several)."""
    several = len({condition for condition, _ in choices}) > 1
    return [
        RateCurve(f"{c}/{v}" if several else v, v, tuple(m.lr_scale for m in choice.means),
                  tuple(m.mean for m in choice.means), choice.rate if choice.complete else None)
        for (c, v), choice in choices.items()
    ]  # fmt: skip


def write_figures(run: StudyRun, decided: dict, out: Path) -> None:
    """The rate figure of the grid and the check, and the answer's headline figures."""
    budgets = {"grid": run.study.grid.steps, "check": run.study.final.steps}
    for stage, steps in budgets.items():
        if decided[stage] and (Path(run.results) / run.study.name / stage).is_dir():
            curves = rate_curves(decided[stage])
            plot_rate_curves(curves, steps, out / f"{stage}_{RATE_FIGURE}")
    if decided["finals"]:
        result = answer(run.study, decided["finals"], answer_checkpoints(run.study))
        for name, title, diffs in headlines(run.study, result):
            plot_differences(diffs, run.study.statistics.baselines[0], title, out / name)


def stage_lines(run: StudyRun) -> list[str]:
    """The README's section on the record stores: what each stage's folder holds, how many."""
    lines = ["## Records", ""]
    counts = Counter(r.stage for r in run.records())
    for stage, what in STAGE_FOLDERS.items():
        if counts[stage]:
            lines.append(f"- `{stage}/runs/`: {what}; {counts[stage]} records.")
    return [*lines, ""]


SUMMARY = "summary"  # results/<study>/summary/: what write_study_report writes, as one folder


def write_study_report(run: StudyRun, decided: dict, committed: str, declared: str) -> Path:
    """results/<study>/summary/: README.md, runs.json and the figures, all derived from the
    records, written to a new folder and swapped in whole (a kill leaves the summary before)."""
    out = Path(run.results) / run.study.name / SUMMARY
    if line := analyses_line(run.study):
        run.say(f"study: {line}")
    with replaced_folder(out, owned=(f"*_{RATE_FIGURE}", f"{HEADLINE_PREFIX}*.png")) as folder:
        write_text(folder / "README.md", status_markdown(run, decided, committed, declared))
        write_json(folder / "runs.json", runs_json(run))
        write_figures(run, decided, folder)
    return out
