"""A setting other than the rate chosen on dev, as Kiyono et al. (2021) chose SHAPE's shift K.

``choose``: one tuning.json of `study.py tune` per value of the setting (each grid run with
``<setting>=<value>`` after ``--``, all at one rate, budget and seeds); per variant the value of
the lowest mean dev PPL at that rate over the grid's seeds (test scores are never read). The
files must differ in that setting only; a value whose point misses a seed chooses nothing yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from common.files import write_json, write_text
from studies.tuning import (
    TuningError,
    TuningResult,
    grid_head,
    math_differences,
    point_cells,
    read_tuning_file,
    read_tuning_result,
    setting,
)


@dataclass(frozen=True)
class ValuePoint:
    """One value of the setting for one variant: the grid seeds' dev PPL at the rate."""

    value: str
    tuning: str  # the tuning.json it comes from
    dev_ppl_by_seed: dict[str, float | None]  # None: diverged
    mean: float | None  # None: no run, or one diverged (with n seeds: infinite)
    n: int


@dataclass(frozen=True)
class ChoiceRow:
    """A variant in choice.json: its point at each value, the chosen value, final or not."""

    values: list[ValuePoint]
    chosen: str | None
    complete: bool  # every value ran every seed: the choice is final


@dataclass(frozen=True)
class ChoiceResult:
    """choice.json: the setting, the rate, the grid's seeds and budget, each variant's choice."""

    setting: str
    lr_scale: float
    seeds: list[int]
    max_steps: list[int]
    criterion: str
    variants: dict[str, ChoiceRow]


def setting_value(path: Path, overrides: Sequence[str], key: str) -> str:
    """The value a tuning.json's grid set the key to after --, refused where it set none."""
    values = [o.split("=", 1)[1] for o in overrides if setting(o) == key]
    if not values:
        raise TuningError(
            f"{path} tuned no {key} (its overrides: {' '.join(overrides) or 'none'}): pass "
            f"tuning.json files of `tune ... -- {key}=<value>`"
        )
    return values[-1]


def without(overrides: Sequence[str], key: str) -> list[str]:
    """The overrides that set anything but key."""
    return [o for o in overrides if setting(o) != key]


def check_one_grid(paths: Sequence[Path], key: str) -> list[TuningResult]:
    """The files as read; refused where they are of other experiments, budgets or settings than
    the key, or give one value twice."""
    files = [read_tuning_file(p) for p in paths]  # a missing or foreign file: one line
    results = [read_tuning_result(p) for p in paths]
    first, seen = files[0], {}
    for path, file, result in zip(paths, files, results, strict=True):
        value = setting_value(path, file.overrides, key)
        if value in seen:
            raise TuningError(f"{seen[value]} and {path} both set {key}={value}: pass one of them")
        seen[value] = path
        changed = (
            math_differences(
                first.experiment,
                without(first.overrides, key),
                without(file.overrides, key),
                sorted({*first.choices, *file.choices}),
            )
            if file.experiment == first.experiment
            else [f"experiment: {first.experiment} -> {file.experiment}"]
        )
        for what in ("max_steps", "seeds"):
            mine, theirs = getattr(results[0], what), getattr(result, what)
            changed += [f"{what}: {mine} -> {theirs}"] if mine != theirs else []
        if changed:
            raise TuningError(
                f"{path} tuned another configuration than {paths[0]} besides {key} "
                f"({'; '.join(changed)}): pass tuning.json files of one grid"
            )
    return results


def value_point(
    path: Path, result: TuningResult, variant: str, rate: float, value: str
) -> ValuePoint:
    """A variant's point at the rate in one tuning.json (no run: an empty point)."""
    entry = result.variants.get(variant)
    point = next((p for p in entry.rates if p.lr_scale == rate), None) if entry else None
    if point is None:
        return ValuePoint(value, str(path), {}, None, 0)
    return ValuePoint(value, str(path), point.dev_ppl_by_seed, point.mean, point.n)


def check_rate_ran(rate: float, paths: Sequence[Path], results: Sequence[TuningResult]) -> None:
    """TuningError unless some variant of some tuning.json ran the rate (listing those they ran)."""
    ran = {p.lr_scale for r in results for v in r.variants.values() for p in v.rates}
    if rate not in ran:
        listed = ", ".join(f"{r:g}" for r in sorted(ran)) or "none"
        raise TuningError(
            f"--rate {rate:g}: no grid of {', '.join(map(str, paths))} ran it (the rates they "
            f"ran: {listed}): pass one of those"
        )


def choose_setting(
    key: str,
    rate: float,
    paths: Sequence[Path],
    out: Path | None = None,
    echo: Callable[[str], None] = print,
) -> ChoiceResult:
    """Per variant the value of key with the lowest mean dev PPL at the rate; choice.json/.md."""
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise TuningError(f"--tunings: pass 2 or more tuning.json files (one per {key})")
    results = check_one_grid(paths, key)
    check_rate_ran(rate, paths, results)
    seeds = results[0].seeds
    variants = dict.fromkeys(v for r in results for v in r.variants)
    rows = {}
    for variant in variants:
        points = [
            value_point(p, r, variant, rate, setting_value(p, r.overrides, key))
            for p, r in zip(paths, results, strict=True)
        ]
        full = [p for p in points if p.n == len(seeds)]
        finite = [p for p in full if p.mean is not None and math.isfinite(p.mean)]
        best = min(finite, key=lambda p: p.mean) if finite else None
        complete = len(full) == len(points) and best is not None
        rows[variant] = ChoiceRow(points, None if best is None else best.value, complete)
    result = ChoiceResult(
        setting=key,
        lr_scale=rate,
        seeds=seeds,
        max_steps=results[0].max_steps,
        criterion=f"lowest mean dev PPL at optim.lr_scale={rate:g} over the grid's seeds "
        "(every seed ran at every value); test scores are not read",
        variants=rows,
    )
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        write_json(Path(out) / "choice.json", asdict(result))
        write_text(Path(out) / "choice.md", choice_markdown(result))
    echo(choice_markdown(result))
    return result


def choice_markdown(result: ChoiceResult) -> str:
    """choice.md: per variant and value, the seeds' dev PPL, the mean and the choice."""
    title = f"{result.setting} chosen on dev: ×{result.lr_scale:g}"
    lines = grid_head(title, result.max_steps, result.seeds, result.criterion, result.setting)
    for variant, row in result.variants.items():
        for point in row.values:
            mark = "**chosen**" if row.complete else "chosen so far"
            mark = mark if point.value == row.chosen else ""
            cells = point_cells(point.dev_ppl_by_seed, point.mean, point.n)
            lines.append(f"| {variant} | {point.value} | {cells} | {mark} |")
    return "\n".join(lines) + "\n"
