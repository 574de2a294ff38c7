"""A study declared in one file: `configs/study/<name>.yaml`, read through a typed schema.

What differs between two studies is data, not code (docs/declare-a-study.md): the experiment
every run composes, the variants and their own settings, the conditions (data overrides, their
control, their analyses, tuned or reusing another condition's rates), the learning-rate grid and
its budget, the check rule at the final budget, the finals, the test sets, the search and the
statistics. The schema below is the whole of it: a key it does not hold, or a value of the wrong
type, is one line naming the key (OmegaConf's structured configs check both); so is a number out
of its range, inf and nan included (check_numbers, check_settings, check_seed_counts).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from common.configs import CONFIG_DIR, compose_config
from common.errors import UserError, first_line
from evaluation.evaluate import MAX_BEAM, MAX_LENPEN
from model.transformer import build_model
from runs.settings import check_training_settings

# Written into every record a study keeps (record.json "schema"); raise it when a record's
# meaning changes, with a migration script beside the change.
SCHEMA_VERSION = 1
STUDY_DIR = CONFIG_DIR / "study"
# The settings a study sets for each run itself: never in a study's or a variant's overrides
STUDY_KEYS = ("experiment", "position", "seed", "optim.lr_scale", "trainer.max_steps", "run_dir")
ANALYSES = ("buckets", "concat")  # length buckets (studies/buckets.py), joined lines (concat.py)
CORRECTIONS = ("holm", "bh")  # Holm (family-wise) and Benjamini-Hochberg (false discovery rate)


class StudyConfigError(UserError):
    """A study config that does not fit the schema or names what does not exist, in one line."""


@dataclass
class ChooseSpec:
    """A variant setting chosen on dev before its rate (SHAPE's K): one grid-budget run per
    value and grid seed at `rate`; the lowest mean dev PPL wins."""

    key: str = "???"  # the config key, e.g. position.max_shift
    values: list[str] = field(default_factory=list)  # the values tried
    rate: float = 1.0  # the optim.lr_scale they are tried at


@dataclass
class VariantSpec:
    """One variant: its configs/position name and its own settings."""

    position: str | None = None  # configs/position/<name>.yaml; None: the variant's own name
    overrides: list[str] = field(default_factory=list)  # e.g. position.max_shift=10
    choose: ChooseSpec | None = None  # a setting chosen on dev (the settings stage)
    fixed_from: str | None = None  # where a fixed setting's value came from (printed)


@dataclass
class ConditionSpec:
    """A training condition: data overrides, its control, analyses, where its rates come from."""

    overrides: list[str] = field(default_factory=list)  # its data settings
    variants: list[str] | None = None  # None: every variant of the study
    control: str | None = None  # the condition its analyses compare with
    analyses: list[str] = field(default_factory=list)  # some of ANALYSES
    rates_from: str | None = None  # reuse that condition's chosen rates (a stated deviation)
    seeds: int | None = None  # final seeds of every variant here (None: final's)


@dataclass
class GridSpec:
    """The learning-rate grid (§5.3's schedule times optim.lr_scale) at a short budget."""

    rates: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0])  # lr_scale, > 0
    steps: int = 2000  # the grid's budget (trainer.max_steps)
    seeds: list[int] = field(default_factory=lambda: [1, 2])  # each rate's seeds
    edge_steps: int = 3  # a winner at an edge adds the rate beyond it, at most this often


@dataclass
class CheckSpec:
    """The check at the final budget: the grid's choice and each neighbour whose grid mean dev
    PPL is within ×within of it, `seeds` each; the lowest mean dev PPL wins."""

    within: float = 2.0  # a neighbour is checked where its grid mean <= within x the choice's
    seeds: list[int] = field(default_factory=lambda: [1, 2])  # 1..N: the first finals


@dataclass
class ExtendSpec:
    """Finals trained on past the final budget (the schedule does not depend on max_steps)."""

    steps: int | None = None  # None: no extension
    seeds: list[int] = field(default_factory=list)  # the final seeds trained on


@dataclass
class FinalSpec:
    """The finals: each variant at its chosen rate, scored on the test sets."""

    steps: int = 8000  # the final budget (trainer.max_steps)
    seeds: int = 5  # seeds 1..seeds; the check's seeds at the chosen rate are the first ones
    seeds_by_variant: dict[str, int] = field(default_factory=dict)  # a variant's own count
    average_last: int = 0  # also score the average of the last N step checkpoints (0: no)
    extend: ExtendSpec = field(default_factory=ExtendSpec)  # finals trained on past steps


@dataclass
class SearchSpec:
    """Beam search of the scored translations (§6.1: beam 4, length penalty α 0.6)."""

    beam: int = 4  # beam size: 1 to evaluate.py's MAX_BEAM (1000)
    lenpen: float = 0.6  # length penalty alpha: 0 to evaluate.py's MAX_LENPEN (10)


@dataclass
class StatisticsSpec:
    """Paired differences from each baseline, corrected per family, and equivalence (TOST)."""

    baselines: list[str] = field(default_factory=list)  # variants every other is compared to
    correction: list[str] = field(default_factory=lambda: list(CORRECTIONS))  # holm, bh
    equivalence_margin: float = 1.0  # BLEU: TOST's margin for "no difference" (finite, > 0)
    confidence: float = 0.95  # of every interval: above 0 and below 1


@dataclass
class CostSpec:
    """The CPU-hour estimate before any run of the study is recorded (then: the records')."""

    cpu_seconds_per_step: float = 0.3  # one thread, fp32, the study's tiny model (records), > 0


@dataclass
class StudySpec:
    """A whole study: `python scripts/run_study.py <name>` runs it end to end."""

    name: str = "???"  # the file's name: configs/study/<name>.yaml, results/<name>/
    schema: int = SCHEMA_VERSION  # the schema this file is written for
    description: str = ""  # what the study asks, printed atop its report
    experiment: str = "???"  # configs/experiment/<name>.yaml
    overrides: list[str] = field(default_factory=list)  # every run's
    data_source: str = ""  # where the data comes from, when the default does not reach it
    variants: dict[str, VariantSpec] = field(default_factory=dict)  # name: VariantSpec
    conditions: dict[str, ConditionSpec] = field(default_factory=dict)  # name: ConditionSpec
    grid: GridSpec = field(default_factory=GridSpec)  # the rate grid at a short budget
    check: CheckSpec = field(default_factory=CheckSpec)  # the check at the final budget
    final: FinalSpec = field(default_factory=FinalSpec)  # the finals
    test: list[str] = field(default_factory=lambda: ["test"])  # the splits the finals score
    search: SearchSpec = field(default_factory=SearchSpec)  # beam search of the scores
    statistics: StatisticsSpec = field(default_factory=StatisticsSpec)  # the comparisons
    cost: CostSpec = field(default_factory=CostSpec)  # the dry run's estimate

    def position(self, variant: str) -> str:
        """The configs/position name a variant trains."""
        return self.variants[variant].position or variant

    def condition_variants(self, condition: str) -> list[str]:
        """The variants a condition trains, in the study's order."""
        chosen = self.conditions[condition].variants
        return [v for v in self.variants if chosen is None or v in chosen]

    def final_seeds(self, condition: str, variant: str) -> list[int]:
        """The final seeds of a variant in a condition: 1..N."""
        count = self.conditions[condition].seeds
        if count is None:
            count = self.final.seeds_by_variant.get(variant, self.final.seeds)
        return list(range(1, count + 1))

    def tuned_pairs(self) -> list[tuple[str, str]]:
        """Every (condition, variant) whose rate the grid and the check choose."""
        return [(c, v) for c in self.tuned_conditions() for v in self.condition_variants(c)]

    def tuned_conditions(self) -> list[str]:
        """The conditions whose rates the grid and the check choose."""
        return [c for c, spec in self.conditions.items() if spec.rates_from is None]


def study_path(name: str) -> Path:
    """configs/study/<name>.yaml, or name itself where it is a .yaml file."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        return path
    return STUDY_DIR / f"{name}.yaml"


def load_study(name: str) -> StudySpec:
    """The study a name (configs/study/<name>) or a .yaml path declares, checked."""
    path = study_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in STUDY_DIR.glob("*.yaml")))
        raise StudyConfigError(
            f"study {name}: no file {path}; pass one of {known} or a path to a .yaml"
        )
    try:
        merged = OmegaConf.merge(OmegaConf.structured(StudySpec), OmegaConf.load(path))
        study = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        where = f" {key}:" if key else ""
        raise StudyConfigError(f"{path}:{where} {first_line(e)}; see docs/study-schema.md") from e
    except yaml.YAMLError as e:  # a key given twice, a broken indent (probe f-3)
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark else ""
        problem = getattr(e, "problem", None) or first_line(e)
        raise StudyConfigError(f"{path}:{line} {problem}; fix the YAML") from e
    check_study(study, path)
    return study


def setting_key(override: str) -> str:
    """The config key an override sets (`+a.b=1` -> a.b)."""
    return override.split("=", 1)[0].lstrip("+~")


def check_overrides(path: Path, where: str, overrides: list[str]) -> None:
    """Refuse an override of a key the study sets itself, or one that is no key=value."""
    for override in overrides:
        if "=" not in override:
            raise StudyConfigError(f"{path}: {where}: '{override}' is no key=value override")
        if setting_key(override) in STUDY_KEYS:
            raise StudyConfigError(
                f"{path}: {where}: {setting_key(override)} is set by the study itself "
                "(variants, grid, check, final); take it out"
            )


def check_names(path: Path, study: StudySpec) -> None:
    """Every variant, condition and baseline a study names exists; its numbers are in range."""
    known = sorted(p.stem for p in (CONFIG_DIR / "position").glob("*.yaml"))
    if not study.variants or not study.conditions:
        raise StudyConfigError(f"{path}: variants and conditions: declare at least one of each")
    for name in study.variants:
        if study.position(name) not in known:
            raise StudyConfigError(
                f"{path}: variants.{name}: position {study.position(name)} is not in "
                f"configs/position ({', '.join(known)}); set variants.{name}.position"
            )
    for name, spec in study.conditions.items():
        for key, value in (("control", spec.control), ("rates_from", spec.rates_from)):
            if value is not None and (value not in study.conditions or value == name):
                raise StudyConfigError(
                    f"{path}: conditions.{name}.{key}: {value} is not another condition "
                    f"({', '.join(study.conditions)})"
                )
        if spec.rates_from and study.conditions[spec.rates_from].rates_from:
            raise StudyConfigError(
                f"{path}: conditions.{name}.rates_from: {spec.rates_from} reuses rates itself; "
                "name the tuned condition"
            )
        for value in spec.variants or ():
            if value not in study.variants:
                raise StudyConfigError(
                    f"{path}: conditions.{name}.variants: {value} is not in variants "
                    f"({', '.join(study.variants)})"
                )
        for analysis in spec.analyses:
            if analysis not in ANALYSES:
                raise StudyConfigError(
                    f"{path}: conditions.{name}.analyses: {analysis}; pass some of "
                    f"{', '.join(ANALYSES)}"
                )
    for value in study.final.seeds_by_variant:
        if value not in study.variants:
            raise StudyConfigError(
                f"{path}: final.seeds_by_variant.{value}: not in variants "
                f"({', '.join(study.variants)})"
            )
    for i, baseline in enumerate(study.statistics.baselines):
        if baseline not in study.variants:
            raise StudyConfigError(
                f"{path}: statistics.baselines: {baseline} is not one of the variants"
            )
        if baseline in study.statistics.baselines[:i]:  # each comparison once (probe f-5)
            raise StudyConfigError(f"{path}: statistics.baselines: {baseline} is given twice")


def refuse_problems(path: Path, problems: list[tuple[str, object, bool, str]]) -> None:
    """Raise StudyConfigError for the first (key, value, wrong, wanted) that is wrong."""
    for key, value, wrong, wanted in problems:
        if wrong:
            raise StudyConfigError(f"{path}: {key}: {value}; pass {wanted}")


def check_numbers(path: Path, study: StudySpec) -> None:
    """Rates finite and positive, two or more seeds, budgets that grow, a sane check rule."""
    # nan fails every comparison: each range below is written `not <in range>` to refuse it
    grid, check, final = study.grid, study.check, study.final
    refuse_problems(path, [
        ("grid.rates", grid.rates,
         not grid.rates or not all(0 < rate < math.inf for rate in grid.rates),
         "finite rates above 0"),
        ("grid.rates", grid.rates, len(set(grid.rates)) < len(grid.rates), "each rate once"),
        ("grid.seeds", grid.seeds, len(set(grid.seeds)) < 2 or min(grid.seeds) < 0,
         "two or more different seeds, each 0 or more"),  # [1, 1]: "different" (probe f-25)
        ("grid.seeds", grid.seeds, len(set(grid.seeds)) < len(grid.seeds), "each seed once"),
        ("grid.steps", grid.steps, grid.steps < 1, "a step budget of 1 or more"),
        ("grid.edge_steps", grid.edge_steps, grid.edge_steps < 0, "0 or more"),
        ("check.seeds", check.seeds, len(set(check.seeds)) < 2, "two or more different seeds"),
        ("check.within", check.within, not 1 <= check.within < math.inf,
         "a finite factor of at least 1"),
        ("final.steps", final.steps, final.steps < grid.steps,
         f"at least grid.steps ({grid.steps})"),
        ("final.seeds", final.seeds, final.seeds < len(check.seeds),
         f"at least as many as check.seeds ({len(check.seeds)})"),
        ("final.average_last", final.average_last, final.average_last < 0,
         "0 (no average) or a number of last checkpoints"),
        ("final.extend.steps", final.extend.steps,
         final.extend.steps is not None and final.extend.steps <= final.steps,
         f"more than final.steps ({final.steps}), or null (no extension)"),
        ("statistics.correction", study.statistics.correction,
         not set(study.statistics.correction) <= set(CORRECTIONS),
         f"some of {', '.join(CORRECTIONS)}"),
    ])  # fmt: skip
    if sorted(check.seeds) != list(range(1, len(check.seeds) + 1)):
        raise StudyConfigError(
            f"{path}: check.seeds: pass 1..N (the chosen rate's check runs are its first finals)"
        )


def check_settings(path: Path, study: StudySpec) -> None:
    """The search in evaluate.py's ranges, the statistics' confidence and margin, the cost."""
    search, statistics = study.search, study.statistics
    cost = study.cost.cpu_seconds_per_step
    refuse_problems(path, [
        ("search.beam", search.beam, not 1 <= search.beam <= MAX_BEAM,
         f"a whole number from 1 (greedy) to {MAX_BEAM} (the paper: 4)"),
        ("search.lenpen", search.lenpen, not 0 <= search.lenpen <= MAX_LENPEN,
         f"a number from 0 to {MAX_LENPEN:g} (the paper: 0.6)"),
        ("statistics.confidence", statistics.confidence, not 0 < statistics.confidence < 1,
         "a share above 0 and below 1 (e.g. 0.95)"),
        ("statistics.equivalence_margin", statistics.equivalence_margin,
         not 0 < statistics.equivalence_margin < math.inf, "a finite positive margin in BLEU"),
        ("cost.cpu_seconds_per_step", cost, not 0 < cost < math.inf,
         "a finite number of CPU-seconds above 0"),
    ])  # fmt: skip


def check_seed_counts(path: Path, study: StudySpec) -> None:
    """Final seeds that hold the check's, extended seeds that are finals, sane dev choices."""
    least = len(study.check.seeds)  # the check's runs at the chosen rate are the first finals
    problems = [
        (f"final.seeds_by_variant.{name}", count, count < least,
         f"at least as many as check.seeds ({least})")
        for name, count in study.final.seeds_by_variant.items()
    ]  # fmt: skip
    for name, spec in study.conditions.items():
        low = 1 if spec.rates_from else least  # a reused rate has no check runs
        wrong = spec.seeds is not None and spec.seeds < low
        problems.append((f"conditions.{name}.seeds", spec.seeds, wrong, f"{low} or more, or null"))
    for name, variant in study.variants.items():
        if variant.choose is not None:
            rate = variant.choose.rate
            where = f"variants.{name}.choose"
            values = variant.choose.values
            problems += [
                (f"{where}.rate", rate, not 0 < rate < math.inf, "a finite rate above 0"),
                (f"{where}.values", values, not values, "one or more values to try"),
            ]
    extend = study.final.extend
    pairs = [(c, v) for c in study.conditions for v in study.condition_variants(c)]
    most = max((len(study.final_seeds(c, v)) for c, v in pairs), default=0)
    problems += [
        ("final.extend.seeds", extend.seeds,
         not all(1 <= seed <= most for seed in extend.seeds),
         f"final seeds (1 to {most}) to train on"),
        ("final.extend.seeds", extend.seeds, bool(extend.steps) != bool(extend.seeds),
         "one or more final seeds with final.extend.steps, none without"),
    ]  # fmt: skip
    refuse_problems(path, problems)


def check_trainable(words: list[str], given: list[str]) -> None:
    """What train.py would refuse of a run's config, refused before anything trains: a key
    nothing reads (probe f-7, f-9), a setting out of range or read only under another (given:
    the overrides the run's command line passes), a setting the model or its position encoding
    refuses (f-28: RoPE's factor without a scaling planned, then every rope run failed)."""
    cfg = compose_config(words)
    check_training_settings(cfg, given)
    with torch.device("meta"):  # the settings checked, no weights made
        build_model(cfg.model, cfg.position, vocab_size=8)


def check_composes(path: Path, study: StudySpec) -> None:
    """The experiment and every override compose, for each variant and condition."""
    check_overrides(path, "overrides", study.overrides)
    for name, variant in study.variants.items():
        check_overrides(path, f"variants.{name}.overrides", variant.overrides)
    for name, condition in study.conditions.items():
        check_overrides(path, f"conditions.{name}.overrides", condition.overrides)
    for condition in study.conditions:
        for variant in study.condition_variants(condition):
            words = run_overrides(study, condition, variant)
            try:
                check_trainable([*words, "run_dir=."], words)  # a key nothing reads (f-7)
            except (HydraException, OmegaConfBaseException, UserError) as e:
                raise StudyConfigError(
                    f"{path}: {condition}/{variant} does not compose ({first_line(e)}): fix "
                    "experiment or the overrides"
                ) from e


def check_study(study: StudySpec, path: Path) -> None:
    """Refuse a study that names what does not exist or cannot train, in one line."""
    if study.schema != SCHEMA_VERSION:
        raise StudyConfigError(
            f"{path}: schema: {study.schema}; this code reads schema {SCHEMA_VERSION}"
        )
    if study.name != path.stem:
        raise StudyConfigError(f"{path}: name: {study.name}; a study is named as its file")
    check_names(path, study)
    check_numbers(path, study)
    check_settings(path, study)
    check_seed_counts(path, study)
    check_composes(path, study)


def run_overrides(study: StudySpec, condition: str, variant: str) -> list[str]:
    """The train.py overrides a run of a variant in a condition shares with every other such
    run (the study sets seed, rate, budget and run_dir)."""
    return [
        f"experiment={study.experiment}",
        f"position={study.position(variant)}",
        *study.overrides,
        *study.conditions[condition].overrides,
        *study.variants[variant].overrides,
    ]


def _field_comments(cls: type) -> dict[str, str]:
    """{field: the comment beside it in this file} of a schema dataclass."""
    comments = {}
    for line in inspect.getsource(cls).splitlines():
        match = re.match(r"\s+(\w+): [^=]+=.*?(?:#\s*(.*))?$", line)
        if match:
            comments[match.group(1)] = match.group(2) or ""
    return comments


def _default_text(spec: dataclasses.Field) -> str:
    """A field's default as YAML would write it."""
    if spec.default is not dataclasses.MISSING:
        value = spec.default
    elif spec.default_factory is not dataclasses.MISSING:
        value = spec.default_factory()
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "see below"
    return "(required)" if value == "???" else f"`{json.dumps(value)}`"


def schema_markdown() -> str:
    """docs/study-schema.md: every key of a study config, its type, default and meaning."""
    lines = [
        "# Study config reference",
        "",
        "Generated from `studies/protocol.py` by `python scripts/study_schema.py`; do not edit.",
        f"Schema version {SCHEMA_VERSION}. How to write one: docs/declare-a-study.md.",
        "",
    ]
    for cls in (StudySpec, VariantSpec, ChooseSpec, ConditionSpec, GridSpec, CheckSpec,
                FinalSpec, ExtendSpec, SearchSpec, StatisticsSpec, CostSpec):  # fmt: skip
        comments = _field_comments(cls)
        lines += [f"## {cls.__name__}", "", (cls.__doc__ or "").strip().replace("\n", " "), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for spec in dataclasses.fields(cls):
            kind = str(spec.type).replace("|", "or")
            meaning = comments.get(spec.name, "").replace("|", "/")
            lines.append(f"| `{spec.name}` | {kind} | {_default_text(spec)} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def check_run_overrides(study: StudySpec, overrides: Sequence[str]) -> None:
    """Refuse, before anything trains, command-line overrides of every run that set a key the
    study sets itself or that do not compose with the study (a typo'd key, a missing group)."""
    where = Path("the command line (after --)")
    check_overrides(where, "overrides", list(overrides))
    declared = [
        *study.overrides,
        *(o for spec in study.variants.values() for o in spec.overrides),
        *(o for spec in study.conditions.values() for o in spec.overrides),
    ]
    own = {setting_key(o): o for o in declared}
    for override in overrides:
        if setting_key(override) in own:
            raise StudyConfigError(
                f"{override}: study {study.name} declares {own[setting_key(override)]} itself; "
                "take it out (declare another study to change it)"
            )
    for condition in study.conditions:
        for variant in study.condition_variants(condition):
            words = [*run_overrides(study, condition, variant), *overrides, "run_dir=."]
            try:
                check_trainable(words, words[:-1])  # a key nothing reads (probe f-9)
            except (HydraException, OmegaConfBaseException, UserError) as e:
                raise StudyConfigError(
                    f"{' '.join(overrides)}: does not compose with study {study.name} "
                    f"({first_line(e)}): fix the overrides after --"
                ) from e
