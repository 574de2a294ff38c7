"""What `scripts/study.py report` reads of its study's config: the conditions, roles and plan.

A store's records name their study (record.json "study"); the report loads that study's
configs/study/<name>.yaml and takes from it, never from code: the control (the condition the
others name as their control: Table 3's runs), the condition of each analysis (length buckets,
joined lines) with its control, the baselines (statistics.baselines: the first is Table 3's,
the first two are row (E)) and the plan of finals (condition x variant x seed) whose missing
runs the README names. An older store without record.json names its study by --study.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from common.configs import CONFIG_DIR, compose_config
from common.files import read_json
from studies.plan import StudyError
from studies.protocol import StudySpec, load_study
from studies.store import RECORD_FILE

Pair = tuple[str, str]  # (a condition, its control)


@dataclass(frozen=True)
class ReportedStudy:
    """A study as its report reads it (from configs/study/<name>.yaml)."""

    name: str
    conditions: tuple[str, ...]  # every condition: the folders of the store
    control: str  # the condition the others name as control: Table 3's runs
    buckets: Pair | None  # the condition with the length-bucket analysis, and its control
    concat: Pair | None  # the condition with the joined-lines analysis, and its control
    baselines: tuple[str, ...]  # statistics.baselines: each variant is compared to these
    plan: tuple[tuple[str, str, int], ...]  # (condition, variant, seed) of every final
    experiments: dict[str, tuple[str, ...]]  # a condition's experiment, as train.py words

    @property
    def baseline(self) -> str:
        """Table 3's baseline: the first of statistics.baselines (else the first variant's)."""
        return self.baselines[0]

    @property
    def row_e(self) -> Pair | None:
        """Row (E): the first two baselines (the second minus the first), if there are two."""
        return (self.baselines[0], self.baselines[1]) if len(self.baselines) > 1 else None


def analysis_pair(study: StudySpec, analysis: str, control: str) -> Pair | None:
    """The condition whose analyses hold analysis, and its control (else the study's)."""
    for name, spec in study.conditions.items():
        if analysis in spec.analyses:
            return name, spec.control or control
    return None


def condition_experiment(study: StudySpec, condition: str) -> tuple[str, ...]:
    """The train.py words that compose a condition's runs: a configs/experiment file of its own
    where one extends the study's experiment and composes to it with the condition's overrides,
    else the study's experiment with those overrides."""
    spec = study.conditions[condition]
    words = (f"experiment={study.experiment}", *study.overrides, *spec.overrides)
    if not spec.overrides:
        return words

    def settings(overrides) -> dict:
        config = compose_config([*overrides, "run_dir=."])
        return OmegaConf.to_container(config, resolve=True)

    wanted = settings(words)
    for path in sorted((CONFIG_DIR / "experiment").glob("*.yaml")):
        own = (f"experiment={path.stem}", *study.overrides)
        if study.experiment in (OmegaConf.load(path).get("defaults") or []):
            if settings(own) == wanted:
                return own
    return words


def reported_study(study: StudySpec) -> ReportedStudy:
    """What the report reads of a study's config."""
    named = [spec.control for spec in study.conditions.values() if spec.control]
    control = named[0] if named else next(iter(study.conditions))
    plan = tuple(
        (condition, variant, seed)
        for condition in study.conditions
        for variant in study.condition_variants(condition)
        for seed in study.final_seeds(condition, variant)
    )
    return ReportedStudy(
        name=study.name,
        conditions=tuple(study.conditions),
        control=control,
        buckets=analysis_pair(study, "buckets", control),
        concat=analysis_pair(study, "concat", control),
        baselines=tuple(study.statistics.baselines) or (next(iter(study.variants)),),
        plan=plan,
        experiments={c: condition_experiment(study, c) for c in study.conditions},
    )


def store_study(root: Path, name: str | None) -> str:
    """The study a store's records name (record.json "study"), else name (--study); records of
    two studies, or a --study other than theirs, are refused in one line."""
    named: dict[str, Path] = {}
    for path in sorted(Path(root).glob(f"**/{RECORD_FILE}")):
        named.setdefault(str(read_json(path).get("study")), path)
    if len(named) > 1:
        found = "; ".join(f"{study} ({path})" for study, path in named.items())
        raise StudyError(f"{root} holds records of {len(named)} studies ({found}): report one")
    if named and name is not None and name not in named:
        (study,) = named
        raise StudyError(f"--study {name}: {root}'s records are of {study}; leave --study out")
    if named:
        return next(iter(named))
    if name is None:
        raise StudyError(
            f"no {RECORD_FILE} under {root} names the records' study (a store older than "
            "record.json): pass --study <name> (configs/study/<name>.yaml)"
        )
    return name


def load_reported(root: Path, name: str | None) -> ReportedStudy:
    """The study of a store's records (store_study), as its report reads it."""
    return reported_study(load_study(store_study(root, name)))
