"""Each variant at its own learning rate, and the step budget at the plateau (README "Tuning").

``tune``: per position variant a grid of ``optim.lr_scale`` values x seeds, every point one run
of one configuration (a study condition, or any experiment with its Hydra overrides). It reads
the finished runs of the grid from record stores or run roots (``<store>/<folder>/<variant>/
seed-<s>/``, folder = the condition or the experiment; the rate, seed and step budget from each
run's .hydra/config.yaml, never from folder names), refuses runs whose settings differ in
anything but the rate and the seed (and, between variants, ``position.*``), and chooses per
variant the rate of the lowest mean dev PPL at the last step over the grid's seeds (test scores
are never read). A run that diverged (train.py's 10 non-finite updates in a row, in its
train.log) counts as an infinite PPL. Where the chosen rate is the lowest or highest tried, the
rate one step beyond (x0.5 or x2) joins the grid. Missing points come back as commands.

``plateau``: per run, the first dev evaluation after which dev PPL improves by less than a
threshold (relative) over the rest of the run; the budget is the latest such step over the runs,
rounded up to the evaluation interval.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from common.configs import compose_config
from common.errors import UserError, first_line
from common.files import read_json, write_json, write_text
from evaluation.compare import dev_ppl_curve
from evaluation.plots import figure, log_axis, save, variant_colours
from runs.resume import setting_differences
from runs.run import Run
from studies.plan import CONDITIONS, RECORDS, ROOT, position_variants
from studies.rows import from_json

DEFAULT_RATES = (0.25, 0.5, 1.0, 2.0)
DEFAULT_SEEDS = (1, 2)
GRID_KEYS = ("seed", "optim.lr_scale")  # the settings a grid varies; every other one is shared
BUDGET_KEYS = ("trainer.max_steps",)  # may change on a resume, never within one grid
# train.py's skipped_update logs "update skipped (N in a row)" and stops the run at N = 10
DIVERGED_LINE = re.compile(r"non-finite loss or gradient, update skipped \((\d+) in a row\)")
DIVERGED_AFTER = 10
LOG_DEV_PPL = re.compile(r" - step (\d+) dev ppl ([0-9.]+|inf|nan)")


class TuningError(UserError):
    """A grid whose runs cannot be compared, or arguments that name no grid, in one line."""


@dataclass(frozen=True)
class GridRun:
    """One finished (or diverged) run of a grid: its point and its dev PPL at the last step."""

    path: Path
    variant: str
    lr_scale: float
    seed: int
    max_steps: int
    dev_ppl: float  # math.inf: the run diverged
    diverged: bool
    config: dict = field(compare=False, repr=False)


@dataclass(frozen=True)
class Protocol:
    """A tuning grid: what each run trains (a study condition or an experiment) and its points."""

    condition: str = "all"  # the study's condition (its `scripts/study.py run` trains the runs)
    experiment: str | None = None  # configs/experiment/<name>: `train.py` trains the runs
    overrides: tuple[str, ...] = ()
    variants: tuple[str, ...] | None = None  # None: those the stores hold
    rates: tuple[float, ...] = DEFAULT_RATES
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    root: Path = Path("outputs/tuning")  # an experiment's runs: <root>/lr<rate>/<experiment>/...

    @property
    def folder(self) -> str:
        """The folder of a store that holds this grid's runs."""
        return self.experiment or self.condition

    @property
    def experiment_config(self) -> str:
        """The experiment config every run composes."""
        return self.experiment or CONDITIONS[self.condition]


@dataclass(frozen=True)
class RatePoint:
    """One rate of a variant: the grid seeds' runs there."""

    lr_scale: float
    runs: tuple[GridRun, ...]

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def mean(self) -> float | None:
        """Mean dev PPL over the seeds (inf if one diverged), None without runs."""
        return sum(r.dev_ppl for r in self.runs) / self.n if self.runs else None


@dataclass(frozen=True)
class VariantTuning:
    """A variant's rates (ascending), the chosen one and whether it sits at an edge."""

    variant: str
    points: tuple[RatePoint, ...]
    chosen: float | None  # lowest mean dev PPL among the rates every grid seed ran
    edge: str | None  # "low" / "high": the chosen rate is the lowest / highest tried
    next_rate: float | None  # the rate one step beyond that edge
    required: tuple[float, ...]  # the grid's rates, the chosen one's neighbours, next_rate
    complete: bool  # every required point ran (every grid seed): the choice is final


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


def rate_text(rate: float) -> str:
    """A rate as the override writes it (0.25, 1.0)."""
    return repr(float(rate))


def rate_tag(rate: float) -> str:
    """A rate in a folder name: 0.25 -> 025, 2.0 -> 2 (results/archive/pe_study_lr025)."""
    return f"{float(rate):g}".replace(".", "")


def diverged_in_log(log: Path) -> bool:
    """Whether a train.log shows the run stopped on non-finite updates (DivergenceError)."""
    if not log.is_file():
        return False
    counts = DIVERGED_LINE.findall(log.read_text(encoding="utf-8", errors="replace"))
    return any(int(n) >= DIVERGED_AFTER for n in counts)


def read_grid_run(run_dir: Path) -> GridRun | None:
    """The grid record of a finished or diverged run; None while it is unfinished."""
    if not Run(run_dir).has_config():
        return None
    config = Run(run_dir).resolved_config()
    settings = OmegaConf.create(config)
    max_steps = int(settings.trainer.max_steps)
    finished = Run(run_dir).finished_metrics()
    if finished is not None:
        metrics = from_json(RunMetrics, finished)
        for key in ("dev_ppl", "steps"):
            if getattr(metrics, key) is None:
                raise TuningError(
                    f"{Run(run_dir).metrics_file} has no '{key}': it was not written by this "
                    "project's train.py; take the run out of the stores"
                )
        if int(metrics.steps) != max_steps:
            raise TuningError(
                f"{run_dir} stopped at step {metrics.steps}, not at its trainer.max_steps "
                f"{max_steps} (a time or epoch limit): a grid compares one step budget; take "
                "the run out of the stores or train it to its budget"
            )
        ppl = float(metrics.dev_ppl)
        variant = str(metrics.position_choice or run_dir.parent.name)
        diverged = not math.isfinite(ppl)
    elif diverged_in_log(Run(run_dir).log_file):
        ppl, variant, diverged = math.inf, run_dir.parent.name, True
    else:
        return None
    return GridRun(
        path=run_dir,
        variant=variant,
        lr_scale=float(settings.optim.lr_scale),
        seed=int(settings.seed),
        max_steps=max_steps,
        dev_ppl=math.inf if diverged else ppl,
        diverged=diverged,
        config=config,
    )


def read_stores(stores: Sequence[Path], folder: str) -> tuple[list[GridRun], list[str]]:
    """Every finished or diverged run under <store>/<folder>/*/seed-*, and the unfinished ones.

    A point held by two stores (a run and its record) counts once, from the first store named.
    """
    runs: dict[tuple, GridRun] = {}
    unfinished = []
    for store in stores:
        if not Path(store).is_dir():
            raise TuningError(f"--stores {store}: no such folder; pass record stores or run roots")
        for run_dir in sorted((Path(store) / folder).glob("*/seed-*")):
            if not run_dir.is_dir() or run_dir.name.endswith(".partial"):
                continue
            run = read_grid_run(run_dir)
            if run is None:
                unfinished.append(str(run_dir))
            else:
                runs.setdefault((run.variant, run.lr_scale, run.seed), run)
    return list(runs.values()), unfinished


def grid_differences(old: dict, new: dict, position_free: bool) -> list[str]:
    """'key: old -> new' of each setting two runs of one grid may not differ in."""
    refused, allowed = setting_differences(old, new)
    lines = refused + [line for line in allowed if line.split(":", 1)[0] in BUDGET_KEYS]
    return [
        line
        for line in lines
        if line.split(":", 1)[0] not in GRID_KEYS
        and not (position_free and line.startswith("position."))
    ]


def check_one_configuration(runs: Sequence[GridRun]) -> None:
    """Refuse runs that differ in more than the rate and seed (variants: and position.*)."""
    if not runs:
        return
    reference, first_of = runs[0], {}
    for run in runs:
        base = first_of.setdefault(run.variant, run)
        for other, position_free in ((reference, run.variant != reference.variant), (base, False)):
            changed = grid_differences(other.config, run.config, position_free)
            if changed:
                raise TuningError(
                    f"{run.path} and {other.path} differ in more than optim.lr_scale and seed "
                    f"({'; '.join(changed)}): a grid compares one configuration; pass --stores "
                    "(or a --condition/--experiment) that hold only its runs"
                )


def setting(override: str) -> str:
    """The config key an override sets (`+a.b=1` -> a.b)."""
    return override.split("=", 1)[0].lstrip("+~")


def point_overrides(protocol: Protocol, variant: str, seed: int, rate: float) -> list[str]:
    """The train.py overrides of one grid point (without its run_dir)."""
    return [
        f"experiment={protocol.experiment_config}",
        f"position={variant}",
        f"seed={seed}",
        f"optim.lr_scale={rate_text(rate)}",
        *protocol.overrides,
    ]


def check_protocol(runs: Sequence[GridRun], protocol: Protocol) -> None:
    """Refuse runs trained with other settings than the protocol's experiment and overrides."""
    known = position_variants()
    checked = set()
    for run in runs:
        if run.variant in checked:
            continue  # check_one_configuration holds the others to this one
        checked.add(run.variant)
        if run.variant not in known:
            raise TuningError(
                f"{run.path} trained position {run.variant}, not one of configs/position: "
                "take it out of the stores"
            )
        wanted = compose_config(
            point_overrides(protocol, run.variant, run.seed, run.lr_scale) + [f"run_dir={run.path}"]
        )
        changed = grid_differences(
            run.config, OmegaConf.to_container(wanted, resolve=True), position_free=False
        )
        if changed:
            given = " ".join(protocol.overrides) or "no overrides"
            raise TuningError(
                f"{run.path} was trained with other settings than experiment="
                f"{protocol.experiment_config} with {given} ({'; '.join(changed)}): pass the "
                "overrides it was trained with after --, or take it out of the stores"
            )


def check_grid(protocol: Protocol) -> None:
    """Refuse a grid of fewer than 2 seeds, unknown variants, non-positive rates, or overrides
    of the grid's own keys."""
    if len(set(protocol.seeds)) < 2:
        raise TuningError(f"--seeds {' '.join(map(str, protocol.seeds))}: pass 2 or more seeds")
    known = position_variants()
    for variant in protocol.variants or ():
        if variant not in known:
            raise TuningError(f"--variants {variant}: not in configs/position ({', '.join(known)})")
    if not protocol.rates or any(not float(r) > 0 for r in protocol.rates):
        raise TuningError(f"--rates {' '.join(map(str, protocol.rates))}: pass positive rates")
    for override in protocol.overrides:
        key = setting(override)
        if key in (*GRID_KEYS, "position", "experiment", "run_dir", "hydra.run.dir"):
            raise TuningError(
                f"override {override}: the grid sets {key} itself (--rates, --seeds, --variants, "
                "--experiment, --root); leave it out"
            )


def check_experiment(experiment: str | None) -> None:
    """Refuse an --experiment that names no configs/experiment/<name>.yaml, before any store."""
    if experiment is None:
        return
    try:
        compose_config([f"experiment={experiment}", "run_dir=."])
    except (HydraException, OmegaConfBaseException) as e:
        message = first_line(e)
        raise TuningError(
            f"--experiment {experiment}: {message}; pass a configs/experiment/<name>"
        ) from e


def check_overrides(protocol: Protocol, variant: str) -> None:
    """Refuse overrides (or an experiment) that do not compose: the plan would print them."""
    words = point_overrides(protocol, variant, protocol.seeds[0], protocol.rates[0])
    try:
        compose_config([*words, "run_dir=."])
    except (HydraException, OmegaConfBaseException) as e:
        message = first_line(e)
        raise TuningError(
            f"{' '.join([f'experiment={protocol.experiment_config}', *protocol.overrides])} "
            f"does not compose ({message}): fix --experiment or the overrides after --"
        ) from e


def tune_variant(variant: str, runs: Sequence[GridRun], protocol: Protocol) -> VariantTuning:
    """A variant's points; the chosen rate: lowest mean dev PPL among rates every seed ran.

    Runs at rates outside the grid (kept from another check) are shown and may be chosen where
    every grid seed ran them; they are required only as the chosen rate's neighbours.
    """
    seeds = set(protocol.seeds)
    mine = [r for r in runs if r.variant == variant and r.seed in seeds]
    grid = {float(r) for r in protocol.rates}
    rates = sorted(grid | {r.lr_scale for r in mine})
    points = tuple(
        RatePoint(
            rate, tuple(sorted((r for r in mine if r.lr_scale == rate), key=lambda r: r.seed))
        )
        for rate in rates
    )
    finite = [p for p in points if p.n == len(seeds) and math.isfinite(p.mean)]
    if not finite:
        return VariantTuning(variant, points, None, None, None, tuple(sorted(grid)), False)
    best = min(finite, key=lambda p: (p.mean, p.lr_scale))
    edge = "low" if best.lr_scale == rates[0] else "high" if best.lr_scale == rates[-1] else None
    next_rate = {"low": best.lr_scale / 2, "high": best.lr_scale * 2}.get(edge)
    at = rates.index(best.lr_scale)
    neighbours = set(rates[max(at - 1, 0) : at + 2])
    required = tuple(sorted(grid | neighbours | ({next_rate} if next_rate else set())))
    full = {p.lr_scale for p in points if p.n == len(seeds)}
    complete = edge is None and full >= set(required)
    return VariantTuning(variant, points, best.lr_scale, edge, next_rate, required, complete)


def missing_runs(tunings: Sequence[VariantTuning], protocol: Protocol) -> list[MissingRun]:
    """The required points (the grid, the chosen rate's neighbours, the step past an edge) no
    finished or diverged run holds."""
    missing = []
    for tuning in tunings:
        have = {(p.lr_scale, r.seed) for p in tuning.points for r in p.runs}
        missing += [
            MissingRun(tuning.variant, rate, seed)
            for rate in tuning.required
            for seed in sorted(set(protocol.seeds))
            if (rate, seed) not in have
        ]
    return missing


def in_checkout(path: Path) -> str:
    """A path as a command run from the checkout reads it: relative where it lies inside."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def budget_tag(protocol: Protocol) -> str:
    """'_<N>steps' where the grid's overrides set trainer.max_steps, else '': the runs of a
    check at another budget go to folders of their own, not to the short grid's."""
    steps = [o.split("=", 1)[1] for o in protocol.overrides if setting(o) == "trainer.max_steps"]
    return f"_{steps[-1]}steps" if steps else ""


def study_store(
    rate: float,
    runs: Sequence[GridRun],
    stores: Sequence[Path],
    budget: str = "",
    variants: Sequence[str] = (),
) -> tuple[str, str]:
    """(--root, --records) of the study's runs of variants at a rate: the store that holds runs
    at that rate and none of these variants at another (a store holds a variant at one rate),
    else results/archive/pe_study_lr<rate><budget>/runs (results/archive/pe_study<budget>/runs at
    1.0; budget: budget_tag's '_<N>steps' or '')."""
    root = ("outputs/study" if rate == 1.0 else f"outputs/study_lr{rate_tag(rate)}") + budget
    for store in stores:
        held = [r for r in runs if Path(store) in r.path.parents]
        other = any(r.variant in variants and r.lr_scale != rate for r in held)
        if any(r.lr_scale == rate for r in held) and not other:
            return root, in_checkout(Path(store))
    if rate == 1.0 and not budget:
        return root, str(RECORDS.relative_to(ROOT))
    name = "pe_study" if rate == 1.0 else f"pe_study_lr{rate_tag(rate)}"
    return root, f"results/archive/{name}{budget}/runs"


def plan_commands(
    missing: Sequence[MissingRun],
    protocol: Protocol,
    runs: Sequence[GridRun],
    stores: Sequence[Path],
) -> list[str]:
    """Ready-to-run commands that train the missing points: one `scripts/study.py run` a rate
    for a study condition (it skips what its store holds), one `train.py` a point otherwise."""
    commands = []
    for rate in sorted({m.lr_scale for m in missing}):
        here = [m for m in missing if m.lr_scale == rate]
        if protocol.experiment is None:
            variants = sorted({m.variant for m in here})
            root, store = study_store(rate, runs, stores, budget_tag(protocol), variants)
            words = ["python", "scripts/study.py", "run", "--condition", protocol.condition]
            words += ["--variants", *variants]
            words += ["--seeds", *map(str, sorted({m.seed for m in here}))]
            words += ["--jobs", "2", "--root", root, "--records", store, "--"]
            commands.append(
                shlex.join(words + [f"optim.lr_scale={rate_text(rate)}", *protocol.overrides])
            )
            continue
        for m in here:
            run_dir = protocol.root / f"lr{rate_tag(rate)}" / protocol.experiment / m.variant
            words = ["python", "train.py", *point_overrides(protocol, m.variant, m.seed, rate)]
            commands.append(shlex.join(words + [f"hydra.run.dir={run_dir / f'seed-{m.seed}'}"]))
    return commands


def default_stores(protocol: Protocol) -> list[Path]:
    """The study's record stores (results/archive/pe_study/runs, results/archive/pe_study_lr*/runs),
    or an experiment's <root>/lr*: those that exist."""
    if protocol.experiment is None:
        found = [RECORDS, *sorted((ROOT / "results" / "archive").glob("pe_study_lr*/runs"))]
    else:
        found = sorted(Path(protocol.root).glob("lr*"))
    return [p for p in found if p.is_dir()]


def point_json(point: RatePoint) -> PointEntry:
    """tuning.json's entry of one rate: each seed's dev PPL (None: diverged), mean and n."""
    finite = point.mean is not None and math.isfinite(point.mean)
    return PointEntry(
        lr_scale=point.lr_scale,
        dev_ppl_by_seed={str(r.seed): None if r.diverged else r.dev_ppl for r in point.runs},
        diverged_seeds=[r.seed for r in point.runs if r.diverged],
        mean=point.mean if finite else None,
        n=point.n,
        runs=[str(r.path) for r in point.runs],
    )


def tuning_json(
    tunings: Sequence[VariantTuning],
    protocol: Protocol,
    stores: Sequence[Path],
    runs: Sequence[GridRun],
    unfinished: Sequence[str],
) -> TuningResult:
    """Every number of tuning.json: per variant, per rate, the seeds' dev PPL; the choices."""
    missing = missing_runs(tunings, protocol)
    return TuningResult(
        criterion="lowest mean dev PPL at the last step over the grid's seeds (every seed "
        "at that rate finished; a diverged run counts as infinite); test scores are not read",
        experiment=protocol.experiment_config,
        folder=protocol.folder,
        overrides=list(protocol.overrides),
        stores=[str(s) for s in stores],
        rates=sorted({float(r) for r in protocol.rates}),
        seeds=sorted(set(protocol.seeds)),
        max_steps=sorted({r.max_steps for r in runs}),
        variants={
            t.variant: VariantEntry(
                [point_json(p) for p in t.points], t.chosen, t.edge, t.next_rate, t.complete
            )
            for t in tunings
        },
        missing=missing,
        commands=plan_commands(missing, protocol, runs, stores),
        unfinished=list(unfinished),
    )


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
    """One or more tuning.json as `run --tuning` reads them: the grid's configuration and each
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

    def final_rate(self, variant: str) -> float:
        """The variant's chosen rate, refused where the grid has no final choice for it."""
        choice = self.choices.get(variant)
        if choice is None:
            raise TuningError(
                f"{self.name} tuned no rate for {variant} (it tuned {', '.join(self.choices)}): "
                f"add {variant} to the grid (study.py tune --variants {variant} --plan)"
            )
        if not choice.complete or choice.lr_scale is None:
            chosen = "none yet" if choice.lr_scale is None else f"×{choice.lr_scale:g} so far"
            raise TuningError(
                f"{variant}'s rate in {choice.source} is not final ({chosen}; grid points "
                f"without a run: {', '.join(choice.missing) or 'none'}): train them (study.py "
                "tune --plan) and tune again"
            )
        return choice.lr_scale


def read_tuning_result(path: Path) -> TuningResult:
    """One tuning.json written by `tune`, typed; a missing or foreign file is one TuningError."""
    path = Path(path)
    if not path.is_file():
        raise TuningError(f"{path}: no such file; pass a tuning.json of `study.py tune`")
    try:
        return from_json(TuningResult, read_json(path))
    except (KeyError, TypeError, AttributeError) as e:
        raise TuningError(
            f"{path} is not a tuning.json of `study.py tune` (missing or malformed: {e}): "
            "write it with tune"
        ) from e


def read_tuning_file(path: Path) -> TunedRates:
    """One tuning.json written by `tune`, as `run --tuning` reads it (read_tuning_result)."""
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
        settings = [" ".join(position_settings(f.overrides)) or "none" for f in (first, other)]
        if settings[0] != settings[1]:
            raise TuningError(
                f"{first.name} and {other.name} tuned at other position.* settings "
                f"({settings[0]}; {settings[1]}): `run --tuning` trains with one grid's "
                "settings, so pass such a grid (SHAPE's K) on its own; `report --tuning` takes both"
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


def ppl_cell(value: float | None) -> str:
    """A dev PPL to two places; diverged: inf; none: an em dash."""
    if value is None:
        return "—"
    return "inf (diverged)" if not math.isfinite(value) else f"{value:.2f}"


def point_cells(dev_ppl_by_seed: dict[str, float | None], mean: float | None, n: int) -> str:
    """A point's 'dev PPL by seed | mean | n' cells (diverged: inf)."""
    seeds = ", ".join(
        f"{s}: {ppl_cell(math.inf if v is None else v)}" for s, v in dev_ppl_by_seed.items()
    )
    mean = mean if mean is not None or n == 0 else math.inf
    return f"{seeds or '—'} | {ppl_cell(mean)} | {n}"


def grid_head(
    title: str, max_steps: list[int], seeds: list[int], criterion: str, column: str
) -> list[str]:
    """The title (with the grid's steps and seeds), the criterion and the table's head."""
    steps = ", ".join(map(str, max_steps)) or "—"
    return [
        f"# {title}, {steps} steps, seeds {', '.join(map(str, seeds))}",
        "",
        f"Chosen per variant: {criterion}.",
        "",
        f"| variant | {column} | dev PPL by seed | mean | n | |",
        "|---|---|---|---|---|---|",
    ]


def tuning_markdown(result: TuningResult) -> str:
    """tuning.md: dev PPL per variant and rate, the chosen rate, what is left to run."""
    title = f"Learning-rate tuning: {result.experiment}"
    lines = grid_head(title, result.max_steps, result.seeds, result.criterion, "optim.lr_scale")
    for variant, row in result.variants.items():
        for point in row.rates:
            chosen = "**chosen**" if row.complete else "chosen so far"
            mark = chosen if point.lr_scale == row.chosen_lr_scale else ""
            cells = point_cells(point.dev_ppl_by_seed, point.mean, point.n)
            lines.append(f"| {variant} | {point.lr_scale:g} | {cells} | {mark} |")
    lines += ["", "| variant | chosen | at an edge | final |", "|---|---|---|---|"]
    for variant, row in result.variants.items():
        chosen = "—" if row.chosen_lr_scale is None else f"{row.chosen_lr_scale:g}"
        edge = "no" if row.at_edge is None else f"{row.at_edge}: run {row.next_rate:g}"
        lines.append(f"| {variant} | {chosen} | {edge} | {'yes' if row.complete else 'no'} |")
    lines += ["", f"Missing grid points ({len(result.missing)}):", ""]
    lines += ["```bash", *result.commands, "```"] if result.commands else ["none"]
    return "\n".join(lines) + "\n"


def plot_tuning(result: TuningResult, path: Path) -> None:
    """Dev PPL against the rate (log-log), one line per variant (means where every seed ran),
    seeds as dots, diverged runs as crosses at the top, the chosen rate ringed."""
    fig, ax = figure(height_cm=7.5)
    colours = variant_colours(result.variants)
    for variant, row in result.variants.items():
        colour = colours[variant]
        means = [  # the rates every grid seed ran
            (p.lr_scale, p.mean)
            for p in row.rates
            if p.mean is not None and p.n == len(result.seeds)
        ]
        if means:
            ax.plot(*zip(*means, strict=True), color=colour, marker="_", label=variant)
        for p in row.rates:
            values = [v for v in p.dev_ppl_by_seed.values() if v is not None]
            ax.scatter([p.lr_scale] * len(values), values, color=colour, s=12, zorder=3)
            if p.diverged_seeds:
                ax.scatter(p.lr_scale, 0.97, color=colour, marker="x",
                           transform=ax.get_xaxis_transform())  # fmt: skip
            if p.lr_scale == row.chosen_lr_scale and p.mean is not None:
                ax.scatter(p.lr_scale, p.mean, s=60, facecolors="none",
                           edgecolors=colour, zorder=4)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")  # the x2 points are 4-5 times the rest: a linear axis hides the choice
    log_axis(ax.yaxis)
    rates = sorted({p.lr_scale for row in result.variants.values() for p in row.rates})
    ax.set_xticks(rates, [f"{rate:g}" for rate in rates])
    ax.set_xlabel("optim.lr_scale (× the schedule's rate)")
    ax.set_ylabel("dev PPL at the last step (line: mean of seeds)")
    steps = ", ".join(f"{s:,}" for s in result.max_steps)  # the grid's budget(s)
    ax.set_title(f"Rate grid, {steps} steps (ring: chosen; ×: diverged)")
    if ax.get_legend_handles_labels()[0]:  # a line where every grid seed ran some rate
        ax.legend(ncols=3)
    save(fig, path)


def tune(
    stores: Sequence[Path] | None,
    protocol: Protocol,
    out: Path | None = None,
    echo: Callable[[str], None] = print,
) -> TuningResult:
    """Read the grid's runs, choose each variant's rate; out None: print the plan only."""
    check_grid(protocol)
    check_experiment(protocol.experiment)
    stores = default_stores(protocol) if stores is None else [Path(s) for s in stores]
    runs, unfinished = read_stores(stores, protocol.folder)
    variants = protocol.variants or tuple(sorted({r.variant for r in runs}))
    if not variants:
        raise TuningError(
            f"no finished run of {protocol.folder} in {', '.join(map(str, stores)) or 'no store'}:"
            " pass --variants to plan the grid (tune --plan)"
        )
    runs = [r for r in runs if r.variant in variants]
    check_overrides(protocol, variants[0])
    check_one_configuration(runs)
    check_protocol(runs, protocol)
    tunings = [tune_variant(v, runs, protocol) for v in variants]
    result = tuning_json(tunings, protocol, stores, runs, unfinished)
    if out is None:
        echo(f"tune: {len(result.missing)} grid points missing; to train them:")
        for command in result.commands:
            echo(command)
        return result
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "tuning.json", asdict(result))
    write_text(out / "tuning.md", tuning_markdown(result))
    plot_tuning(result, out / "dev_ppl_vs_lr.png")
    echo(tuning_markdown(result))
    echo(f"written: {out}/ (tuning.json, tuning.md, dev_ppl_vs_lr.png)")
    if protocol.experiment and all(t.complete for t in tunings):
        echo(
            "the final runs, each variant at its rate: python scripts/study.py run --experiment "
            f"{protocol.experiment} --tuning {out / 'tuning.json'} --seeds <seeds> -- <budget>"
        )
    return result


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
        at = "none yet" if r.plateau_step is None else f"step {r.plateau_step}"
        last = f"dev PPL {r.curve[-1][1]:.2f} at step {r.curve[-1][0]}" if r.curve else "no eval"
        echo(f"plateau: {r.path}: {r.variant} lr×{r.lr_scale:g}, {last}, plateau: {at}")
    echo(f"plateau: budget {why}")
    echo(f"written: {out}/ (plateau.json, dev_ppl_plateau.png)")
    return result
