"""Tuning as the German study ran it: its tuning.json files read back, and the plateau budget.

``tune`` (retired with ``scripts/study.py tune``; the records name the commits that ran it, and
``scripts/run_study.py <study>``'s grid and check stages choose the rates now) wrote one
tuning.json per grid: per position variant a grid of ``optim.lr_scale`` values x seeds, each
rate's mean dev PPL at the last step and the chosen rate. The report still reads them
(``read_choices``, ``report --tuning``) to check each variant's rate against its choice.

``plateau``: per run, the first dev evaluation after which dev PPL improves by less than a
threshold (relative) over the rest of the run; the budget is the latest such step over the runs,
rounded up to the evaluation interval. A run that diverged (train.py's 10 non-finite updates in a
row, in its train.log) is told by ``diverged_in_log``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from common.configs import compose_config
from common.errors import UserError, first_line
from common.files import read_json, write_json
from evaluation.compare import dev_ppl_curve
from evaluation.plots import figure, log_axis, save
from runs.resume import setting_differences
from runs.run import Run
from studies.rows import from_json

# train.py's skipped_update logs "update skipped (N in a row)" and stops the run at N = 10
DIVERGED_LINE = re.compile(r"non-finite loss or gradient, update skipped \((\d+) in a row\)")
DIVERGED_AFTER = 10
LOG_DEV_PPL = re.compile(r" - step (\d+) dev ppl ([0-9.]+|inf|nan)")


class TuningError(UserError):
    """A grid whose runs cannot be compared, or arguments that name no grid, in one line."""


@dataclass(frozen=True)
class MissingRun:
    """A grid point with no finished run (tuning.json "missing")."""

    variant: str
    lr_scale: float
    seed: int


@dataclass(frozen=True)
class PointEntry:
    """tuning.json's entry of one rate: each seed's dev PPL (None: diverged), mean and n."""

    lr_scale: float
    dev_ppl_by_seed: dict[str, float | None]
    diverged_seeds: list[int]
    mean: float | None  # None: no run, or one diverged
    n: int
    runs: list[str]


@dataclass(frozen=True)
class VariantEntry:
    """tuning.json's entry of one variant: its rates, the chosen one, an edge, final or not."""

    rates: list[PointEntry]
    chosen_lr_scale: float | None
    at_edge: str | None
    next_rate: float | None
    complete: bool


@dataclass(frozen=True)
class TuningResult:
    """tuning.json: the grid, per variant per rate the seeds' dev PPL, the choices, what is
    missing and the commands that train it."""

    criterion: str
    experiment: str
    folder: str
    overrides: list[str]
    stores: list[str]
    rates: list[float]
    seeds: list[int]
    max_steps: list[int]
    variants: dict[str, VariantEntry]
    missing: list[MissingRun]
    commands: list[str]
    unfinished: list[str]


@dataclass(frozen=True)
class RunMetrics:
    """What a grid reads of a run's metrics.json (None: the file has no such field)."""

    dev_ppl: float | None = None
    steps: int | None = None
    position_choice: str | None = None


def diverged_in_log(log: Path) -> bool:
    """Whether a train.log shows the run stopped on non-finite updates (DivergenceError)."""
    if not log.is_file():
        return False
    counts = DIVERGED_LINE.findall(log.read_text(encoding="utf-8", errors="replace"))
    return any(int(n) >= DIVERGED_AFTER for n in counts)


def setting(override: str) -> str:
    """The config key an override sets (`+a.b=1` -> a.b)."""
    return override.split("=", 1)[0].lstrip("+~")


@dataclass(frozen=True)
class Choice:
    """A variant's rate in a tuning.json: the chosen one (None: none yet), final or not."""

    variant: str
    lr_scale: float | None
    complete: bool  # every required grid point ran: the choice is final
    missing: tuple[str, ...]  # "×<rate> seed <s>" of the grid points without a run
    source: Path  # the tuning.json it comes from
    max_steps: int  # the budget of that grid's runs (0: none ran)


@dataclass(frozen=True)
class TunedRates:
    """One or more tuning.json of one configuration merged: the grid's configuration and each
    variant's choice, from the file at the longest budget that tuned it."""

    paths: tuple[Path, ...]
    experiment: str  # configs/experiment/<name> every grid run composed
    overrides: tuple[str, ...]  # the Hydra overrides (besides rate and seed) of the grid at
    # the longest budget (the others may differ from them in KEEP_THE_MATH settings only)
    max_steps: tuple[int, ...]  # the grid runs' budgets
    choices: dict[str, Choice]

    @property
    def name(self) -> str:
        """The files, as a message names them."""
        return " ".join(map(str, self.paths))


def read_tuning_result(path: Path) -> TuningResult:
    """One tuning.json written by `tune`, typed; a missing or foreign file is one TuningError."""
    path = Path(path)
    if not path.is_file():
        raise TuningError(f"{path}: no such file; pass a tuning.json that `tune` wrote")
    try:
        return from_json(TuningResult, read_json(path))
    except (KeyError, TypeError, AttributeError) as e:
        raise TuningError(
            f"{path} is not a tuning.json that `tune` wrote (missing or malformed: {e}): "
            "pass one of the study's tuning.json files"
        ) from e


def read_tuning_file(path: Path) -> TunedRates:
    """One tuning.json written by `tune`, its choices typed (read_tuning_result)."""
    path = Path(path)
    result = read_tuning_result(path)
    missing = {}
    for m in result.missing:
        missing.setdefault(m.variant, []).append(f"×{m.lr_scale:g} seed {m.seed}")
    budget = max(result.max_steps, default=0)
    choices = {
        v: Choice(v, t.chosen_lr_scale, t.complete, tuple(missing.get(v, ())), path, budget)
        for v, t in result.variants.items()
    }
    overrides, steps = tuple(result.overrides), tuple(result.max_steps)
    return TunedRates((path,), result.experiment, overrides, steps, choices)


def math_differences(
    experiment: str, tuned: Sequence[str], other: Sequence[str], variants: Sequence[str] = ()
) -> list[str]:
    """'key: old -> new' of the settings two override lists of one experiment differ in that
    change the math (all but runs.resume's KEEP_THE_MATH: budget, evaluations, files, device).

    Where an override sets a position.* key, a setting of some variants only (SHAPE's
    max_shift), the lists are compared at each of variants (position=<v>), not at the
    experiment's default position, which may lack the key."""
    apart = bool(variants) and bool(position_settings([*tuned, *other]))
    positions = [[f"position={v}"] for v in variants] if apart else [[]]
    changed: list[str] = []
    for position in positions:
        try:
            grid, final = (
                OmegaConf.to_container(
                    compose_config([f"experiment={experiment}", "run_dir=.", *position, *words]),
                    resolve=True,
                )
                for words in (tuned, other)
            )
        except (HydraException, OmegaConfBaseException) as e:  # a key the variant lacks
            changed.append(f"{' '.join(position)}: {first_line(e)}")
            continue
        changed += [c for c in setting_differences(grid, final)[0] if c not in changed]
    return changed


def position_settings(overrides: Sequence[str]) -> tuple[str, ...]:
    """The overrides that set position.* keys (SHAPE's K): a grid's variants' own settings."""
    return tuple(sorted(o for o in overrides if setting(o).startswith("position.")))


def read_choices(paths: Path | Sequence[Path]) -> dict[str, Choice]:
    """Each variant's choice in tuning.json files of one experiment, as the report checks runs
    against them: files of one configuration merged by read_tuned_rates; a grid that set
    position.* keys (SHAPE's K, chosen on dev first) tunes its variants apart from the others'.
    A variant tuned at two such settings is refused."""
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    files = {path: read_tuning_file(path) for path in paths}
    groups: dict[tuple[str, ...], list[Path]] = {}
    for path, file in files.items():
        groups.setdefault(position_settings(file.overrides), []).append(path)
    experiments = {file.experiment: path for path, file in files.items()}
    if len(experiments) > 1:
        raise TuningError(
            f"{' and '.join(map(str, experiments.values()))} tuned other experiments "
            f"({', '.join(experiments)}): pass tuning.json files of one experiment"
        )
    choices: dict[str, Choice] = {}
    for group in groups.values():
        for variant, choice in read_tuned_rates(group).choices.items():
            if variant in choices:
                raise TuningError(
                    f"{choices[variant].source} and {choice.source} tuned {variant} at other "
                    "position.* settings: pass the one its runs trained at"
                )
            choices[variant] = choice
    return choices


def read_tuned_rates(paths: Path | Sequence[Path]) -> TunedRates:
    """tuning.json files merged: each variant's choice from the one at the longest budget that
    tuned it (a check of the grid's choice at the final budget, RECIPE "A budget at the
    plateau"); refused where they tuned other configurations or two at one budget tuned it."""
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    files = [read_tuning_file(p) for p in paths]
    first, choices = files[0], {}
    for other in files[1:]:
        settings = [position_settings(f.overrides) for f in (first, other)]
        if settings[0] != settings[1]:
            said = "; ".join(" ".join(s) or "no position.* setting" for s in settings)
            raise TuningError(
                f"{first.name} and {other.name} tuned at other position.* settings ({said}): "
                "one grid's choices merge with another of its settings only, so pass such a grid "
                "(SHAPE's K) on its own; `report --tuning` takes both"
            )
        changed = (
            math_differences(
                first.experiment,
                first.overrides,
                other.overrides,
                sorted({*first.choices, *other.choices}),
            )
            if other.experiment == first.experiment
            else [f"experiment: {first.experiment} -> {other.experiment}"]
        )
        if changed:
            raise TuningError(
                f"{other.name} tuned another configuration than {first.name} "
                f"({'; '.join(changed)}): pass tuning.json files of one experiment and settings "
                "(budgets may differ)"
            )
    files.sort(key=lambda f: max(f.max_steps, default=0))  # the longest budget last
    for file in files:
        for variant, choice in file.choices.items():
            before = choices.get(variant)
            if before is not None and before.max_steps == choice.max_steps:
                raise TuningError(
                    f"{before.source} and {choice.source} both tuned {variant} at "
                    f"{choice.max_steps} steps: pass one of them"
                )
            choices[variant] = choice
    budgets = tuple(sorted({b for f in files for b in f.max_steps}))
    return TunedRates(tuple(paths), first.experiment, files[-1].overrides, budgets, choices)


# --- the step budget at the plateau ---------------------------------------------------------


@dataclass(frozen=True)
class PlateauRun:
    """One run's dev PPL curve and the eval step after which it improves by < the threshold."""

    path: Path
    variant: str
    lr_scale: float
    max_steps: int
    eval_every: int
    finished: bool
    curve: tuple[tuple[int, float], ...]  # (step, dev PPL) at each evaluation
    plateau_step: int | None  # None: it still improves by >= the threshold after every eval


def read_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, dev PPL) of each evaluation: the TensorBoard scalars (the study's dev_ppl_curves
    reader), else train.log's 'step N dev ppl X' lines (three decimals)."""
    curve = [(int(step), float(value)) for step, value in dev_ppl_curve(run_dir)]
    log_file = Run(run_dir).log_file
    if curve or not log_file.is_file():
        return curve
    by_step = {}
    for step, value in LOG_DEV_PPL.findall(log_file.read_text(encoding="utf-8")):
        by_step[int(step)] = float(value)  # a resumed step keeps its last value
    return sorted(by_step.items())


def plateau_step(curve: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """The first eval step after which the lowest later dev PPL is > (1 - threshold) x its own.

    The last evaluation has no later one: a curve that first flattens there is not at a plateau.
    """
    for i, (step, ppl) in enumerate(curve[:-1]):
        if min(value for _, value in curve[i + 1 :]) >= (1 - threshold) * ppl:
            return step
    return None


def gains_after(curve: Sequence[tuple[int, float]]) -> list[list]:
    """[step, relative improvement of the lowest later dev PPL over the PPL at step]."""
    return [
        [step, 1 - min(value for _, value in curve[i + 1 :]) / ppl]
        for i, (step, ppl) in enumerate(curve[:-1])
    ]


def read_plateau_run(run_dir: Path, threshold: float) -> PlateauRun:
    """A run's curve and plateau; refused without a config or a dev PPL curve."""
    if not Run(run_dir).has_config():
        raise TuningError(f"--runs {run_dir}: no .hydra/config.yaml; pass a run folder or record")
    config = OmegaConf.create(Run(run_dir).resolved_config())
    curve = read_curve(run_dir)
    if not curve:
        raise TuningError(
            f"--runs {run_dir}: no dev PPL recorded (tensorboard/ dev/ppl or train.log); "
            "pass a run that has reached its first evaluation"
        )
    metrics = Run(run_dir).finished_metrics()
    variant = from_json(RunMetrics, metrics or {}).position_choice or run_dir.parent.name
    return PlateauRun(
        path=run_dir,
        variant=str(variant),
        lr_scale=float(config.optim.lr_scale),
        max_steps=int(config.trainer.max_steps),
        eval_every=int(config.trainer.eval_every),
        finished=metrics is not None,
        curve=tuple(curve),
        plateau_step=plateau_step(curve, threshold),
    )


def step_budget(runs: Sequence[PlateauRun]) -> tuple[int | None, str]:
    """The latest plateau step over the runs, rounded up to the eval interval, and why."""
    open_ = [r for r in runs if r.plateau_step is None]
    if open_:
        names = ", ".join(f"{r.path} (last eval {r.curve[-1][0]})" for r in open_)
        return None, f"no budget yet: still improving after every evaluation but the last: {names}"
    latest = max(runs, key=lambda r: r.plateau_step)
    interval = max(r.eval_every for r in runs)
    budget = math.ceil(latest.plateau_step / interval) * interval
    return budget, (
        f"{budget} steps: the latest plateau is {latest.variant}'s at step "
        f"{latest.plateau_step} ({latest.path}), rounded up to the eval interval {interval}"
    )


def plot_plateau(runs: Sequence[PlateauRun], budget: int | None, path: Path) -> None:
    """Dev PPL curves (log y) with each run's plateau step dotted and the budget dashed."""
    fig, ax = figure(height_cm=7.0)
    for i, run in enumerate(runs):
        colour = f"C{i % 10}"
        steps, values = zip(*run.curve, strict=True)
        label = f"{run.variant} lr×{run.lr_scale:g} ({run.path.name})"
        ax.plot(steps, values, color=colour, marker=".", label=label)
        if run.plateau_step is not None:
            ax.axvline(run.plateau_step, color=colour, linestyle=":", linewidth=1)
    if budget is not None:
        ax.axvline(budget, color="black", linestyle="--", linewidth=1, label=f"budget {budget}")
    ax.set_yscale("log")
    log_axis(ax.yaxis)
    ax.set_xlabel("step")
    ax.set_ylabel("dev PPL")
    ax.set_title("Dev PPL: dotted, each run's plateau step")
    ax.legend()
    save(fig, path)


def plateau(
    run_dirs: Sequence[Path],
    out: Path,
    threshold: float = 0.02,
    echo: Callable[[str], None] = print,
) -> dict:
    """plateau.json and dev_ppl_plateau.png of the runs; the step budget they support."""
    if not 0 < threshold < 1:
        raise TuningError(f"--threshold {threshold}: pass a relative improvement in (0, 1)")
    runs = [read_plateau_run(Path(d), threshold) for d in run_dirs]
    budget, why = step_budget(runs)
    result = {
        "threshold": threshold,
        "definition": "the first eval step after which the lowest later dev PPL is at least "
        f"(1 - {threshold}) x the dev PPL there; budget: the latest over the runs, rounded up "
        "to the eval interval",
        "budget": budget,
        "why": why,
        "runs": [
            {
                "run": str(r.path),
                "variant": r.variant,
                "lr_scale": r.lr_scale,
                "max_steps": r.max_steps,
                "eval_every": r.eval_every,
                "finished": r.finished,
                "plateau_step": r.plateau_step,
                "curve": [list(point) for point in r.curve],
                "gain_after": gains_after(r.curve),
            }
            for r in runs
        ],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "plateau.json", result)
    plot_plateau(runs, budget, out / "dev_ppl_plateau.png")
    for r in runs:
        at = "not reached yet" if r.plateau_step is None else f"step {r.plateau_step}"
        last = f"dev PPL {r.curve[-1][1]:.2f} at step {r.curve[-1][0]}" if r.curve else "no eval"
        echo(f"plateau: {r.path}: {r.variant} lr×{r.lr_scale:g}, {last}, plateau: {at}")
    echo(f"plateau: budget {why}")
    echo(f"written: {out}/ (plateau.json, dev_ppl_plateau.png)")
    return result
